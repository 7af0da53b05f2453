// LinkShaper: a process's emulated NIC (network.link_gbps) for the parameter server's ZeroMQ
// transports, as two queues of whole messages, one per direction, each message released when
// the link would have carried it (Pacer::schedule for sending, schedule_arrived for
// receiving). Nothing sleeps: the owner's poll loop wakes at next_release() as well as for its
// sockets, so a process sends at the rate while it receives at the rate (full duplex), in one
// thread. Only payload bytes count; a message without payload keeps its place in line.
//
//   LinkShaper<Outgoing, Frames> shaper(options.link);    // a null link: no shaping
//   shaper.send(bytes, std::move(message), transmit);     // now, or queued until due
//   shaper.received(bytes, std::move(frames), handle);    // just read from the socket
//   poll(sockets, min(tick, shaper.next_release() - now));
//   shaper.release_received(now, handle);                 // every message due, in order
//   shaper.release_sent(now, transmit);
//
// Without a link, send and received hand each message on at once, so a transport calls them the
// same way whether or not the link is emulated.
//
// Releases are in order within a direction: the link's schedule only moves forward, so each
// queue is a FIFO. Messages that must not wait behind data (heartbeats, ERRORs) simply bypass
// the shaper. Not thread-safe (one poll loop); the Link itself may be shared.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <utility>

#include "common/link.h"

namespace gradsync {

template <typename Tx, typename Rx>
class LinkShaper {
 public:
  using Clock = std::chrono::steady_clock;

  explicit LinkShaper(std::shared_ptr<Link> link) : link_(std::move(link)) {}

  bool shaping() const { return link_ != nullptr; }

  // `bytes`: the message's payload, what the link is charged for. `f` takes the message now
  // when nothing shapes the link; release_sent / release_received hand it on otherwise.
  template <typename F>
  void send(std::size_t bytes, Tx message, F&& f) {
    if (!shaping()) return f(std::move(message));
    tx_.emplace_back(link_->send.schedule(bytes), std::move(message));
  }
  template <typename F>
  void received(std::size_t bytes, Rx message, F&& f) {
    if (!shaping()) return f(std::move(message));
    rx_.emplace_back(link_->receive.schedule_arrived(bytes), std::move(message));
  }

  bool idle() const { return tx_.empty() && rx_.empty(); }
  // The earliest release of either queue; time_point::max() when both are empty.
  Clock::time_point next_release() const {
    auto next = Clock::time_point::max();
    if (!tx_.empty()) next = std::min(next, tx_.front().first);
    if (!rx_.empty()) next = std::min(next, rx_.front().first);
    return next;
  }

  // Hands each message due at `now` to `f`, oldest first. `f` may queue more (a received
  // request's replies); a message is popped before `f` sees it, so an exception leaves the
  // queue consistent.
  // Nothing without a link: nothing was queued.
  template <typename F>
  void release_sent(Clock::time_point now, F&& f) {
    release(tx_, now, f);
  }
  template <typename F>
  void release_received(Clock::time_point now, F&& f) {
    release(rx_, now, f);
  }
  void clear() {
    tx_.clear();
    rx_.clear();
  }

 private:
  template <typename T, typename F>
  static void release(std::deque<std::pair<Clock::time_point, T>>& queue, Clock::time_point now,
                      F& f) {
    while (!queue.empty() && queue.front().first <= now) {
      T message = std::move(queue.front().second);
      queue.pop_front();
      f(std::move(message));
    }
  }

  std::shared_ptr<Link> link_;
  std::deque<std::pair<Clock::time_point, Tx>> tx_;
  std::deque<std::pair<Clock::time_point, Rx>> rx_;
};

// How long a poll may wait: until `deadline` but at most `cap`, rounded up to whole
// milliseconds (ZeroMQ's unit) so a loop waiting for a release does not spin; never negative.
inline std::chrono::milliseconds poll_timeout(std::chrono::steady_clock::time_point now,
                                              std::chrono::steady_clock::time_point deadline,
                                              std::chrono::milliseconds cap) {
  if (deadline <= now) return std::chrono::milliseconds(0);
  if (deadline - now >= cap) return cap;
  return std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
}

}  // namespace gradsync
