#include "launch/inherited_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <string>

#include "common/error.h"

namespace gradsync {

int inherited_listening_socket(const char* variable, int port) {
  const char* text = std::getenv(variable);
  if (text == nullptr) return -1;
  char* end = nullptr;
  const long fd = std::strtol(text, &end, 10);
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  int listening = 0;
  socklen_t flag_length = sizeof listening;
  const bool socket_listening =
      end != text && *end == '\0' && fd >= 3 && fd <= 65535 &&
      getsockname(int(fd), reinterpret_cast<sockaddr*>(&address), &length) == 0 &&
      getsockopt(int(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &flag_length) == 0 && listening;
  if (!socket_listening) {
    throw ConfigError("environment", variable,
                      std::string("'") + text + "' is not a listening socket of this process");
  }
  const int bound = address.ss_family == AF_INET6
                        ? ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port)
                        : ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
  if (port != 0 && bound != port) {
    throw ConfigError("environment", variable,
                      "its socket listens on port " + std::to_string(bound) + ", not on " +
                          std::to_string(port));
  }
  fcntl(int(fd), F_SETFD, FD_CLOEXEC);  // this process's own now: not for its children
  return int(fd);
}

}  // namespace gradsync
