#include "allreduce/tcp/tcp_ring.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "allreduce/collective_checks.h"
#include "allreduce/tcp/ring_links.h"
#include "allreduce/tcp/ring_pipeline.h"
#include "allreduce/tcp/ring_reports.h"
#include "allreduce/tcp/work_queue.h"
#include "common/error.h"

namespace gradsync {
namespace {

using std::chrono::milliseconds;
using tcp::Clock;
using tcp::LinkFailure;
using tcp::LinkHeader;
using tcp::RingOp;
using tcp::RingStep;

// Where segment s of a buffer of `count` elements split over n ranks lies. The first
// count % n segments take one extra element, so segment s starts after s full segments plus
// one extra element for each of the min(s, count % n) longer segments before it. Every rank
// computes the same split, which is what lets chunk c of segment s mean the same bytes on both
// ends of a link.
struct Segments {
  std::size_t base, extra;
  Segments(std::size_t count, int n) : base(count / n), extra(count % n) {}
  std::size_t begin(int s) const { return s * base + std::min<std::size_t>(s, extra); }
  std::size_t size(int s) const { return base + (std::size_t(s) < extra ? 1 : 0); }
};

int mod(int a, int n) { return ((a % n) + n) % n; }

class TcpRing final : public Communicator {
 public:
  TcpRing(Store& store, int rank, int size, const TcpRingOptions& options)
      : store_(store),
        rank_(rank),
        size_(size),
        options_(options),
        chunk_bytes_(std::max<std::size_t>(sizeof(float),
                                           options.chunk_bytes / sizeof(float) * sizeof(float))),
        scratch_(chunk_bytes_ / sizeof(float)),
        barrier_buffer_(static_cast<std::size_t>(size)),
        reports_(store, options.store_prefix, rank, size),
        queue_(rank, options.timeout, report_grace()) {
    GRADSYNC_CHECK(size >= 1 && rank >= 0 && rank < size, "make_tcp_ring: rank outside [0, size)");
    if (size_ > 1) {
      links_ = tcp::connect_ring(store_, rank_, size_, options_, Clock::now() + options_.timeout);
    }
  }

  // Never hangs: shutting the sockets down wakes a running collective, which fails at once;
  // then the queue thread is joined and queued collectives fail with "destroyed".
  ~TcpRing() override {
    closing_ = true;
    links_.left.shutdown();
    links_.right.shutdown();
    queue_.stop();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  milliseconds timeout() const override { return options_.timeout; }

  std::shared_ptr<Work> allreduce_async(std::span<float> data, ReduceOp op) override {
    return allreduce_into_async(data, data, op);
  }

  std::shared_ptr<Work> allreduce_into_async(std::span<const float> in, std::span<float> out,
                                             ReduceOp op) override {
    check_allreduce_into_buffers(in.data(), in.size(), out.data(), out.size());
    const RingOp code = op == ReduceOp::kAvg ? RingOp::kAllreduceAvg : RingOp::kAllreduceSum;
    return issue(code, out.size(), 0, [this, in, out, code](RingWork& work) {
      // One rank: the sum is its own values (and the average too).
      if (size_ == 1 && in.data() != out.data())
        std::memcpy(out.data(), in.data(), in.size_bytes());
      run(work, code, out.size(), 0, ring_steps(in, out, code == RingOp::kAllreduceAvg, true, 0));
    });
  }

  // The allreduce's ring on 16-bit elements: the same segments and order of additions (each
  // rounded to 16 bits, tcp::RingElement), 2 bytes an element on the wire; kAvg divides each
  // finished segment once, as for floats.
  std::shared_ptr<Work> allreduce_half_async(std::span<std::uint16_t> data, HalfType type,
                                             ReduceOp op) override {
    const RingOp code = half_allreduce_kind(type, op);
    const tcp::RingElement element =
        type == HalfType::kFp16 ? tcp::RingElement::kFp16 : tcp::RingElement::kBf16;
    return issue(code, data.size(), 0, [this, data, code, element, op](RingWork& work) {
      auto* bytes = reinterpret_cast<std::byte*>(data.data());
      run(work, code, data.size(), 0,
          ring_steps(bytes, bytes, data.size(), element, op == ReduceOp::kAvg, true, 0), element);
    });
  }

  std::shared_ptr<Work> broadcast_async(std::span<float> data, int root) override {
    GRADSYNC_CHECK(root >= 0 && root < size_, "broadcast root outside [0, size)");
    return issue(RingOp::kBroadcast, data.size(), root, [this, data, root](RingWork& work) {
      // A chain root -> root+1 -> ... -> root-1: each rank forwards bytes as they arrive.
      RingStep step;
      auto* bytes = reinterpret_cast<std::byte*>(data.data());
      if (rank_ != mod(root - 1, size_)) step = {bytes, data.size_bytes()};  // not the chain's end
      if (rank_ != root) {
        step.recv = bytes;
        step.recv_bytes = data.size_bytes();
        step.gate = RingStep::Gate::kThisStep;
      }
      run(work, RingOp::kBroadcast, data.size(), root, {step});
    });
  }

  std::shared_ptr<Work> allgather_async(std::span<const float> in, std::span<float> out) override {
    GRADSYNC_CHECK(out.size() == in.size() * std::size_t(size_),
                   "allgather: out.size() must be size() * in.size()");
    return issue(RingOp::kAllgather, out.size(), 0, [this, in, out](RingWork& work) {
      const std::size_t m = in.size();
      if (m > 0) std::memmove(out.data() + rank_ * m, in.data(), in.size_bytes());
      // Step k sends block (r - k) and receives block (r - k - 1): the block received at step k
      // is the one forwarded at step k+1, so after N-1 steps every block has visited every rank.
      std::vector<RingStep> steps;
      for (int k = 0; k + 1 < size_; ++k) {
        auto* send = reinterpret_cast<std::byte*>(out.data() + mod(rank_ - k, size_) * m);
        auto* recv = reinterpret_cast<std::byte*>(out.data() + mod(rank_ - k - 1, size_) * m);
        steps.push_back({send, m * sizeof(float), recv, m * sizeof(float), false, 0.0f,
                         k == 0 ? RingStep::Gate::kNone : RingStep::Gate::kPreviousStep});
      }
      run(work, RingOp::kAllgather, out.size(), 0, std::move(steps));
    });
  }

  std::shared_ptr<Work> reduce_scatter_async(std::span<const float> in, std::span<float> out,
                                             ReduceOp op) override {
    check_reduce_scatter_sizes(in.size(), out.size(), size_);
    const RingOp code =
        op == ReduceOp::kAvg ? RingOp::kReduceScatterAvg : RingOp::kReduceScatterSum;
    // The header carries in.size(): ranks that disagree on it fail with a desync, as allreduce.
    return issue(code, in.size(), 0, [this, in, out, code](RingWork& work) {
      // The partial sums a rank forwards collect beside `in`, which is only read (as the
      // allreduce out of place does); its own block, finished last, lands in `out` directly.
      // (Equal blocks: the ring's N segments are exactly the N blocks.) Not initialised: every
      // float of it is written before it is read or sent.
      const std::unique_ptr<float[]> partial(new float[in.size()]);
      std::vector<RingStep> steps =
          ring_steps(in, {partial.get(), in.size()}, code == RingOp::kReduceScatterAvg, false, -1);
      // The allreduce's first N-1 steps, turned back by one segment so that rank r finishes
      // segment r, which is its block; unturned it would finish r + 1.
      if (!steps.empty()) steps.back().recv = reinterpret_cast<std::byte*>(out.data());
      if (size_ == 1 && !out.empty()) std::memcpy(out.data(), in.data(), in.size_bytes());
      run(work, code, in.size(), 0, std::move(steps));
    });
  }

  // The float reduce-scatter's ring (the allreduce's first N-1 steps, turned back by one
  // segment) on 16-bit elements: each addition rounded to 16 bits, kAvg's division once on the
  // finished block, 2 bytes an element on the wire.
  std::shared_ptr<Work> reduce_scatter_half_async(std::span<const std::uint16_t> in,
                                                  std::span<std::uint16_t> out, HalfType type,
                                                  ReduceOp op) override {
    check_reduce_scatter_half_sizes(in.size(), out.size(), size_, type);
    const RingOp code = half_reduce_scatter_kind(type, op);
    const tcp::RingElement element =
        type == HalfType::kFp16 ? tcp::RingElement::kFp16 : tcp::RingElement::kBf16;
    return issue(code, in.size(), 0, [this, in, out, code, element, op](RingWork& work) {
      // As for floats: partial sums beside `in`, which is only read; the own block lands in
      // `out`, written before it is read or sent.
      const std::unique_ptr<std::uint16_t[]> partial(new std::uint16_t[in.size()]);
      std::vector<RingStep> steps = ring_steps(reinterpret_cast<const std::byte*>(in.data()),
                                               reinterpret_cast<std::byte*>(partial.get()),
                                               in.size(), element, op == ReduceOp::kAvg, false, -1);
      if (!steps.empty()) steps.back().recv = reinterpret_cast<std::byte*>(out.data());
      if (size_ == 1 && !out.empty()) std::memcpy(out.data(), in.data(), in.size_bytes());
      run(work, code, in.size(), 0, std::move(steps), element);
    });
  }

  std::shared_ptr<Work> barrier_async() override {
    // An allreduce of N elements, not of one: with one element only one segment carries data,
    // and a rank could leave before others arrived. With one element per segment every rank's
    // result depends on every rank's contribution, so none finishes before all have entered.
    return issue(RingOp::kBarrier, std::size_t(size_), 0, [this](RingWork& work) {
      std::fill(barrier_buffer_.begin(), barrier_buffer_.end(), 1.0f);
      run(work, RingOp::kBarrier, barrier_buffer_.size(), 0,
          ring_steps(barrier_buffer_, barrier_buffer_, false, true, 0));
    });
  }

  void abort(const std::string& reason) override {
    if (aborted_.exchange(true)) return;
    // A ring that already failed published its own error; this one would only wrap it.
    if (!failed_) reports_.publish_error(reason);
    abort_reason_ = reason;
    closing_ = true;  // after abort_reason_: the queue thread reads it once it sees closing_
    links_.left.shutdown();
    links_.right.shutdown();
  }

  std::string backend() const override { return "tcp"; }
  CommCounters counters() const override {
    CommCounters c;
    c.bytes_sent = bytes_sent_.load();
    c.bytes_received = bytes_received_.load();
    c.collectives = collectives_.load();
    return c;
  }

 private:
  using RingWork = tcp::RingWork;

  // How long a timed-out rank reads the others' reports. The live ranks of a stuck collective
  // started it within a step's skew of each other and time out as close together: half the
  // timeout is ample, and keeps a run with a stopped rank ending within 3x its timeout.
  milliseconds report_grace() const { return std::min(options_.timeout / 2, milliseconds(2000)); }

  template <typename Body>
  std::shared_ptr<Work> issue(RingOp op, std::size_t count, int root, Body body) {
    // A blocking call with nothing queued runs on the caller's thread (WorkQueue::submit).
    return queue_.submit(describe_collective(op, count, root), std::move(body),
                         issuing_blocking_call());
  }

  // Reduce-scatter then all-gather over N segments, as 2(N-1) ring steps. Step k sends segment
  // (r - k + shift) and receives segment (r - k - 1 + shift): what arrives at step k is what
  // leaves at step k+1. In the first N-1 steps the arriving segment is added into ours; after
  // them, rank r holds the complete sum of segment (r + 1 + shift), and the last N-1 steps
  // (with `all_gather`) circulate the complete segments. The allreduce runs shift 0; whichever
  // the shift, segment s is summed around the ring starting from rank s - shift, so the
  // summation order, and with it the rounding of non-integer sums, follows the shift.
  //
  // Out of place, `in` is read where a rank's own values enter: the segment it sends first,
  // and each segment it adds into (RingStep::reduce_with); the sums, and everything forwarded
  // after the first step, live in `out`. In place, in and out are one buffer.
  //
  // The segments count elements of `element` (4 or 2 bytes); `in` and `out` hold `count` of them.
  std::vector<RingStep> ring_steps(const std::byte* in, std::byte* out, std::size_t count,
                                   tcp::RingElement element, bool average, bool all_gather,
                                   int shift) const {
    const Segments seg(count, size_);
    const std::size_t width = tcp::element_bytes(element);
    std::vector<RingStep> steps;
    for (int k = 0; k < (all_gather ? 2 : 1) * (size_ - 1); ++k) {
      const int s_send = mod(rank_ - k + shift, size_);
      const int s_recv = mod(rank_ - k - 1 + shift, size_);
      RingStep step;
      step.send = (k == 0 ? in : out) + seg.begin(s_send) * width;
      step.send_bytes = seg.size(s_send) * width;
      step.recv = out + seg.begin(s_recv) * width;
      step.recv_bytes = seg.size(s_recv) * width;
      step.reduce = k < size_ - 1;
      if (step.reduce) step.reduce_with = in + seg.begin(s_recv) * width;
      // kAvg divides once, on the finished sum (step N-2 completes it), before the all-gather
      // copies it out, so every rank ends with bit-identical values (reduce-scatter: the same
      // single division, so its blocks are the allreduce's where the sums agree).
      if (average && k == size_ - 2) step.divisor = float(size_);
      step.gate = k == 0 ? RingStep::Gate::kNone : RingStep::Gate::kPreviousStep;
      steps.push_back(step);
    }
    return steps;
  }
  std::vector<RingStep> ring_steps(std::span<const float> in, std::span<float> out, bool average,
                                   bool all_gather, int shift) const {
    return ring_steps(reinterpret_cast<const std::byte*>(in.data()),
                      reinterpret_cast<std::byte*>(out.data()), out.size(),
                      tcp::RingElement::kFloat, average, all_gather, shift);
  }

  // Runs on the queue thread.
  void run(RingWork& work, RingOp op, std::size_t count, int root, std::vector<RingStep> steps,
           tcp::RingElement element = tcp::RingElement::kFloat) {
    started_ = work.seq();
    if (size_ > 1 && count > 0) {
      LinkHeader header;
      header.magic = tcp::kLinkMagic;
      header.op = std::uint32_t(op);
      header.seq = work.seq();
      header.count = count;
      header.root = root;
      header.sender = rank_;
      tcp::Traffic traffic;
      try {
        tcp::run_ring_pipeline(links_.right.fd(), links_.left.fd(), header, steps, element,
                               chunk_bytes_, scratch_, Clock::now() + options_.timeout, traffic,
                               options_.link.get());
      } catch (const LinkFailure& failure) {
        count_traffic(traffic);
        fail(work, header, failure);
      }
      count_traffic(traffic);
    }
    finished_ = work.seq();
    ++collectives_;
  }

  void count_traffic(const tcp::Traffic& traffic) {
    bytes_sent_ += traffic.sent;
    bytes_received_ += traffic.received;
  }

  [[noreturn]] void fail(RingWork& work, const LinkHeader& mine, const LinkFailure& failure);

  Store& store_;
  const int rank_;
  const int size_;
  const TcpRingOptions options_;
  const std::size_t chunk_bytes_;
  std::vector<float> scratch_;
  std::vector<float> barrier_buffer_;
  tcp::RingLinks links_;
  tcp::RingReports reports_;
  std::atomic<bool> closing_{false};
  std::atomic<bool> aborted_{false};  // abort() was called; abort_reason_ says why
  std::atomic<bool> failed_{false};   // a collective failed and published its error
  std::string abort_reason_;
  std::atomic<std::uint64_t> started_{0}, finished_{0};
  std::atomic<std::uint64_t> bytes_sent_{0}, bytes_received_{0}, collectives_{0};
  tcp::WorkQueue queue_;  // last: its thread stops before the members above go
};

// Turns a link failure into the error every later call will see too, tells the other ranks
// through the Store, and shuts the links down so that the neighbours fail at once instead of
// at their deadline.
void TcpRing::fail(RingWork& work, const LinkHeader& mine, const LinkFailure& failure) {
  const std::string me = "rank " + std::to_string(rank_);
  if (closing_) {
    throw Error(me + ": " + tcp::describe(mine) + " interrupted: " +
                (aborted_ ? "this rank aborted: " + abort_reason_
                          : std::string("the communicator was destroyed")));
  }
  failed_ = true;
  const int peer = failure.left ? mod(rank_ - 1, size_) : mod(rank_ + 1, size_);
  const std::string& endpoint = failure.left ? links_.left_endpoint : links_.right_endpoint;
  const std::string them = "rank " + std::to_string(peer);
  const std::string operation = tcp::describe(mine);
  std::exception_ptr error;
  switch (failure.kind) {
    case LinkFailure::Kind::kDesync:
      error =
          std::make_exception_ptr(PeerError(peer, endpoint, operation,
                                            "desync: " + me + " is in " + operation + " but " +
                                                them + " sent " + tcp::describe(failure.received)));
      break;
    case LinkFailure::Kind::kProtocol:
      error = std::make_exception_ptr(
          PeerError(peer, endpoint, operation, them + " " + failure.detail));
      break;
    case LinkFailure::Kind::kClosed: {
      const std::string how =
          failure.detail == "connection closed" ? "" : " (" + failure.detail + ")";
      error = std::make_exception_ptr(PeerError(
          peer, endpoint, operation,
          them + " closed the connection" + how + " " + reports_.peer_failure_note(peer)));
      break;
    }
    case LinkFailure::Kind::kTimeout: {
      // Every live rank stuck in this collective times out about now: publish where we are,
      // then give the others a grace period to publish theirs.
      const std::string waited = me + " timed out after " +
                                 std::to_string(options_.timeout.count()) + " ms waiting for " +
                                 them + (failure.left ? " to send" : " to take its data");
      work.mark_failing(std::make_exception_ptr(TimeoutError(
          peer, endpoint, operation,
          waited + "; the ranks' reports did not come in time (the Store, on rank 0, did not "
                   "answer)")));
      reports_.publish_report(started_, finished_);
      const std::string reports = reports_.collect_reports(started_, finished_, report_grace());
      error = std::make_exception_ptr(
          TimeoutError(peer, endpoint, operation, waited + "; last started/finished: " + reports));
      break;
    }
  }
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    reports_.publish_error(e.what());
  }
  links_.left.shutdown();
  links_.right.shutdown();
  std::rethrow_exception(error);
}

}  // namespace

std::unique_ptr<Communicator> make_tcp_ring(Store& store, int rank, int size,
                                            const TcpRingOptions& options) {
  return std::make_unique<TcpRing>(store, rank, size, options);
}

}  // namespace gradsync
