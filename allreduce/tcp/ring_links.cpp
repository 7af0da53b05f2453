#include "allreduce/tcp/ring_links.h"

#include <cstdint>

#include "common/error.h"

namespace gradsync::tcp {
namespace {

constexpr std::uint32_t kHelloMagic = 0x4f4c4548;  // "HELO" on the wire
constexpr std::uint32_t kHelloVersion = 1;

struct Hello {
  std::uint32_t magic = kHelloMagic;
  std::uint32_t version = kHelloVersion;
  std::int32_t rank = 0;
  std::int32_t size = 0;
};

std::string ms_since(Clock::time_point start) {
  return std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
}

// Reads the peer's hello and checks that it is the neighbour we expect, in a world of our size.
void expect_hello(const Socket& socket, int rank, int size, int expected,
                  const std::string& endpoint, Clock::time_point deadline) {
  Hello hello;
  const IoResult r = recv_all(socket.fd(), &hello, sizeof(hello), deadline);
  const std::string me = "rank " + std::to_string(rank);
  if (r.status == IoStatus::kTimeout) {
    throw TimeoutError(expected, endpoint, "ring setup",
                       me + " got no hello from rank " + std::to_string(expected));
  }
  if (r.status == IoStatus::kClosed) {
    throw PeerError(expected, endpoint, "ring setup",
                    "connection closed before its hello (" + r.detail + ")");
  }
  if (hello.magic != kHelloMagic || hello.version != kHelloVersion) {
    throw PeerError(expected, endpoint, "ring setup",
                    me + " expected rank " + std::to_string(expected) +
                        " but the peer is not a gradsync ring peer of this version");
  }
  if (hello.rank != expected || hello.size != size) {
    throw PeerError(expected, endpoint, "ring setup",
                    me + " of " + std::to_string(size) + " expected rank " +
                        std::to_string(expected) + " but reached rank " +
                        std::to_string(hello.rank) + " of " + std::to_string(hello.size) +
                        " (another job on the same store, or a stale address?)");
  }
}

void send_hello(const Socket& socket, int rank, int size, int peer, const std::string& endpoint,
                Clock::time_point deadline) {
  Hello hello;
  hello.rank = rank;
  hello.size = size;
  const IoResult r = send_all(socket.fd(), &hello, sizeof(hello), deadline);
  if (r.status != IoStatus::kOk) {
    throw PeerError(peer, endpoint, "ring setup", "cannot send the hello: " + r.detail);
  }
}

std::string address_of(Store& store, const std::string& prefix, int rank, int peer,
                       Clock::time_point start, Clock::time_point deadline) {
  const std::string key = prefix + "/addr/" + std::to_string(peer);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  try {
    return store.get(key, std::max(left, std::chrono::milliseconds(0)));
  } catch (const TimeoutError&) {
    throw TimeoutError(peer, "no address", "ring setup",
                       "rank " + std::to_string(rank) + " waited " + ms_since(start) +
                           " ms for rank " + std::to_string(peer) + " to publish " + key +
                           " (has it started?)");
  }
}

}  // namespace

RingLinks connect_ring(Store& store, int rank, int size, const TcpRingOptions& options,
                       Clock::time_point deadline) {
  const auto start = Clock::now();
  const int right = (rank + 1) % size;
  const int left = (rank - 1 + size) % size;
  RingLinks links;

  // 1. Listen first, then publish: whoever reads our address can connect at once.
  Socket listener = listen_on(options.bind_host, 0, kRingSocketBufferBytes);
  const std::string me = format_endpoint(options.bind_host, local_port(listener));
  store.set(options.store_prefix + "/addr/" + std::to_string(rank), me);

  // 2. Connect to the right neighbour. connect() completes in the kernel's backlog without the
  //    peer calling accept(), so every rank can connect before any accepts: no ordering deadlock.
  links.right_endpoint = address_of(store, options.store_prefix, rank, right, start, deadline);
  std::string host;
  int port = 0;
  parse_endpoint(links.right_endpoint, host, port);
  std::string last_error;
  links.right = connect_with_retry(host, port, deadline, last_error, kRingSocketBufferBytes);
  if (!links.right.valid()) {
    throw TimeoutError(right, links.right_endpoint, "ring setup",
                       "rank " + std::to_string(rank) + " could not connect within " +
                           ms_since(start) + " ms (" + last_error + ")");
  }
  tune_socket(links.right.fd(), kRingSocketBufferBytes);
  send_hello(links.right, rank, size, right, links.right_endpoint, deadline);

  // 3. Accept the left neighbour and check that it is who it should be, then confirm to it.
  links.left_endpoint = address_of(store, options.store_prefix, rank, left, start, deadline);
  links.left = accept_until(listener, deadline);
  if (!links.left.valid()) {
    throw TimeoutError(left, links.left_endpoint, "ring setup",
                       "rank " + std::to_string(rank) + " waited " + ms_since(start) +
                           " ms for rank " + std::to_string(left) + " to connect");
  }
  tune_socket(links.left.fd(), kRingSocketBufferBytes);
  expect_hello(links.left, rank, size, left, links.left_endpoint, deadline);
  send_hello(links.left, rank, size, left, links.left_endpoint, deadline);

  // 4. The right neighbour's confirmation: it accepted us as its left neighbour.
  expect_hello(links.right, rank, size, right, links.right_endpoint, deadline);

  set_nonblocking(links.left.fd());
  set_nonblocking(links.right.fd());
  return links;
}

}  // namespace gradsync::tcp
