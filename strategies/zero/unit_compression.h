// comm.compression under zero: one unit's gradient reduced into this rank's slice (and the
// unit's tail) compressed, as allreduce's buckets are (strategies/allreduce/bucket_reducer.h):
//
//   fp16, bf16  the unit's slices divided by N, rounded once to 16 bits and reduce-scattered in
//               16 bits (Communicator::reduce_scatter_half), this rank's slice decoded; the tail
//               (under N floats) all-reduced in fp32
//   topk        the k = ratio n largest of unit + residual, every rank's (index, value) pairs
//               gathered (allgather_words) and those that fall in this rank's slice or the tail
//               summed in rank order, then divided by N; the rest is next step's residual
//
// Parameters are never compressed: the all-gather after the step copies the owners' values, as
// a ps pull stays exact. Every rank ends with the same parameters. One per strategy; not
// thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "allreduce/communicator.h"
#include "common/compression/top_k_codec.h"
#include "strategies/allreduce/bucket_reducer.h"
#include "strategies/zero/shard_layout.h"

namespace gradsync {

class UnitCompression {
 public:
  // options.method: fp16, bf16 or topk (the presets refuse powersgd for zero).
  UnitCompression(std::shared_ptr<Communicator> comm, const ShardLayout& layout,
                  CompressionOptions options);

  struct Started {
    std::vector<std::shared_ptr<Work>> works;  // wait for every one, then run `then`
    std::function<void()> then;
  };
  // Starts unit u of `grads`; `shard` is this rank's slice then tail of it (in the grad shard),
  // which `then` leaves holding the average over ranks.
  Started start(std::span<const float> grads, std::size_t u, std::span<float> shard);

 private:
  struct UnitState {
    std::vector<std::uint16_t> wire, mine;  // fp16, bf16: the unit's slices, this rank's block
    std::unique_ptr<compression::TopKCodec> codec;
    compression::SparseGradient sent;
    std::vector<std::uint32_t> pairs, gathered;
  };
  Started start_half(std::span<const float> grads, const ShardUnit& unit, UnitState& state,
                     std::span<float> shard);
  Started start_top_k(std::span<const float> grads, const ShardUnit& unit, UnitState& state,
                      std::span<float> shard);

  std::shared_ptr<Communicator> comm_;
  const ShardLayout& layout_;
  CompressionOptions options_;
  std::map<std::size_t, UnitState> states_;  // by unit
};

}  // namespace gradsync
