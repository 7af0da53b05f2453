#include "allreduce/gloo/socket_lookup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

namespace gradsync::gloo {
namespace {

constexpr std::size_t kGlooSendBufferCap = std::size_t(32) << 20;  // tcp::Pair's own cap

// Both ends of `fd` as format_address writes them; false for anything but a connected socket.
bool connection_ends(int fd, std::string& local, std::string& peer) {
  struct stat status {};
  if (fstat(fd, &status) != 0 || !S_ISSOCK(status.st_mode)) return false;
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return false;
  local = tcp::format_address(address);
  length = sizeof address;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return false;
  peer = tcp::format_address(address);
  return true;
}

}  // namespace

tcp::Socket duplicate_connection(const std::string& local, const std::string& peer) {
  DIR* open_files = opendir("/proc/self/fd");
  if (open_files == nullptr) return tcp::Socket();
  tcp::Socket found;
  while (const dirent* entry = readdir(open_files)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(open_files)) continue;
    std::string its_local, its_peer;
    if (connection_ends(int(fd), its_local, its_peer) && its_local == local && its_peer == peer) {
      found = tcp::Socket(fcntl(int(fd), F_DUPFD_CLOEXEC, 0));
      break;
    }
  }
  closedir(open_files);
  return found;
}

std::size_t largest_unread_send() {
  std::ifstream file("/proc/sys/net/core/wmem_max");
  std::size_t bytes = 0;
  if (!(file >> bytes) || bytes == 0) bytes = 212992;
  return std::min(bytes, kGlooSendBufferCap);
}

}  // namespace gradsync::gloo
