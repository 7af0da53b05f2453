#include "allreduce/tcp/ring_pipeline.h"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "allreduce/half_sum.h"

namespace gradsync::tcp {
namespace {

// Separate loops so that the compiler vectorises each (restrict: the scratch chunk never
// aliases the user's buffer).
void add_into(float* __restrict dst, const float* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

// dst = base + src, out of place (base is another buffer: the caller's input).
void add_to(float* __restrict dst, const float* __restrict base, const float* __restrict src,
            std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = base[i] + src[i];
}

void divide(float* __restrict dst, std::size_t n, float divisor) {
  for (std::size_t i = 0; i < n; ++i) dst[i] /= divisor;
}

// How long an idle pipeline spins before it sleeps (Pipeline::keep_spinning). Alternated
// rounds of `gradsync bench allreduce --backend tcp -b 1M -e 16M` against MPI_Allreduce over
// Open MPI's TCP (2-core Zen 4): sleeping at once gave 0.7-1.0x Open MPI's busbw at N = 2 and 4
// from 1 to 4 MiB; spinning 50 us 1.0-1.15x at N = 2, 0.9-1.0x at N = 4; 200 us 1.0-1.3x and
// 0.98-1.1x; 500 us and 2 ms no better than 200 us.
constexpr auto kSpin = std::chrono::microseconds(200);

bool would_block(int error) { return error == EAGAIN || error == EWOULDBLOCK || error == EINTR; }

class Pipeline {
 public:
  Pipeline(int send_fd, int recv_fd, const LinkHeader& header, std::span<const RingStep> steps,
           RingElement element, std::size_t chunk_bytes, std::span<float> scratch,
           Clock::time_point deadline, Traffic& traffic, Link* link)
      : send_fd_(send_fd),
        recv_fd_(recv_fd),
        header_(header),
        steps_(steps),
        element_(element),
        chunk_bytes_(chunk_bytes),
        scratch_(reinterpret_cast<std::byte*>(scratch.data())),
        deadline_(deadline),
        traffic_(traffic),
        link_(link),
        done_(steps.size(), 0) {}

  void run() {
    try {
      while (!sending_done() || !receiving_done()) {
        send_blocked_ = false;
        send_throttled_ = receive_throttled_ = false;
        // Alternate one send and one receive per turn so that neither link idles while the
        // other one is busy; poll only when neither can move.
        bool progressed = !sending_done() && try_send();
        progressed = (!receiving_done() && try_receive()) || progressed;
        if (progressed) {
          idle_since_.reset();
        } else if (!keep_spinning()) {
          wait_for_io();
          idle_since_.reset();
        }
      }
    } catch (const LinkFailure& failure) {
      if (failure.kind == LinkFailure::Kind::kClosed && !failure.left) read_header_after_failure();
      throw;
    }
  }

 private:
  static constexpr std::size_t kHeaderBytes = sizeof(LinkHeader);

  // Whether to try the sockets again at once rather than sleep in poll: for the first kSpin of
  // each idle spell, unless an emulated link throttles (its credit comes on a clock, not from
  // the peer). A thread asleep in poll sees the peer's bytes only after a wake-up across cores
  // (20-30 us on the 2-core VMs), at each of a collective's 2(N-1) steps and again whenever the
  // socket buffers run dry mid-step: a 4 KiB allreduce at N = 2 took 55-65 us sleeping against
  // Open MPI's 20 (whose blocking calls spin). Each turn yields, so that a thread waiting for
  // this core (backward, or another rank beyond the cores) still gets it.
  bool keep_spinning() {
    if (send_throttled_ || receive_throttled_) return false;
    const auto now = Clock::now();
    if (!idle_since_) idle_since_ = now;
    if (now - *idle_since_ >= kSpin) return false;
    sched_yield();
    return true;
  }

  // Skips steps with nothing to send (empty segments, the last rank of a broadcast chain).
  bool sending_done() {
    if (header_sent_ < kHeaderBytes) return false;
    while (send_step_ < steps_.size() && send_offset_ == steps_[send_step_].send_bytes) {
      ++send_step_;
      send_offset_ = 0;
    }
    return send_step_ == steps_.size();
  }

  bool receiving_done() {
    if (header_received_ < kHeaderBytes) return false;
    while (recv_step_ < steps_.size() && recv_offset_ == steps_[recv_step_].recv_bytes) {
      ++recv_step_;
      recv_offset_ = 0;
    }
    return recv_step_ == steps_.size();
  }

  // Bytes of the current send step that exist already: see RingStep::Gate.
  std::size_t sendable(std::size_t k) const {
    switch (steps_[k].gate) {
      case RingStep::Gate::kNone:
        return steps_[k].send_bytes;
      case RingStep::Gate::kPreviousStep:
        return done_[k - 1];
      case RingStep::Gate::kThisStep:
        return done_[k];
    }
    return 0;
  }

  bool try_send() {
    const std::byte* data;
    std::size_t size;
    if (header_sent_ < kHeaderBytes) {
      data = reinterpret_cast<const std::byte*>(&header_) + header_sent_;
      size = kHeaderBytes - header_sent_;
    } else {
      const std::size_t ready = sendable(send_step_);
      if (ready <= send_offset_) return false;  // gated: waits for our own receive side
      data = steps_[send_step_].send + send_offset_;
      size = ready - send_offset_;
      if (link_ != nullptr) {
        size = link_->send.take(size);
        if (size == 0) return send_throttled_ = true, false;
      }
    }
    const bool charged = link_ != nullptr && header_sent_ == kHeaderBytes;
    const ssize_t n = ::send(send_fd_, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (charged) link_->send.refund(size - static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    if (n < 0) {
      if (!would_block(errno))
        throw LinkFailure{LinkFailure::Kind::kClosed, false, std::strerror(errno)};
      send_blocked_ = true;
      return false;
    }
    const auto sent = static_cast<std::size_t>(n);
    if (header_sent_ < kHeaderBytes) {
      header_sent_ += sent;
    } else {
      send_offset_ += sent;
      traffic_.sent += sent;
    }
    return sent > 0;
  }

  bool try_receive() {
    std::byte* into;
    std::size_t size;
    const RingStep* step = nullptr;
    std::size_t chunk_begin = 0, chunk_end = 0;
    if (header_received_ < kHeaderBytes) {
      into = reinterpret_cast<std::byte*>(&received_header_) + header_received_;
      size = kHeaderBytes - header_received_;
    } else if (!(step = &steps_[recv_step_])->reduce) {
      // Plain receive straight into the user's buffer; cap it at a chunk so that forwarding
      // (gated on these bytes) starts before a large receive finishes.
      into = step->recv + recv_offset_;
      size = std::min(step->recv_bytes - recv_offset_, chunk_bytes_);
    } else {
      // Reducing receive: chunk c of the segment is [c * chunk, min((c + 1) * chunk, segment));
      // its bytes collect in the scratch chunk until it is whole, then are added in one pass.
      chunk_begin = recv_offset_ - recv_offset_ % chunk_bytes_;
      chunk_end = std::min(chunk_begin + chunk_bytes_, step->recv_bytes);
      into = scratch_ + (recv_offset_ - chunk_begin);
      size = chunk_end - recv_offset_;
    }
    const bool charged = link_ != nullptr && step != nullptr;
    if (charged) {
      size = link_->receive.take(size);
      if (size == 0) return receive_throttled_ = true, false;
    }
    const ssize_t n = ::recv(recv_fd_, into, size, MSG_DONTWAIT);
    if (charged) link_->receive.refund(size - static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    if (n == 0) throw LinkFailure{LinkFailure::Kind::kClosed, true, "connection closed"};
    if (n < 0) {
      if (!would_block(errno))
        throw LinkFailure{LinkFailure::Kind::kClosed, true, std::strerror(errno)};
      return false;
    }
    const auto got = static_cast<std::size_t>(n);
    if (step == nullptr) {
      header_received_ += got;
      if (header_received_ == kHeaderBytes) check_header();
      return true;
    }
    recv_offset_ += got;
    traffic_.received += got;
    if (!step->reduce) {
      done_[recv_step_] = recv_offset_;
    } else if (recv_offset_ == chunk_end) {
      reduce_chunk(*step, chunk_begin, chunk_end);
      done_[recv_step_] = chunk_end;
    }
    return true;
  }

  // The scratch chunk, now whole, added into bytes [begin, end) of the step's segment, in the
  // collective's element type; then kAvg's division where the step has one.
  void reduce_chunk(const RingStep& step, std::size_t begin, std::size_t end) {
    const bool in_place = step.reduce_with == nullptr || step.reduce_with == step.recv;
    const std::size_t n = (end - begin) / element_bytes(element_);
    if (element_ == RingElement::kFloat) {
      auto* dst = reinterpret_cast<float*>(step.recv + begin);
      const auto* received = reinterpret_cast<const float*>(scratch_);
      if (in_place) {
        add_into(dst, received, n);
      } else {
        add_to(dst, reinterpret_cast<const float*>(step.reduce_with + begin), received, n);
      }
      if (step.divisor != 0.0f) divide(dst, n, step.divisor);
      return;
    }
    const HalfType type = element_ == RingElement::kFp16 ? HalfType::kFp16 : HalfType::kBf16;
    auto* dst = reinterpret_cast<std::uint16_t*>(step.recv + begin);
    const auto* base =
        in_place ? dst : reinterpret_cast<const std::uint16_t*>(step.reduce_with + begin);
    add_halves(type, base, reinterpret_cast<const std::uint16_t*>(scratch_), dst, n);
    if (step.divisor != 0.0f) divide_halves(type, dst, n, step.divisor);
  }

  // The right neighbour went away, perhaps because it failed on a desync that started at our
  // left. If the left's header is (about to be) here, a mismatch in it is the better error: it
  // names the collectives that disagree. Waits at most a moment; throws only a desync.
  void read_header_after_failure() {
    const auto deadline = std::min(deadline_, Clock::now() + std::chrono::milliseconds(100));
    while (header_received_ < kHeaderBytes) {
      pollfd fd{recv_fd_, POLLIN, 0};
      if (::poll(&fd, 1, poll_timeout_ms(deadline)) <= 0) return;
      const ssize_t n =
          ::recv(recv_fd_, reinterpret_cast<std::byte*>(&received_header_) + header_received_,
                 kHeaderBytes - header_received_, MSG_DONTWAIT);
      if (n <= 0) return;
      header_received_ += static_cast<std::size_t>(n);
    }
    if (received_header_.magic == kLinkMagic) check_header();
  }

  void check_header() {
    const LinkHeader& h = received_header_;
    if (h.magic != kLinkMagic) {
      char hex[16];
      std::snprintf(hex, sizeof(hex), "%08x", h.magic);
      throw LinkFailure{LinkFailure::Kind::kProtocol, true,
                        std::string("sent bytes that are not a ring header (magic 0x") + hex +
                            "): the streams are out of step"};
    }
    if (h.op != header_.op || h.seq != header_.seq || h.count != header_.count ||
        h.root != header_.root) {
      throw LinkFailure{LinkFailure::Kind::kDesync, true, "", h};
    }
  }

  void wait_for_io() {
    // The right link only ever carries data from us, so anything readable on it is the right
    // neighbour going away (EOF or reset): watch it while we still owe it bytes, to fail at once
    // rather than at the deadline. (Once our sends are done, the right neighbour may finish and
    // close legitimately while we still receive.) The left link is watched while we still
    // expect bytes from it.
    const bool sending = !sending_done();
    const bool receiving = !receiving_done();
    pollfd fds[2];
    nfds_t count = 0;
    if (sending) fds[count++] = {send_fd_, short(POLLIN | (send_blocked_ ? POLLOUT : 0)), 0};
    // A throttled receive waits for credit, not for data: polling POLLIN would spin.
    if (receiving) fds[count++] = {recv_fd_, short(receive_throttled_ ? 0 : POLLIN), 0};
    const Clock::time_point wake = throttle_wake();
    const int rc = ::poll(fds, count, poll_timeout_ms(std::min(deadline_, wake)));
    if (rc < 0) {
      if (errno == EINTR) return;
      throw LinkFailure{LinkFailure::Kind::kClosed, receiving, std::strerror(errno)};
    }
    if (rc == 0 && wake < deadline_) return;  // credit is due: try again
    // Timed out: blame the side that holds us up: the left while we still wait for its bytes
    // (a gated send waits for them too), else the right, which stopped taking ours.
    if (rc == 0) throw LinkFailure{LinkFailure::Kind::kTimeout, receiving, ""};
    if (sending && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) check_right_link();
  }

  // When the emulated link will have credit for a throttled side again (time_point::max()
  // when nothing is throttled).
  Clock::time_point throttle_wake() const {
    Clock::time_point wake = Clock::time_point::max();
    if (send_throttled_) wake = std::min(wake, Clock::now() + link_->send.wait_for(chunk_bytes_));
    if (receive_throttled_) {
      wake = std::min(wake, Clock::now() + link_->receive.wait_for(chunk_bytes_));
    }
    return wake;
  }

  void check_right_link() {
    char byte;
    const ssize_t n = ::recv(send_fd_, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n == 0) throw LinkFailure{LinkFailure::Kind::kClosed, false, "connection closed"};
    if (n > 0) {
      throw LinkFailure{LinkFailure::Kind::kProtocol, false,
                        "sent data against the ring's direction"};
    }
    if (!would_block(errno))
      throw LinkFailure{LinkFailure::Kind::kClosed, false, std::strerror(errno)};
  }

  const int send_fd_;
  const int recv_fd_;
  const LinkHeader& header_;
  const std::span<const RingStep> steps_;
  const RingElement element_;
  const std::size_t chunk_bytes_;
  std::byte* const scratch_;
  const Clock::time_point deadline_;
  Traffic& traffic_;
  Link* const link_;

  LinkHeader received_header_{};
  std::size_t header_sent_ = 0;
  std::size_t header_received_ = 0;
  std::size_t send_step_ = 0;
  std::size_t send_offset_ = 0;
  std::size_t recv_step_ = 0;
  std::size_t recv_offset_ = 0;
  std::vector<std::size_t> done_;  // per step: received bytes that are final (reduced if need be)
  std::optional<Clock::time_point> idle_since_;  // when the current idle spell began
  bool send_blocked_ = false;
  bool send_throttled_ = false;
  bool receive_throttled_ = false;
};

}  // namespace

std::string describe(const LinkHeader& header) {
  return "collective #" + std::to_string(header.seq) + " " +
         describe_collective(static_cast<RingOp>(header.op), header.count, header.root);
}

void run_ring_pipeline(int send_fd, int recv_fd, const LinkHeader& header,
                       std::span<const RingStep> steps, RingElement element,
                       std::size_t chunk_bytes, std::span<float> scratch,
                       Clock::time_point deadline, Traffic& traffic, Link* link) {
  Pipeline(send_fd, recv_fd, header, steps, element, chunk_bytes, scratch, deadline, traffic, link)
      .run();
}

}  // namespace gradsync::tcp
