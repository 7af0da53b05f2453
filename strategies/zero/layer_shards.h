// LayerShards: ZeRO stage 3's parameter and gradient storage, and stage 2's gradient storage (model/layer_storage.h), FSDP's
// full shard over a ShardLayout whose units are the model's layers. Each rank holds only its
// slice (and the under-N-float tail) of every layer's parameters and gradient, in the shard
// buffers the strategy's optimizer steps; a layer's full parameters exist only while it runs:
//
//   acquire_params(l):  wait for l's gather (prefetched by the previous acquire) or gather it
//                       now, then start the next layer's gather (forward and reads: l + 1,
//                       backward: l - 1) so that it overlaps l's compute
//   release_params(l):  free l's gathered values
//   layer_grads(l):     a fresh layer-sized gradient buffer
//   gradient_final(l):  finish the previous layer's reduce-scatter (freeing its full gradient),
//                       start l's into the gradient shard (added to it for micro-batch > 0)
//
// So at most two gathered layers (the running one and its prefetch) and two full layer
// gradients (the one in flight and the one being computed) exist at once: the formula's
// window, max over l of n(l-1) + 2 n(l) + n(l+1) floats, beside the shards. What is freed goes
// to a BufferPool, which hands it to the next layer of the same size (the next pass's, the next
// step's) instead of back to the system: a layer of tens of megabytes is mmapped afresh by the
// allocator, and faulting its pages in again cost stages 2 and 3 more time per step than their
// extra collectives. In use and spare together the pool keeps at most that window (stage 2: max
// over l of n(l) + n(l+1), its two gradients), so the process's peak is the ledger's; the
// ledger (model_state_memory.h) counts the buffers in use, as PyTorch's counts allocated memory
// and not what its caching allocator keeps.
//
// Every collective is issued from the training thread in the same order on every rank (the
// model's passes are the same everywhere); the backend runs them in issue order. Gathers read
// the parameter shard, which the optimizer only writes between steps, when nothing is in
// flight. One per rank; not thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "allreduce/communicator.h"
#include "common/stopwatch.h"
#include "common/model_state_memory.h"
#include "common/trace_span.h"
#include "model/layer_storage.h"
#include "strategies/zero/shard_layout.h"

namespace gradsync {

// Freed layer buffers (64-byte aligned floats), kept for reuse by exact size, never more than
// `budget` floats in use and spare together: the most the shards ever hold in use at once, so
// the pool raises no peak. When a freed block would pass it, the smallest spares go first (a
// large layer is the costly one to map again).
class BufferPool {
 public:
  static constexpr std::align_val_t kAlign{64};
  struct Free {
    void operator()(float* p) const noexcept { ::operator delete(p, kAlign); }
  };
  using Block = std::unique_ptr<float, Free>;

  explicit BufferPool(std::size_t budget) : budget_(budget) {}
  // A block of `n` floats: a spare one of that size, else a new one (uninitialised).
  Block take(std::size_t n);
  // Takes back a block of `n` floats from use (null: nothing), keeping it while the budget allows.
  void give(std::size_t n, Block block);

  std::size_t in_use_floats() const { return in_use_; }
  std::size_t spare_floats() const { return spare_floats_; }

 private:
  // Frees the smallest spares until in use and spare fit the budget.
  void trim();

  const std::size_t budget_;
  std::size_t in_use_ = 0, spare_floats_ = 0;
  std::vector<std::pair<std::size_t, Block>> spare_;
};

class LayerShards final : public LayerStorage {
 public:
  // `layout`'s units are the layers, last layer first; the shards are the strategy's (slices
  // and tails at each unit's shard_offset) and outlive this object.
  // holds_params false: stage 2, the gradient half only (the model keeps its parameters).
  LayerShards(std::shared_ptr<Communicator> comm, const ShardLayout& layout,
              std::span<float> param_shard, std::span<float> grad_shard, bool holds_params);
  ~LayerShards() override;

  bool holds_params() const override { return holds_params_; }
  std::span<const float> acquire_params(std::size_t layer, LayerPass pass) override;
  void release_params(std::size_t layer) override;
  void store_params(std::size_t layer, std::span<const float> values) override;
  std::span<float> layer_grads(std::size_t layer) override;
  void gradient_final(std::size_t layer, bool accumulate) override;

  // Waits for the step's last reduce-scatter: the gradient shard is then complete. Throws if a
  // gather is still in flight (a pass left unfinished).
  void finish_gradients();
  // Waits, swallowing failures, for whatever is in flight (destruction, abort).
  void settle() noexcept;
  // The collectives since the last call, for the step's trace; and the bytes sent and received
  // by reads (evaluation, copy_params_to_host) since the last call, which are no step's.
  std::vector<TraceSpan> take_spans();
  CommCounters take_read_counters();

 private:
  struct Gathered;
  struct Reducing;

  const ShardUnit& unit(std::size_t layer) const;
  std::unique_ptr<Gathered> start_gather(std::size_t layer);
  void finish_gather(Gathered& g);
  void finish_reduce();

  std::shared_ptr<Communicator> comm_;
  const ShardLayout& layout_;
  std::span<float> param_shard_, grad_shard_;
  bool holds_params_ = true;
  BufferPool pool_;  // before the buffers below: they give their storage back to it
  std::unique_ptr<Gathered> current_, prefetched_;
  std::unique_ptr<Reducing> computing_, reducing_;
  std::vector<TraceSpan> spans_;
  // A read pass: the counters where it began, and what reads moved since take_read_counters.
  std::optional<CommCounters> read_from_;
  CommCounters read_;
};

}  // namespace gradsync
