// Link emulation: caps the bytes a process sends, and those it receives, at a chosen rate, as
// a full-duplex NIC of that speed would (preset key network.link_gbps). Each transport asks
// its process's EmulatedLink before moving bytes, so a parameter server's one link saturates
// when N workers push to it, as a real server's NIC does, while a ring's links each carry only
// their share. Loopback alone has no such bottleneck: every process copies at memory speed.
//
// TokenBucket is the classic shaper: credit accrues at `bytes_per_s` up to `burst` bytes.
//   - take(wanted): non-blocking, for event loops on non-blocking sockets (the ring): returns
//     how many bytes may move now; wait_for(bytes) says how long until more may.
//   - acquire(bytes): blocking, for whole messages (ZeroMQ): the credit goes negative and the
//     caller sleeps until it is paid back, so a message leaves after its serialisation time.
//   - schedule(bytes) / schedule_arrived(bytes): virtual time, for event loops that queue whole
//     messages and release each one when the link would have carried it (the parameter
//     server's ZeroMQ transports): the link is busy until `free_at`, and a message's bytes
//     occupy it for bytes / rate. Nothing sleeps: the caller polls until the returned time.
//       schedule (sending): the message starts when the link is free (or now) and is done
//         bytes / rate later: free_at = max(now, free_at) + bytes / rate.
//       schedule_arrived (receiving a message that just arrived whole): its bytes came in over
//         the last bytes / rate already (the sender's link paced them), so on an idle link it
//         is done now, and behind other messages it is done bytes / rate after them:
//         free_at = max(now, free_at + bytes / rate). N senders into one receiver queue up.
//     A message of 0 bytes is done at max(now, free_at): it keeps its place in line.
// take/refund/wait_for/acquire are thread-safe and share one account; schedule and
// schedule_arrived share another (free_at), also thread-safe: a transport uses one kind or the
// other for a direction (the ring takes; the parameter server schedules). A rate of 0 means
// unlimited: every call returns at once, schedule returns now (so transports call them
// unconditionally when a link is configured).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>

namespace gradsync {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;

  explicit TokenBucket(double bytes_per_s);

  double bytes_per_s() const { return rate_; }
  std::size_t take(std::size_t wanted);
  // Returns credit that take() granted but the socket did not use.
  void refund(std::size_t unused);
  std::chrono::nanoseconds wait_for(std::size_t bytes);
  void acquire(std::size_t bytes);
  // Seconds callers spent sleeping in acquire() so far.
  double throttled_seconds() const;
  // When a message of `bytes` would be done on this link; reserves the link until then. `now`
  // is a parameter so that callers (and tests) share one clock reading.
  Clock::time_point schedule(std::size_t bytes, Clock::time_point now = Clock::now());
  Clock::time_point schedule_arrived(std::size_t bytes, Clock::time_point now = Clock::now());

 private:
  void refill(Clock::time_point now);  // under mutex_

  const double rate_;
  const double burst_;
  mutable std::mutex mutex_;
  double credit_;  // bytes; negative while an acquire() is being paid back
  Clock::time_point last_;
  double throttled_s_ = 0;
  Clock::time_point free_at_{};  // schedule(): when the link is done with what it was given
};

// One process's link: a bucket per direction.
struct EmulatedLink {
  explicit EmulatedLink(double gbps) : send(gbps * 1e9 / 8), receive(gbps * 1e9 / 8) {}
  TokenBucket send;
  TokenBucket receive;
};

// The link of a process under network.link_gbps: null when gbps is 0 (no cap).
std::shared_ptr<EmulatedLink> make_emulated_link(double gbps);

}  // namespace gradsync
