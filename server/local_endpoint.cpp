#include "server/local_endpoint.h"

#include <cstdlib>

namespace gradsync {

std::string shard_ipc_endpoint(int tcp_port) {
  return "ipc://@gradsync-shard-" + std::to_string(tcp_port);
}

std::string same_host_endpoint(const std::string& tcp_endpoint) {
  for (const char* loopback : {"tcp://127.", "tcp://localhost:", "tcp://[::1]:"}) {
    if (tcp_endpoint.rfind(loopback, 0) != 0) continue;
    const std::size_t colon = tcp_endpoint.rfind(':');
    char* end = nullptr;
    const long port = std::strtol(tcp_endpoint.c_str() + colon + 1, &end, 10);
    if (port > 0 && port < 65536 && end != nullptr && *end == '\0') {
      return shard_ipc_endpoint(static_cast<int>(port));
    }
  }
  return tcp_endpoint;
}

}  // namespace gradsync
