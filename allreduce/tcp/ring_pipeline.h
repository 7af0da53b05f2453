// The data mover under every TcpRing collective: one thread drives both ring links at once
// (non-blocking sockets + poll), sending to the right neighbour while receiving from the left.
//
// A collective is a list of RingSteps over elements of one type (RingElement: 32-bit floats,
// or 16-bit ones for allreduce_half). Step k sends `send_bytes` from `send` to the right and
// receives `recv_bytes` from the left into `recv` (or, with `reduce`, into a scratch chunk that
// is then added into `recv`, element by element). Sends are gated on data that has arrived: in a
// ring, what a rank forwards at step k is what it received (and reduced) at step k-1, so chunk c
// of step k may go as soon as chunk c of step k-1 is complete, not when the whole step is.
// Receiving runs ahead of sending as far as the left neighbour delivers; the kernel's socket
// buffers hold the next chunk while this thread reduces the current one.
//
// Both streams begin with a LinkHeader naming the collective; a header that differs from this
// rank's own is a desync. Errors come out as LinkFailure (which side, what happened), which the
// communicator turns into messages that name ranks. Not thread-safe; blocks until done, failed,
// or `deadline` passes while waiting on a socket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "allreduce/collective_kind.h"
#include "allreduce/tcp/socket.h"
#include "common/link.h"

namespace gradsync::tcp {

using RingOp = CollectiveKind;  // allreduce/collective_kind.h, shared with the mpi backend

// The first bytes of every collective on every link. Native byte order: the ranks of one job
// run one build on one architecture (the payload floats are native too).
struct LinkHeader {
  std::uint32_t magic = 0;
  std::uint32_t op = 0;     // RingOp
  std::uint64_t seq = 0;    // collective number, 1-based, the same on every rank
  std::uint64_t count = 0;  // total elements of the collective
  std::int32_t root = 0;    // broadcast root, else 0
  std::int32_t sender = 0;  // the rank that wrote this header
};
static_assert(sizeof(LinkHeader) == 32, "LinkHeader is a wire format");
inline constexpr std::uint32_t kLinkMagic = 0x47524753;  // "SGRG" on the wire

// "collective #7 allreduce of 1000 floats".
std::string describe(const LinkHeader& header);

// What a collective's elements are, for the reducing steps: 32-bit floats (added in fp32), or
// 16-bit floats (half_sum.h: each addition in fp32, rounded back to 16 bits, and kAvg's division
// rounded again). The wire carries the elements as they are: 4 or 2 bytes each.
enum class RingElement { kFloat, kFp16, kBf16 };

inline constexpr std::size_t element_bytes(RingElement element) {
  return element == RingElement::kFloat ? 4 : 2;
}

struct RingStep {
  // What gates this step's send: nothing (the data is this rank's own), the previous step's
  // received bytes (ring forwarding), or this step's own received bytes (broadcast chain).
  enum class Gate { kNone, kPreviousStep, kThisStep };

  const std::byte* send = nullptr;
  std::size_t send_bytes = 0;
  std::byte* recv = nullptr;
  std::size_t recv_bytes = 0;
  bool reduce = false;   // recv holds elements: add the received elements into it
  float divisor = 0.0f;  // non-zero: divide each reduced chunk by it (the final reduction of kAvg)
  Gate gate = Gate::kNone;
  // With reduce: the elements the received ones are added to, written to recv (recv[i] =
  // reduce_with[i] + received[i]); null, or recv itself, adds into recv in place.
  const std::byte* reduce_with = nullptr;
};

struct LinkFailure {
  enum class Kind { kTimeout, kClosed, kDesync, kProtocol };
  Kind kind;
  bool left;              // the left neighbour (receive side) or the right one (send side)
  std::string detail;     // strerror, or what was wrong
  LinkHeader received{};  // kDesync: the header the left neighbour sent
};

struct Traffic {
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
};

// Runs one collective over the links; throws LinkFailure. `scratch` holds at least one chunk
// (of any element type: it is bytes); `chunk_bytes` is a positive multiple of sizeof(float), so
// of either element's size, and every step's byte counts are multiples of `element`'s size.
// Counts payload bytes into `traffic` as they move, so a failure still reports what went
// through. With a `link`, payload bytes move only as fast as its buckets allow (headers are not
// charged).
void run_ring_pipeline(int send_fd, int recv_fd, const LinkHeader& header,
                       std::span<const RingStep> steps, RingElement element,
                       std::size_t chunk_bytes, std::span<float> scratch,
                       Clock::time_point deadline, Traffic& traffic, Link* link = nullptr);

}  // namespace gradsync::tcp
