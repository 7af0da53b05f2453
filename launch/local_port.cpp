#include "launch/local_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <utility>

#include "common/error.h"

namespace gradsync {
namespace {

// Whether 127.0.0.1:port can be bound right now (no SO_REUSEADDR: TIME_WAIT counts as taken).
bool bindable(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(std::string("socket: ") + strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

}  // namespace

std::pair<int, int> ephemeral_port_range(const std::string& path) {
  std::ifstream in(path);
  int first = 0, last = 0;
  if (in >> first >> last && first >= 1 && first <= last && last <= 65535) return {first, last};
  return {32768, 60999};
}

std::pair<int, int> port_draw_range(std::pair<int, int> ephemeral) {
  constexpr int kLowest = 10000;
  constexpr int kEnough = 1000;
  if (ephemeral.first - kLowest >= kEnough) return {kLowest, ephemeral.first - 1};
  if (65535 - ephemeral.second >= kEnough) return {ephemeral.second + 1, 65535};
  return {1024, 65535};  // the whole unprivileged space is ephemeral: nothing better to do
}

int free_local_port() {
  const auto [first, last] = port_draw_range(ephemeral_port_range());
  std::random_device seed;
  std::mt19937 rng(seed());
  std::uniform_int_distribution<int> draw(first, last);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = draw(rng);
    if (bindable(port)) return port;
  }
  throw Error("cannot find a free port on 127.0.0.1 in " + std::to_string(first) + ".." +
              std::to_string(last) + " after 200 tries");
}

}  // namespace gradsync
