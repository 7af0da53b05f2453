// Deadline-aware TCP plumbing shared by TcpStore and TcpRing: an RAII socket, listening,
// connecting with retries, accepting, and whole-buffer send / receive that never wait past a
// deadline.
//
//   auto deadline = Clock::now() + timeout;
//   Socket listener = listen_on("127.0.0.1", 0);               // ephemeral port
//   Socket conn = connect_with_retry("127.0.0.1", port, deadline);
//   IoResult r = send_all(conn.fd(), bytes, size, deadline);   // kOk, kTimeout or kClosed
//
// Every wait here is a poll() bounded by the deadline; nothing blocks forever. Functions that
// only move bytes return an IoResult instead of throwing, so that the caller, which knows which
// rank sits behind a socket and what it was doing, composes the error message. Sockets are not
// thread-safe; shutdown() may be called from another thread to wake a poll() on them.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

struct sockaddr_storage;

namespace gradsync::tcp {

using Clock = std::chrono::steady_clock;

// Milliseconds left until `deadline` for poll(): 0 when past, rounded up so that a poll never
// returns early just to find a few microseconds left.
int poll_timeout_ms(Clock::time_point deadline);

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void close();
  // Wakes any poll() on this socket and sends FIN after queued data; the fd stays open (and
  // cannot be reused by another thread's open()) until close().
  void shutdown();

 private:
  int fd_ = -1;
};

// "host:port" (IPv4, name, or [IPv6]:port).
std::string format_endpoint(const std::string& host, int port);
// The same for a socket address (IPv4 or IPv6; "?:0" for another family): what a peer's or a
// listener's address reads as in messages, whoever made the socket (this file, or Gloo).
std::string format_address(const sockaddr_storage& address);
// Splits "host:port"; throws gradsync::Error on anything else.
void parse_endpoint(const std::string& endpoint, std::string& host, int& port);

// A socket's kernel buffers, set with SO_SNDBUF / SO_RCVBUF (each capped by net.core.wmem_max /
// rmem_max); 0 leaves that one to the kernel's autotuning.
struct SocketBuffers {
  int send_bytes = 0;
  int receive_bytes = 0;
};

// Listens on host:port only (port 0: ephemeral). Throws gradsync::Error naming the address.
// The buffers are set before listen(), so accepted sockets inherit them.
// `held`: the port is held by hold_port() (in this process or another of the same user), and
// this listener shares it.
Socket listen_on(const std::string& host, int port, SocketBuffers buffers = {}, bool held = false);
int local_port(const Socket& socket);

// Holds a free port of `host` for a listener that another process will open, where no socket
// can be handed down (mpirun closes inherited descriptors): bound with SO_REUSEPORT and never
// listening, so that no other program can bind the port (nor can a connect() take it as its
// source port) while only listen_on(..., held = true) of the same user can. Connections go to
// listening sockets only, so none reach this one. Close it once the listener's owner is done.
Socket hold_port(const std::string& host);

// Connects to host:port, retrying refused / unreachable attempts until `deadline` (the peer may
// not be listening yet). Returns an invalid Socket on timeout; `last_error` says why the last
// attempt failed. Throws gradsync::Error only for an unresolvable host.
Socket connect_with_retry(const std::string& host, int port, Clock::time_point deadline,
                          std::string& last_error, SocketBuffers buffers = {});

// Accepts one connection; an invalid Socket means the deadline passed.
Socket accept_until(const Socket& listener, Clock::time_point deadline);

void set_nonblocking(int fd);
// TCP_NODELAY (headers and small collectives must not wait for Nagle) and the buffers.
void tune_socket(int fd, SocketBuffers buffers = {});

enum class IoStatus { kOk, kTimeout, kClosed };
struct IoResult {
  IoStatus status = IoStatus::kOk;
  std::string detail;  // for kClosed: "connection closed" or strerror of the failure
};

// Whole-buffer transfers on a blocking or non-blocking fd, each wait bounded by `deadline`.
IoResult send_all(int fd, const void* data, std::size_t size, Clock::time_point deadline);
IoResult recv_all(int fd, void* data, std::size_t size, Clock::time_point deadline);

}  // namespace gradsync::tcp
