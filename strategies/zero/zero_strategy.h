// `zero`: sharded data parallelism, ZeRO (Rajbhandari et al., SC 2020) stages 1 to 3 on any
// Communicator. The buffer is split into units, each unit into N slices, rank r owning slice r
// of every unit (strategies/zero/shard_layout.h); each rank keeps the optimizer state (SGD's
// momentum) of its slices only: 1/N of it.
//
//   init:         parameters broadcast from rank 0 (every replica starts equal); each rank
//                 copies its slices into its parameter shard
//   stage 1:      after backward, every unit's gradient reduce-scattered (averaged) in turn
//   stage 2:      each unit's gradient reduce-scattered the moment backward has filled it,
//                 overlapping the rest of backward, as DDP's buckets are; where the model
//                 hands its gradients to layer_storage() (the MLP, fp32), the units are its
//                 layers and each layer's full gradient is freed once reduced, so the model
//                 holds no gradient buffer: only the layers in flight and the shard exist
//   synchronize:  the SGD step on this rank's slices (momentum and weight decay as every other
//                 strategy), then every unit's parameters all-gathered into the model's buffer
//   stage 3:      FSDP's full shard: the units are the model's layers and the model runs on
//                 layer_storage() (strategies/zero/layer_shards.h), holding no full buffer;
//                 each layer gathered before its forward and again before its backward (the
//                 next one prefetched), its gradient reduce-scattered as soon as backward made
//                 it and then freed, every micro-batch (the shard accumulates them);
//                 synchronize steps the shards and gathers nothing: 1.5x the bytes of stages
//                 1 and 2, two all-gathers and one reduce-scatter of every layer
//
// Reduce-scatter plus all-gather move the bytes of one all-reduce, 2(N-1)/N of each unit's
// slices, read from and written to the model's own buffers (the under-N-float tail of a unit is
// all-reduced and stepped on every rank). Every rank ends with the same parameters, bit for bit:
// the all-gather copies the owner's values. The sums are the backend's reduce-scatter's, so the
// trajectory follows `single` on the global batch up to float summation order.
//
// Memory: at stage 1 the model holds full parameter and gradient buffers; at stage 2 on the
// layer storage full parameters and at most two layer gradients (the one in flight, the one
// being computed); at stage 3 only the gathered layers and layer gradients beside the shards. What
// zero allocates is
// counted in the process's ModelStateMemory (common/model_state_memory.h): the shards of the
// parameters and gradients, and the momentum of the slices (Sgd counts it).
//
// Checkpoints: every rank writes its slices as parts of the step folder (rank 0 the tails too),
// which tile the buffer as any checkpoint's parts do, so a zero checkpoint resumes under any
// strategy and N; a zero run resumes from any checkpoint (optimizer() takes the full momentum and
// keeps this rank's slices). One object per rank; not thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "allreduce/communicator.h"
#include "model/model.h"
#include "model/optimizer/sgd_options.h"
#include "strategies/allreduce/bucket_reducer.h"
#include "strategies/sync_strategy.h"
#include "strategies/zero/layer_shards.h"
#include "strategies/zero/shard_layout.h"
#include "strategies/zero/unit_compression.h"

namespace gradsync {

struct ZeroStrategyOptions {
  int stage = 1;                       // zero.stage: 1, 2 or 3
  std::size_t unit_bytes = 25u << 20;  // comm.bucket_mb: the units' size, as DDP's buckets
  SgdOptions sgd;
  std::vector<TensorShape> tensors;  // the model's (Model::tensors())
  std::size_t params = 0;            // the model's param_count()
  // The model's (Model::layer_spans()), set where the model will run on layer_storage(): at
  // stage 3 (required) and at stage 2 with compression none, the units are then its layers.
  std::vector<LayerSpan> layers;
  // comm.compression: fp16, bf16 or topk on the gradients' reduce-scatter (unit_compression.h);
  // none: fp32.
  CompressionOptions compression;
  std::int64_t first_step = 0;  // the step the loop starts at (a resumed run's checkpoint)
  // comm.broadcast_buffers: rank 0's buffers (batch norm's running statistics) to every rank
  // after every step, as DDP does; they are broadcast at init whatever this says.
  bool broadcast_buffers = true;
};

class ZeroStrategy final : public SyncStrategy {
 public:
  ZeroStrategy(std::shared_ptr<Communicator> comm, ZeroStrategyOptions options);
  ~ZeroStrategy() override;

  std::string_view name() const override { return "zero"; }
  int rank() const override { return comm_->rank(); }
  void attach_buffers(std::span<float> buffers) override { buffers_ = buffers; }
  void init(std::span<float> params) override;
  void gradient_ready(std::span<float> grads, std::size_t begin, std::size_t end) override;
  void synchronize(std::span<float> grads, std::span<float> params) override;
  void abort(const std::string& reason) override;
  StepStats last_step_stats() const override { return stats_; }
  std::span<const TraceSpan> last_step_spans() const override { return spans_; }
  Optimizer* optimizer() override;
  // Each rank its slices, in order of their offsets; rank 0 also the tails.
  std::optional<OwnParts> own_checkpoint_parts(std::span<const float> params) const override;

  const ShardLayout& layout() const { return layout_; }
  // The storage to hand the model (Model::set_layer_storage) before init(): stage 3's, and
  // stage 2's given `layers` and no compression; null otherwise. Lives as the strategy does.
  LayerStorage* layer_storage();

 private:
  class ShardedOptimizer;
  struct InFlight;

  // Starts unit u's reduce-scatter from `grads` (blocking: on this thread, at once).
  void reduce_scatter_unit(std::span<const float> grads, std::size_t u, bool blocking);
  void settle();
  void synchronize_layers(std::span<float> grads, std::span<float> params);
  double gather_params(std::span<float> params);  // seconds
  void finish_stats(double communicate_s, double update_s);

  std::shared_ptr<Communicator> comm_;
  ZeroStrategyOptions options_;
  ShardLayout layout_;
  std::unique_ptr<ShardedOptimizer> optimizer_;
  std::unique_ptr<UnitCompression> compression_;  // null: none
  std::unique_ptr<LayerShards> layer_shards_;     // stage 3
  std::int64_t steps_ = 0;                        // optimizer steps, counted from first_step
  std::vector<std::unique_ptr<InFlight>> in_flight_;
  std::size_t next_unit_ = 0;   // stage 2: the next unit backward will complete
  std::size_t ready_from_ = 0;  // stage 2: backward has finished [ready_from_, end)
  bool step_started_ = false;
  StepStats stats_;
  CommCounters counted_;
  std::vector<TraceSpan> spans_;
  std::span<float> buffers_;  // the model's running statistics; empty: none
};

}  // namespace gradsync
