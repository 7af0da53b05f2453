#include "allreduce/tcp/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <thread>

#include "common/error.h"

namespace gradsync::tcp {
namespace {

std::string errno_text(int error) { return std::strerror(error); }

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { freeaddrinfo(info); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

AddrInfoPtr resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    throw Error("cannot resolve " + format_endpoint(host, port) + ": " + gai_strerror(rc));
  }
  return AddrInfoPtr(result);
}

// Connecting to a loopback port in the ephemeral range that nobody listens on can succeed as
// a TCP "simultaneous open" of the socket with itself, when the kernel happens to pick that very
// port as the source. A retry loop against a peer that is not up yet makes this likely enough
// to guard against.
bool connected_to_itself(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
    return false;
  }
  return local_len == peer_len && std::memcmp(&local, &peer, local_len) == 0;
}

}  // namespace

int poll_timeout_ms(Clock::time_point deadline) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

int Socket::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

std::string format_endpoint(const std::string& host, int port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string format_address(const sockaddr_storage& address) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
  }
  return format_endpoint(host, port);
}

void parse_endpoint(const std::string& endpoint, std::string& host, int& port) {
  const auto colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon + 1 == endpoint.size()) {
    throw Error("bad endpoint '" + endpoint + "' (expected host:port)");
  }
  host = endpoint.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  try {
    std::size_t used = 0;
    port = std::stoi(endpoint.substr(colon + 1), &used);
    if (used != endpoint.size() - colon - 1 || port < 0 || port > 65535) throw 0;
  } catch (...) {
    throw Error("bad endpoint '" + endpoint + "' (port is not 0..65535)");
  }
}

Socket listen_on(const std::string& host, int port, SocketBuffers buffers, bool held) {
  const AddrInfoPtr info = resolve(host, port);
  std::string failure = "no address";
  for (const addrinfo* a = info.get(); a != nullptr; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) {
      failure = errno_text(errno);
      continue;
    }
    // A restarted rank 0 must be able to take its well-known port back at once, not after the
    // previous run's connections leave TIME_WAIT.
    const int one = 1;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (held) ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    tune_socket(s.fd(), buffers);
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(s.fd(), 128) != 0) {
      failure = errno_text(errno);
      continue;
    }
    return s;
  }
  throw Error("cannot listen on " + format_endpoint(host, port) + ": " + failure);
}

Socket hold_port(const std::string& host) {
  const AddrInfoPtr info = resolve(host, 0);
  std::string failure = "no address";
  for (const addrinfo* a = info.get(); a != nullptr; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    const int one = 1;
    if (s.valid() && ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == 0 &&
        ::bind(s.fd(), a->ai_addr, a->ai_addrlen) == 0) {
      return s;
    }
    failure = errno_text(errno);
  }
  throw Error("cannot hold a port on " + host + ": " + failure);
}

int local_port(const Socket& socket) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw Error("getsockname failed: " + errno_text(errno));
  }
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

Socket connect_with_retry(const std::string& host, int port, Clock::time_point deadline,
                          std::string& last_error, SocketBuffers buffers) {
  const AddrInfoPtr info = resolve(host, port);
  auto backoff = std::chrono::milliseconds(5);
  last_error = "no attempt before the deadline";
  while (true) {
    for (const addrinfo* a = info.get(); a != nullptr; a = a->ai_next) {
      Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!s.valid()) {
        last_error = errno_text(errno);
        continue;
      }
      // Non-blocking connect so that an unresponsive address (a dropped SYN) cannot hold us past
      // the deadline; the socket goes back to blocking mode for its users.
      tune_socket(s.fd(), buffers);
      const int flags = ::fcntl(s.fd(), F_GETFL);
      ::fcntl(s.fd(), F_SETFL, flags | O_NONBLOCK);
      int error = 0;
      if (::connect(s.fd(), a->ai_addr, a->ai_addrlen) != 0) {
        error = errno;
        if (error == EINPROGRESS) {
          pollfd p{s.fd(), POLLOUT, 0};
          const int rc = ::poll(&p, 1, poll_timeout_ms(deadline));
          if (rc == 0) {
            last_error = "connect timed out";
            return Socket();
          }
          socklen_t len = sizeof(error);
          ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &error, &len);
        }
      }
      if (error == 0 && connected_to_itself(s.fd())) {
        error = ECONNREFUSED;  // see connected_to_itself(): nobody listens there yet
      } else if (error == 0) {
        ::fcntl(s.fd(), F_SETFL, flags);
        return s;
      }
      last_error = errno_text(error);
    }
    // Refused or unreachable: the peer is probably not listening yet. Retry with a growing pause
    // (5 ms .. 100 ms), never sleeping past the deadline.
    const auto now = Clock::now();
    if (now >= deadline) return Socket();
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
}

Socket accept_until(const Socket& listener, Clock::time_point deadline) {
  while (true) {
    pollfd p{listener.fd(), POLLIN, 0};
    const int rc = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return Socket();
    const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return Socket(fd);
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
      throw Error("accept failed: " + errno_text(errno));
    }
  }
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

void tune_socket(int fd, SocketBuffers buffers) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Capped by net.core.{w,r}mem_max; a smaller effective buffer only costs bandwidth.
  if (buffers.send_bytes > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffers.send_bytes, sizeof(buffers.send_bytes));
  }
  if (buffers.receive_bytes > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffers.receive_bytes,
                 sizeof(buffers.receive_bytes));
  }
}

namespace {

// Waits until fd is ready for `events` or the deadline passes.
IoResult wait_ready(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (rc > 0) return {};
    if (rc == 0) return {IoStatus::kTimeout, "timed out"};
    if (errno != EINTR) return {IoStatus::kClosed, errno_text(errno)};
  }
}

}  // namespace

IoResult send_all(int fd, const void* data, std::size_t size, Clock::time_point deadline) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    // MSG_NOSIGNAL: a dead peer must surface as EPIPE here, not as SIGPIPE killing the process.
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      IoResult r = wait_ready(fd, POLLOUT, deadline);
      if (r.status != IoStatus::kOk) return r;
      continue;
    }
    return {IoStatus::kClosed, errno_text(errno)};
  }
  return {};
}

IoResult recv_all(int fd, void* data, std::size_t size, Clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::recv(fd, p, size, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return {IoStatus::kClosed, "connection closed"};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      IoResult r = wait_ready(fd, POLLIN, deadline);
      if (r.status != IoStatus::kOk) return r;
      continue;
    }
    return {IoStatus::kClosed, errno_text(errno)};
  }
  return {};
}

}  // namespace gradsync::tcp
