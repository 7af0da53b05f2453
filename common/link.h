// Link emulation: caps the bytes a process sends, and those it receives, at a chosen rate, as
// a full-duplex NIC of that speed would (preset key network.link_gbps). Each transport asks
// its process's Link before moving bytes, so a parameter server's one link saturates
// when N workers push to it, as a real server's NIC does, while a ring's links each carry only
// their share. Loopback alone has no such bottleneck: every process copies at memory speed.
//
// One seam, one clock per direction. A Pacer keeps the moment its link is busy until: every byte
// a transport moves is reserved on it, and a reservation moves that moment on by bytes / rate.
// What differs between transports is only the slack: how far behind now that moment may have
// fallen, that is, how much idle time the link may make up for with a burst:
//   - schedule(bytes): a whole message queued to send (the parameter server's ZeroMQ
//     transports), no slack: it starts when the link is free (or now) and is done bytes / rate
//     later: busy_until = max(now, busy_until) + bytes / rate. Nothing sleeps: the caller polls
//     until the returned time (common/link_shaper.h queues the messages).
//   - schedule_arrived(bytes): a message that just arrived whole, its own duration of slack: its
//     bytes came in over the last bytes / rate already (the sender's link paced them), so on an
//     idle link it is done now, and behind other messages bytes / rate after them:
//     busy_until = max(now, busy_until + bytes / rate). N senders into one receiver queue up.
//   - take / refund / wait_for (non-blocking byte streams: the ring) and acquire (a blocking
//     copy: dp's replica 0), a burst of slack, max(256 KiB, 4 ms of bytes): the classic token
//     bucket, whose credit is how far busy_until lies behind now (at most the burst).
//     take(wanted) grants what may move now (nothing until a quarter burst is free),
//     refund(unused) returns what the socket did not take, wait_for(bytes) says how long until
//     more may move; acquire(bytes) reserves and sleeps until the bytes are through.
// A message of 0 bytes is done at max(now, busy_until): it keeps its place in line.
// Thread-safe. A rate of 0 means unlimited: every call returns at once (take grants everything,
// schedule returns now), so transports call them unconditionally when a link is configured.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>

namespace gradsync {

class Pacer {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Pacer(double bytes_per_s);

  double bytes_per_s() const { return rate_; }
  std::size_t take(std::size_t wanted);
  void refund(std::size_t unused);
  std::chrono::nanoseconds wait_for(std::size_t bytes);
  void acquire(std::size_t bytes);
  // `now` is a parameter so that callers (and tests) share one clock reading.
  Clock::time_point schedule(std::size_t bytes, Clock::time_point now = Clock::now());
  Clock::time_point schedule_arrived(std::size_t bytes, Clock::time_point now = Clock::now());

 private:
  // The one mechanism under every call (under mutex_): busy_until_ first catches up with
  // now - slack, then moves on by bytes / rate; returns the new busy_until_.
  Clock::time_point reserve(std::size_t bytes, Clock::time_point now, Clock::duration slack);
  // The token bucket's credit in bytes: how far busy_until_ lies behind now, at most the burst.
  double credit(Clock::time_point now) const;
  Clock::duration duration_of(double bytes) const;

  const double rate_;
  const double burst_;                // bytes
  const Clock::duration burst_time_;  // the burst at the rate: the streams' slack
  std::mutex mutex_;
  Clock::time_point busy_until_{};  // when the link is done with what it was given
};

// One process's link: a pacer per direction.
struct Link {
  explicit Link(double gbps) : send(gbps * 1e9 / 8), receive(gbps * 1e9 / 8) {}
  Pacer send;
  Pacer receive;
};

// The link of a process under network.link_gbps: null when gbps is 0 (no cap).
std::shared_ptr<Link> make_link(double gbps);

}  // namespace gradsync
