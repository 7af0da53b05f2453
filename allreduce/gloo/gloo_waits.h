// The waits the Gloo communicator makes itself on Gloo's unbound buffers (the header check, the
// reduce-scatter ring), each bounded by what is left of its collective's deadline, so that a
// collective that progresses slowly and then stalls still fails by start + timeout, naming the
// rank it waited for, rather than outliving the Work's wait (RingWork::wait's "still running").
//
//   const auto deadline = Clock::now() + timeout;              // once, when the collective starts
//   buffer->recv(left, slot, 0, bytes);
//   wait_recv(*buffer, deadline, [&] { return PeerWaitTimeout("waiting for rank 2 to send", 2); });
//
// Timeouts: Gloo has no exception type of its own for one (its waits throw gloo::IoException
// whether they timed out or a pair failed), so a wait that throws once the deadline has passed is
// a timeout, and one that throws before it is the pair's failure, rethrown as Gloo's. A Gloo wait
// that times out closes every pair of its context (Gloo's own doing), so the peers fail at once.
// Header-only; internal to allreduce/gloo/ (it includes Gloo's headers).
#pragma once

#include <gloo/common/error.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

namespace gradsync::gloo {

using Clock = std::chrono::steady_clock;

// A wait that reached its collective's deadline; what() says whom it waited for and why ("waiting
// for rank 2 to send its header"), and `peer` is that rank, for the PeerError.
struct PeerWaitTimeout : std::runtime_error {
  PeerWaitTimeout(const std::string& what, int peer) : std::runtime_error(what), peer(peer) {}
  int peer;
};

// What is left until `deadline`, rounded up to whole milliseconds and at least one: Gloo reads
// zero as "no timeout" in places, and rounding down would end a wait just short of the deadline.
inline std::chrono::milliseconds time_left(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

namespace detail {
template <typename Wait, typename Blame>
int wait_until(Clock::time_point deadline, Wait wait, Blame blame) {
  int rank = -1;
  bool done = false;
  try {
    done = wait(&rank, time_left(deadline));
  } catch (const ::gloo::IoException&) {
    if (Clock::now() >= deadline) throw blame();  // timed out; before the deadline, a pair failed
    throw;
  }
  if (!done) throw std::runtime_error(std::string("gloo: aborted ") + blame().what());
  return rank;
}
}  // namespace detail

// Waits for one receive (wait_send: send) posted on `buffer` to complete, until `deadline`;
// returns the rank it completed with. At the deadline throws blame(), a PeerWaitTimeout naming
// the rank still missing (called only then, so it may look at what has arrived so far); throws
// Gloo's exception when a pair fails first, and a runtime_error if the wait is aborted.
template <typename Blame>
int wait_recv(::gloo::transport::UnboundBuffer& buffer, Clock::time_point deadline, Blame blame) {
  return detail::wait_until(
      deadline,
      [&](int* rank, std::chrono::milliseconds left) { return buffer.waitRecv(rank, left); },
      blame);
}

template <typename Blame>
int wait_send(::gloo::transport::UnboundBuffer& buffer, Clock::time_point deadline, Blame blame) {
  return detail::wait_until(
      deadline,
      [&](int* rank, std::chrono::milliseconds left) { return buffer.waitSend(rank, left); },
      blame);
}

}  // namespace gradsync::gloo
