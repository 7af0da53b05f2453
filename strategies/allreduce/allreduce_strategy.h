// `allreduce`: DistributedDataParallel's recipe on any Communicator (TcpRing on CPUs).
//
//   init:         parameters broadcast from rank 0, so every replica starts equal
//   backward:     gradient ranges arrive last layer first (gradient_ready); they are grouped
//                 into buckets of whole layers, never split: a bucket closes with the layer
//                 that brings it to `bucket_bytes`, so it may exceed that (as DDP's
//                 compute_bucket_assignment_by_size does), and each bucket's allreduce
//                 starts the moment backward has filled it, overlapping the rest of backward
//   synchronize:  the last partial bucket is issued, every bucket awaited (averaged over the
//                 ranks), then the same optimizer step runs on every rank: parameters stay
//                 bit-identical without ever being sent
//
// Buffers (batch norm's running statistics, attach_buffers): broadcast from rank 0 at init, as
// DDP syncs module state at construction; with `broadcast_buffers` (comm.broadcast_buffers, as
// DDP's default) again at the end of every synchronize(), so every rank holds rank 0's. DDP
// broadcasts them before each forward instead: for the next step's forward and for any
// evaluation between steps the two are the same, since nothing reads them in between (train
// mode normalises by the batch). Without it each rank keeps its own. Under Join the root is the
// highest rank still training (DDP's authoritative rank), and a rank in finish() receives.
// SyncBatchNorm's all-reduces (model.sync_batchnorm) are not the strategy's: make_strategies
// sets them on the model, through the same communicator (strategies/make_strategy.h).
//
// With overlap off, the same buckets are reduced one after another once backward is done:
// the baseline that shows what overlap buys. Each bucket goes through a BucketReducer: one
// all-reduce, or a compression (comm.compression) as DDP's communication hooks do.
//
// Uneven inputs (`join_uneven`, DDP's Join): every step ends with a one-float allreduce of
// "still training" flags, and gradients are averaged over the ranks that contributed. A rank
// that runs out of batches enters finish() and keeps answering the others' collectives with
// zero gradients and a zero flag until the flags sum to zero; then the rank that trained
// longest broadcasts its parameters so every rank ends equal. Without it, ranks with fewer
// batches simply leave and the others fail with a timeout naming them, never hang. Gradient
// accumulation needs nothing here: the loop forwards gradient_ready only on the last micro-batch
// (DDP's no_sync). One object per rank process; not thread-safe. Waits use the communicator's
// timeout.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "allreduce/communicator.h"
#include "model/optimizer/sgd.h"
#include "strategies/buffer_staging.h"
#include "strategies/allreduce/gradient_compression.h"
#include "strategies/sync_strategy.h"

namespace gradsync {

struct AllreduceStrategyOptions {
  std::size_t bucket_bytes = 25u << 20;  // DistributedDataParallel's bucket_cap_mb = 25
  bool overlap = true;
  bool join_uneven = false;
  SgdOptions sgd;
  int device = -1;  // where the model's buffers live (Model::device())
  // comm.compression: how each bucket is reduced (bucket_reducer.h); none by default.
  CompressionOptions compression;
  std::int64_t first_step = 0;  // the step the loop starts at (a resumed run's checkpoint)
  // comm.broadcast_buffers: rank 0's buffers to every rank after every step.
  bool broadcast_buffers = true;
};

class AllreduceStrategy final : public SyncStrategy {
 public:
  AllreduceStrategy(std::shared_ptr<Communicator> comm, const AllreduceStrategyOptions& options);
  // Waits (bounded by the communicator's timeout) for reductions still in flight: they write
  // into the model's gradient buffer, which may be freed right after.
  ~AllreduceStrategy() override;

  std::string_view name() const override { return "allreduce"; }
  int rank() const override { return comm_->rank(); }
  void attach_buffers(std::span<float> buffers) override { buffers_ = buffers; }
  void init(std::span<float> params) override;
  void gradient_ready(std::span<float> grads, std::size_t begin, std::size_t end) override;
  void synchronize(std::span<float> grads, std::span<float> params) override;
  void finish(std::span<float> grads, std::span<float> params) override;
  void abort(const std::string& reason) override;
  StepStats last_step_stats() const override { return stats_; }
  // One "allreduce" span per bucket (index: the bucket, last layers' first), from when the
  // communicator began it to when it finished; where the backend cannot tell (NCCL), from its
  // issue to the wait that saw it done. Then a "broadcast" span of the buffers, if any.
  std::span<const TraceSpan> last_step_spans() const override { return spans_; }
  Optimizer* optimizer() override { return sgd_.get(); }

  // Buckets of the last step as [begin, end) ranges, in the order they were issued (tests).
  const std::vector<std::pair<std::size_t, std::size_t>>& last_buckets() const {
    return issued_ranges_;
  }

 private:
  // Waits (bounded by the communicator's timeout) for the bucket reductions still in flight.
  void settle();
  // `last`: the step's final bucket, issued from synchronize().
  void close_bucket(std::span<float> grads, bool last = false);
  void issue(std::span<float> bucket, std::size_t offset, bool last);
  // The flag round that ends a step under join_uneven: returns how many ranks trained.
  int count_active(bool active);
  // The step's buffer broadcast (broadcast_buffers): from rank 0, or under Join from the highest
  // rank still training (`active`: this rank is).
  void broadcast_buffers(bool active);

  std::shared_ptr<Communicator> comm_;
  AllreduceStrategyOptions options_;
  std::unique_ptr<BucketReducer> reducer_;
  std::span<float> params_;          // init()'s: weight decay before a local momentum
  float local_weight_decay_ = 0.0f;  // topk's momentum correction (bucket_reducer.h)
  std::unique_ptr<Optimizer> sgd_;
  StepStats stats_;
  CommCounters counted_;  // counters at the end of the previous step
  // The ready region not yet in a bucket: [pending_begin_, pending_end_). Backward fills the
  // buffer from its end towards its start, so the region grows downwards.
  std::size_t pending_begin_ = 0;
  std::size_t pending_end_ = 0;
  bool step_started_ = false;
  std::vector<std::shared_ptr<Work>> in_flight_;
  std::vector<Clock::time_point> issued_at_;  // beside in_flight_
  std::vector<TraceSpan> spans_;
  std::vector<std::pair<std::size_t, std::size_t>> deferred_;  // overlap off
  std::vector<std::pair<std::size_t, std::size_t>> issued_ranges_;
  std::int64_t steps_ = 0;
  std::span<float> buffers_;  // the model's running statistics; empty: none
  // Where the communicator reads them: a device buffer for a GPU model (buffer_staging.h).
  BufferStaging buffer_staging_;
};

}  // namespace gradsync
