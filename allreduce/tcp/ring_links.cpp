#include "allreduce/tcp/ring_links.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <random>
#include <utility>

#include "common/error.h"

namespace gradsync::tcp {
namespace {

constexpr std::uint32_t kHelloMagic = 0x4f4c4548;  // "HELO" on the wire
constexpr std::uint32_t kHelloVersion = 2;           // 2: with the ring's token

struct Hello {
  std::uint32_t magic = kHelloMagic;
  std::uint32_t version = kHelloVersion;
  std::int32_t rank = 0;
  std::int32_t size = 0;
  std::uint64_t token = 0;  // drawn by rank 0 for this ring (ring_token)
};
static_assert(sizeof(Hello) == 24, "a wire format");

std::string ms_since(Clock::time_point start) {
  return std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
}

// How long an accepted connection has to say its hello before it is dropped as a stray: a rank
// sends it right after connecting, and a stray that says nothing must not hold up the ring.
constexpr auto kStrayHelloWait = std::chrono::seconds(2);

// Rank 0 draws the ring's token and publishes it before its address; the others read it. Only
// connections that present it are ranks of this ring: anything else that reaches a listener (a
// port scanner, a stale rank of another job on the same port) is refused without blaming a rank.
std::uint64_t ring_token(Store& store, const std::string& prefix, int rank,
                         Clock::time_point start, Clock::time_point deadline) {
  const std::string key = prefix + "/ring_token";
  if (rank == 0) {
    std::random_device seed;
    const std::uint64_t token = (std::uint64_t(seed()) << 32) ^ seed();
    store.set(key, std::to_string(token));
    return token;
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  try {
    return std::stoull(store.get(key, std::max(left, std::chrono::milliseconds(0))));
  } catch (const TimeoutError&) {
    throw TimeoutError(0, "no token", "ring setup",
                       "rank " + std::to_string(rank) + " waited " + ms_since(start) +
                           " ms for rank 0 to publish " + key + " (has it started?)");
  }
}

// "127.0.0.1:40312", the far end of an accepted connection, for the refusal's line.
std::string peer_address(const Socket& socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getpeername(socket.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return "an unknown address";
  }
  return format_address(address);
}

// Why a hello is not one of this ring's ranks ("" when it is): for a connection we accepted,
// that is a stray to refuse, not a rank to blame.
std::string stranger(const Hello& hello, std::uint64_t token) {
  if (hello.magic != kHelloMagic) return "not a gradsync ring peer";
  if (hello.version != kHelloVersion) return "a gradsync ring peer of another version";
  if (hello.token != token) return "a gradsync ring peer of another run";
  return "";
}

// A rank of this ring, but not the neighbour expected, or of another world size: a real
// misconfiguration (a stale address in the store), named.
void check_neighbour(const Hello& hello, int rank, int size, int expected,
                     const std::string& endpoint) {
  const std::string me = "rank " + std::to_string(rank);
  if (hello.rank != expected || hello.size != size) {
    throw PeerError(expected, endpoint, "ring setup",
                    me + " of " + std::to_string(size) + " expected rank " +
                        std::to_string(expected) + " but reached rank " +
                        std::to_string(hello.rank) + " of " + std::to_string(hello.size) +
                        " (another job on the same store, or a stale address?)");
  }
}

// Reads the peer's hello and checks that it is the neighbour we expect, in a world of our size.
void expect_hello(const Socket& socket, int rank, int size, int expected, std::uint64_t token,
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
  if (const std::string why = stranger(hello, token); !why.empty()) {
    throw PeerError(expected, endpoint, "ring setup",
                    me + " expected rank " + std::to_string(expected) + " but reached " + why);
  }
  check_neighbour(hello, rank, size, expected, endpoint);
}

void send_hello(const Socket& socket, int rank, int size, int peer, std::uint64_t token,
                const std::string& endpoint, Clock::time_point deadline) {
  Hello hello;
  hello.rank = rank;
  hello.size = size;
  hello.token = token;
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

// Accepts until a connection presents this ring's token, and returns it with its hello read
// (checked by the caller: a rank of this ring with the wrong rank or size is an error to name).
// Strays (no hello within kStrayHelloWait, closed, another program, version or run) are each
// refused with one line on stderr and closed; the wait goes on until `deadline`.
std::pair<Socket, Hello> accept_rank(const Socket& listener, int rank, std::uint64_t token,
                                     Clock::time_point deadline) {
  while (true) {
    Socket socket = accept_until(listener, deadline);
    if (!socket.valid()) return {Socket(), Hello{}};
    Hello hello;
    const IoResult r = recv_all(socket.fd(), &hello, sizeof(hello),
                                std::min(deadline, Clock::now() + kStrayHelloWait));
    const std::string why = r.status == IoStatus::kTimeout ? "sent no hello"
                            : r.status == IoStatus::kClosed ? "closed before its hello"
                                                             : stranger(hello, token);
    if (why.empty()) return {std::move(socket), hello};
    std::cerr << ("gradsync: rank " + std::to_string(rank) + ": refused a connection from " +
                  peer_address(socket) + " during ring setup: " + why + "\n")
              << std::flush;
  }
}

}  // namespace

RingLinks connect_ring(Store& store, int rank, int size, const TcpRingOptions& options,
                       Clock::time_point deadline) {
  const auto start = Clock::now();
  const int right = (rank + 1) % size;
  const int left = (rank - 1 + size) % size;
  RingLinks links;

  // 0. The ring's token: rank 0's, before any address, so a rank that has an address has it.
  const std::uint64_t token = ring_token(store, options.store_prefix, rank, start, deadline);

  // 1. Listen first, then publish: whoever reads our address can connect at once.
  Socket listener = listen_on(options.bind_host, 0, kRingSocketBuffers);
  const std::string me = format_endpoint(options.bind_host, local_port(listener));
  store.set(options.store_prefix + "/addr/" + std::to_string(rank), me);

  // 2. Connect to the right neighbour. connect() completes in the kernel's backlog without the
  //    peer calling accept(), so every rank can connect before any accepts: no ordering deadlock.
  links.right_endpoint = address_of(store, options.store_prefix, rank, right, start, deadline);
  std::string host;
  int port = 0;
  parse_endpoint(links.right_endpoint, host, port);
  std::string last_error;
  links.right = connect_with_retry(host, port, deadline, last_error, kRingSocketBuffers);
  if (!links.right.valid()) {
    throw TimeoutError(right, links.right_endpoint, "ring setup",
                       "rank " + std::to_string(rank) + " could not connect within " +
                           ms_since(start) + " ms (" + last_error + ")");
  }
  tune_socket(links.right.fd(), kRingSocketBuffers);
  send_hello(links.right, rank, size, right, token, links.right_endpoint, deadline);

  // 3. Accept the left neighbour and check that it is who it should be, then confirm to it.
  links.left_endpoint = address_of(store, options.store_prefix, rank, left, start, deadline);
  auto [accepted, hello] = accept_rank(listener, rank, token, deadline);
  links.left = std::move(accepted);
  if (!links.left.valid()) {
    throw TimeoutError(left, links.left_endpoint, "ring setup",
                       "rank " + std::to_string(rank) + " waited " + ms_since(start) +
                           " ms for rank " + std::to_string(left) + " to connect");
  }
  tune_socket(links.left.fd(), kRingSocketBuffers);
  check_neighbour(hello, rank, size, left, links.left_endpoint);
  send_hello(links.left, rank, size, left, token, links.left_endpoint, deadline);

  // 4. The right neighbour's confirmation: it accepted us as its left neighbour.
  expect_hello(links.right, rank, size, right, token, links.right_endpoint, deadline);

  set_nonblocking(links.left.fd());
  set_nonblocking(links.right.fd());
  return links;
}

}  // namespace gradsync::tcp
