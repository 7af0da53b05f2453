// Compiled only when CMake finds libgloo-dev (GRADSYNC_HAVE_GLOO). The collectives, their queue
// and their failures; beside it: the rendezvous (gloo_mesh.h), the desync check
// (gloo_header_check.h), the reduce-scatter ring (gloo_ring_reduce_scatter.h), the allreduce
// algorithms (gloo_algorithms.h) and the errors and reports of a failure (gloo_failures.h).
//
// Names: inside namespace gradsync, `gloo::` is gradsync::gloo, those files' internals; Gloo's
// own are spelled `::gloo::`.
#include "allreduce/gloo/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <utility>

#include "allreduce/collective_checks.h"
#include "allreduce/collective_kind.h"
#include "allreduce/gloo/gloo_algorithms.h"
#include "allreduce/gloo/gloo_failures.h"
#include "allreduce/gloo/gloo_header_check.h"
#include "allreduce/gloo/gloo_mesh.h"
#include "allreduce/gloo/gloo_ring_reduce_scatter.h"
#include "allreduce/gloo/gloo_sync_header_check.h"
#include "allreduce/gloo/sigpipe_blocked.h"
#include "allreduce/half_sum.h"
#include "allreduce/tcp/work_queue.h"
#include "common/error.h"

namespace gradsync {
namespace {

using gloo::Algorithm;
using gloo::Clock;
using std::chrono::milliseconds;

gloo::CollectiveHeader header_of(CollectiveKind kind, std::size_t count, int root = 0) {
  return {std::int64_t(kind), std::int64_t(count), root, 0};  // the queue numbers it
}

// The desync check's round on the sync pairs where there are some: there a header costs one
// write and one read, on async pairs two hand-offs through Gloo's event loop.
std::unique_ptr<gloo::HeaderRound> header_round(gloo::GlooMesh& mesh) {
  if (mesh.sync_context()) {
    return std::make_unique<gloo::SyncHeaderExchange>(
        *mesh.sync_context(), [&mesh](milliseconds left) { mesh.limit_sync_waits(left); });
  }
  return std::make_unique<gloo::HeaderExchange>(*mesh.context());
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(Store& store, int rank, int size, const GlooOptions& options,
                   Algorithm algorithm)
      : rank_(rank),
        size_(size),
        options_(options),
        algorithm_(algorithm),
        grace_(std::min(options.timeout, milliseconds(1000))),
        me_("rank " + std::to_string(rank)),
        mesh_(size > 1 ? std::make_unique<gloo::GlooMesh>(store, rank, size, options, grace_)
                       : nullptr),
        failures_(store, rank, options, grace_, mesh_.get()),
        headers_(mesh_ && options.check_desync ? header_round(*mesh_) : nullptr),
        queue_(rank, options.timeout, grace_) {}

  // Never hangs: closing the connections wakes a running collective, which fails at once; then
  // the queue's thread is joined and what was still queued fails with "destroyed". The mesh (its
  // pairs, then its device's event loop) goes after the thread. When every collective completed,
  // the connections close only once the peers have finished theirs too, or the grace period
  // passed (GlooMesh::close_after_peers says why).
  ~GlooCommunicator() override {
    if (mesh_ && !aborted_ && queue_.settled()) mesh_->close_after_peers(grace_);
    closing_ = true;
    if (mesh_) mesh_->close();
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
    const bool average = op == ReduceOp::kAvg;
    const std::string& algorithm = gloo::algorithm_name(algorithm_);
    if (size_ > 1) gloo::check_allreduce_count(algorithm_, out.size(), me_);
    const std::uint64_t moved = ring_share(out.size_bytes(), 2);
    const std::string pairs = options_.pairs == "async" ? "" : ", " + options_.pairs + " pairs";
    const std::string what = std::string("allreduce ") + (average ? "avg" : "sum") + " of " +
                             std::to_string(out.size()) + " floats (gloo " + algorithm + pairs +
                             ")";
    const auto kind = average ? CollectiveKind::kAllreduceAvg : CollectiveKind::kAllreduceSum;
    // One rank still copies in to out (its sum), without Gloo.
    const bool runs = !out.empty() && (size_ > 1 || in.data() != out.data());
    const std::span<float> data = out;
    return issue(
        what, header_of(kind, out.size()), runs, size_ > 1 ? moved : 0, size_ > 1 ? moved : 0,
        [this, in, data, average](std::uint32_t tag, Clock::time_point deadline) {
          if (size_ == 1) {
            std::memcpy(data.data(), in.data(), in.size_bytes());
            return;
          }
          // Sync pairs where asked for, in pieces the kernel buffers (gloo_mesh.h); each of
          // their reads and writes gets what is left of the deadline when the payload starts.
          const auto& sync = mesh_->sync_context();
          if (sync) mesh_->limit_sync_waits(gloo::time_left(deadline));
          gloo::allreduce_sum(sync ? sync : mesh_->context(), algorithm_, in, data, tag,
                              gloo::time_left(deadline), sync ? mesh_->sync_message_floats() : 0);
          // The average is the finished sum divided once, as TcpRing divides each
          // finished segment: every rank holds the same sum, so every rank ends with
          // the same bits.
          if (average) {
            const float n = float(size_);
            for (float& x : data) x /= n;
          }
        });
  }

  // Always Gloo's ring (gloo::allreduce_half_sum says why), 2 bytes an element.
  std::shared_ptr<Work> allreduce_half_async(std::span<std::uint16_t> data, HalfType type,
                                             ReduceOp op) override {
    const bool average = op == ReduceOp::kAvg;
    const std::uint64_t moved = ring_share(data.size_bytes(), 2);
    const std::string what = std::string("allreduce ") + half_type_name(type) +
                             (average ? " avg" : " sum") + " of " + std::to_string(data.size()) +
                             " values (gloo ring)";
    const bool runs = size_ > 1 && !data.empty();
    return issue(what, header_of(half_allreduce_kind(type, op), data.size()), runs, moved, moved,
                 [this, data, type, average](std::uint32_t tag, Clock::time_point deadline) {
                   gloo::allreduce_half_sum(mesh_->context(), type, data, tag,
                                            gloo::time_left(deadline));
                   // The finished 16-bit sum divided once, on every rank alike.
                   if (average) divide_halves(type, data.data(), data.size(), float(size_));
                 });
  }

  std::shared_ptr<Work> broadcast_async(std::span<float> data, int root) override {
    GRADSYNC_CHECK(root >= 0 && root < size_, "broadcast root outside [0, size)");
    const std::uint64_t bytes = size_ > 1 ? data.size_bytes() : 0;
    const bool is_root = rank_ == root;
    const std::string what = "broadcast of " + std::to_string(data.size()) + " floats from rank " +
                             std::to_string(root) + " (gloo)";
    const bool runs = size_ > 1 && !data.empty();
    return issue(what, header_of(CollectiveKind::kBroadcast, data.size(), root), runs,
                 is_root ? bytes : 0, is_root ? 0 : bytes,
                 [this, data, root](std::uint32_t tag, Clock::time_point deadline) {
                   // In place: with no input buffer, the root sends from its output.
                   ::gloo::BroadcastOptions opts(mesh_->context());
                   opts.setOutput(data.data(), data.size());
                   opts.setRoot(root);
                   opts.setTag(tag);
                   opts.setTimeout(gloo::time_left(deadline));
                   ::gloo::broadcast(opts);
                 });
  }

  std::shared_ptr<Work> allgather_async(std::span<const float> in, std::span<float> out) override {
    GRADSYNC_CHECK(out.size() == in.size() * std::size_t(size_),
                   "allgather: out.size() must be size() * in.size()");
    const std::uint64_t moved = ring_share(out.size_bytes(), 1);
    const std::string what =
        "allgather of " + std::to_string(in.size()) + " floats per rank (gloo)";
    // With one rank the input still lands in the output: a copy, no Gloo.
    const bool runs = !in.empty();
    return issue(what, header_of(CollectiveKind::kAllgather, out.size()), runs, moved, moved,
                 [this, in, out](std::uint32_t tag, Clock::time_point deadline) {
                   if (size_ == 1) {
                     std::memmove(out.data(), in.data(), in.size_bytes());
                     return;
                   }
                   ::gloo::AllgatherOptions opts(mesh_->context());
                   // Gloo only reads the input; its setter takes a non-const pointer all the same.
                   opts.setInput(const_cast<float*>(in.data()), in.size());
                   opts.setOutput(out.data(), out.size());
                   opts.setTag(tag);
                   opts.setTimeout(gloo::time_left(deadline));
                   ::gloo::allgather(opts);
                 });
  }

  // The reduce-scatter half of a ring over Gloo's tagged unbound buffers, whatever
  // options.algorithm says: see gloo_ring_reduce_scatter.h for why not Gloo's own.
  std::shared_ptr<Work> reduce_scatter_async(std::span<const float> in, std::span<float> out,
                                             ReduceOp op) override {
    check_reduce_scatter_sizes(in.size(), out.size(), size_);
    const bool average = op == ReduceOp::kAvg;
    const std::uint64_t moved = ring_share(in.size_bytes(), 1);
    const std::string what = std::string("reduce-scatter ") + (average ? "avg" : "sum") + " of " +
                             std::to_string(in.size()) + " floats (gloo ring)";
    const auto kind =
        average ? CollectiveKind::kReduceScatterAvg : CollectiveKind::kReduceScatterSum;
    // With one rank the input still lands in the output: a copy, no Gloo.
    const bool runs = !in.empty();
    return issue(what, header_of(kind, in.size()), runs, moved, moved,
                 [this, in, out, average](std::uint32_t tag, Clock::time_point deadline) {
                   if (size_ == 1) {
                     std::memmove(out.data(), in.data(), in.size_bytes());
                     return;
                   }
                   // The ring adds into the blocks it sends on, and `in` is the caller's.
                   std::vector<float> sums(in.begin(), in.end());
                   gloo::ring_reduce_scatter(*mesh_->context(), sums, out.size(), tag, deadline);
                   const float* mine = sums.data() + std::size_t(rank_) * out.size();
                   // The finished sum divided once, as allreduce divides it here.
                   const float n = float(size_);
                   for (std::size_t i = 0; i < out.size(); ++i) {
                     out[i] = average ? mine[i] / n : mine[i];
                   }
                 });
  }

  // The float reduce-scatter's ring (gloo_ring_reduce_scatter.h) over 16-bit values, 2 bytes
  // an element: the order of additions of TcpRing's, each rounded to 16 bits.
  std::shared_ptr<Work> reduce_scatter_half_async(std::span<const std::uint16_t> in,
                                                  std::span<std::uint16_t> out, HalfType type,
                                                  ReduceOp op) override {
    check_reduce_scatter_half_sizes(in.size(), out.size(), size_, type);
    const bool average = op == ReduceOp::kAvg;
    const std::uint64_t moved = ring_share(in.size_bytes(), 1);
    const std::string what = std::string("reduce-scatter ") + half_type_name(type) +
                             (average ? " avg" : " sum") + " of " + std::to_string(in.size()) +
                             " values (gloo ring)";
    const bool runs = !in.empty();
    return issue(what, header_of(half_reduce_scatter_kind(type, op), in.size()), runs, moved, moved,
                 [this, in, out, type, average](std::uint32_t tag, Clock::time_point deadline) {
                   if (size_ == 1) {
                     std::memmove(out.data(), in.data(), in.size_bytes());
                     return;
                   }
                   std::vector<std::uint16_t> sums(in.begin(), in.end());
                   gloo::ring_reduce_scatter(*mesh_->context(), type, sums, out.size(), tag,
                                             deadline);
                   const std::uint16_t* mine = sums.data() + std::size_t(rank_) * out.size();
                   std::copy_n(mine, out.size(), out.data());
                   // The finished 16-bit sum divided once, as allreduce_half divides it here.
                   if (average) divide_halves(type, out.data(), out.size(), float(size_));
                 });
  }

  std::shared_ptr<Work> barrier_async() override {
    return issue("barrier (gloo)", header_of(CollectiveKind::kBarrier, 0), size_ > 1, 0, 0,
                 [this](std::uint32_t tag, Clock::time_point deadline) {
                   ::gloo::BarrierOptions opts(mesh_->context());
                   opts.setTag(tag);
                   opts.setTimeout(gloo::time_left(deadline));
                   ::gloo::barrier(opts);
                 });
  }

  void abort(const std::string& reason) override {
    {
      std::lock_guard lock(abort_mutex_);
      if (aborted_) return;
      abort_reason_ = reason;
      aborted_ = true;  // after the reason: the queue's thread reads it once it sees this
    }
    // The report first, the connections after: a peer that reads end-of-file finds it at once.
    failures_.publish("abort", me_ + " aborted: " + reason);
    if (mesh_) mesh_->close();
  }

  // Bytes this rank moves in a bandwidth-optimal algorithm (NcclCommunicator's formulas):
  // allreduce 2(N-1)/N of the buffer each way, allgather (N-1)/N of the output each way,
  // broadcast the buffer out of the root and into every other rank, barrier nothing. Gloo's
  // ring and halving-doubling move about that; the counters say what the schedule must move
  // (the desync check's headers are not counted, as TcpRing's are not).
  std::string backend() const override { return "gloo"; }
  CommCounters counters() const override {
    CommCounters c;
    c.bytes_sent = bytes_sent_.load();
    c.bytes_received = bytes_received_.load();
    c.collectives = collectives_.load();
    return c;
  }

 private:
  std::uint64_t ring_share(std::uint64_t bytes, int factor) const {
    return size_ <= 1
               ? 0
               : bytes * std::uint64_t(factor) * std::uint64_t(size_ - 1) / std::uint64_t(size_);
  }

  // Queues `body` (given the collective's tag and deadline) as the next collective. With more
  // than one rank, every collective (zero elements included) first exchanges `header` with every
  // rank (options.check_desync), and a mismatch fails every rank before any payload moves. A
  // collective that does not run (world size 1, zero elements) still takes its turn, so that it
  // completes in issue order and fails like any other call after a failure. The deadline, start
  // + options.timeout, bounds the header exchange and the payload together.
  template <typename Body>
  std::shared_ptr<Work> issue(const std::string& description, gloo::CollectiveHeader header,
                              bool runs, std::uint64_t sent, std::uint64_t received, Body body) {
    // A blocking call with nothing queued runs on the caller's thread (WorkQueue::submit): that
    // thread gets SIGPIPE blocked for the call only, the queue's for good.
    const bool here = issuing_blocking_call();
    return queue_.submit(
        description,
        [this, header, runs, sent, received, here,
         body = std::move(body)](tcp::RingWork& work) mutable {
          throw_if_stopped(work, "never ran");
          std::optional<gloo::SigpipeBlocked> for_this_call;
          if (here) {
            for_this_call.emplace();
          } else {
            gloo::block_sigpipe_on_this_thread();  // Gloo writes from here too
          }
          const Clock::time_point deadline = Clock::now() + options_.timeout;
          header.seq = std::int64_t(work.seq());
          std::optional<gloo::Desync> desync;
          try {
            if (headers_) desync = gloo::find_desync(headers_->exchange(header, deadline), rank_);
            if (!desync && runs) body(gloo::tag_of(work.what()), deadline);
          } catch (const std::exception& e) {
            throw_if_stopped(work, "interrupted");
            failures_.fail(work, e);
          }
          if (desync) {
            throw_if_stopped(work, "interrupted");
            failures_.fail_desync(work, *desync);
          }
          if (runs) {
            bytes_sent_ += sent;
            bytes_received_ += received;
          }
          ++collectives_;
        },
        here);
  }

  // Runs on the queue's thread: what was queued (`how` "never ran") or running ("interrupted")
  // when abort() or the destructor came fails here, whatever else went wrong.
  void throw_if_stopped(const tcp::RingWork& work, const char* how) {
    if (aborted_) throw Error(me_ + ": " + work.what() + ": this rank aborted: " + abort_reason());
    if (closing_) {
      throw Error(me_ + ": " + work.what() + " " + how + ": the communicator was destroyed");
    }
  }

  std::string abort_reason() {
    std::lock_guard lock(abort_mutex_);
    return abort_reason_;
  }

  const int rank_;
  const int size_;
  const GlooOptions options_;
  const Algorithm algorithm_;
  const milliseconds grace_;                    // how long a failing rank waits for a peer's report
  const std::string me_;                        // "rank 3", for messages
  std::unique_ptr<gloo::GlooMesh> mesh_;        // null for one rank
  gloo::GlooFailures failures_;                 // after mesh_, which it uses
  std::unique_ptr<gloo::HeaderRound> headers_;  // null for one rank, or without the check
  std::atomic<bool> closing_{false};
  std::atomic<bool> aborted_{false};
  std::mutex abort_mutex_;
  std::string abort_reason_;
  std::atomic<std::uint64_t> bytes_sent_{0}, bytes_received_{0}, collectives_{0};
  tcp::WorkQueue queue_;  // last: its thread stops before the members above go
};

}  // namespace

const std::vector<std::string>& gloo_algorithms() { return gloo::algorithm_names(); }
const std::vector<std::string>& gloo_pair_modes() { return gloo::pair_mode_names(); }

std::string gloo_version() {
  return std::to_string(GLOO_VERSION_MAJOR) + "." + std::to_string(GLOO_VERSION_MINOR) + "." +
         std::to_string(GLOO_VERSION_PATCH);
}

std::unique_ptr<Communicator> make_gloo_communicator(Store& store, int rank, int size,
                                                     const GlooOptions& options) {
  GRADSYNC_CHECK(size >= 1 && rank >= 0 && rank < size,
                 "make_gloo_communicator: rank outside [0, size)");
  const Algorithm algorithm = gloo::parse_algorithm(options.algorithm);
  gloo::check_pair_mode(options.pairs, algorithm);
  return std::make_unique<GlooCommunicator>(store, rank, size, options, algorithm);
}

}  // namespace gradsync
