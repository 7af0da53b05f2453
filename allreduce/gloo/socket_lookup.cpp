#include "allreduce/gloo/socket_lookup.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

namespace gradsync::gloo {
namespace {

bool same_address(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return x.sin6_port == y.sin6_port &&
           std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
  }
  return false;
}

// A connected socket bound to `local`: a listening one (no peer) may share the port.
bool is_connected_socket_at(int fd, const sockaddr_storage& local) {
  struct stat status {};
  if (fstat(fd, &status) != 0 || !S_ISSOCK(status.st_mode)) return false;
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return false;
  if (!same_address(address, local)) return false;
  sockaddr_storage peer{};
  length = sizeof peer;
  return getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) == 0;
}

}  // namespace

int duplicate_socket_bound_to(const sockaddr_storage& local) {
  DIR* open_files = opendir("/proc/self/fd");
  if (open_files == nullptr) return -1;
  int found = -1;
  while (const dirent* entry = readdir(open_files)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(open_files)) continue;
    if (is_connected_socket_at(int(fd), local)) {
      found = fcntl(int(fd), F_DUPFD_CLOEXEC, 0);
      break;
    }
  }
  closedir(open_files);
  return found;
}

std::size_t kernel_send_buffer_limit() {
  std::ifstream file("/proc/sys/net/core/wmem_max");
  std::size_t bytes = 0;
  if (file >> bytes && bytes > 0) return bytes;
  return 212992;
}

}  // namespace gradsync::gloo
