#include "strategies/zero/unit_compression.h"

#include <algorithm>

#include "common/compression/half_codec.h"
#include "common/error.h"

namespace gradsync {

UnitCompression::UnitCompression(std::shared_ptr<Communicator> comm, const ShardLayout& layout,
                                 CompressionOptions options)
    : comm_(std::move(comm)), layout_(layout), options_(std::move(options)) {
  GRADSYNC_CHECK(
      options_.method == "fp16" || options_.method == "bf16" || options_.method == "topk",
      "zero compresses with fp16, bf16 or topk");
}

UnitCompression::Started UnitCompression::start(std::span<const float> grads, std::size_t u,
                                                std::span<float> shard) {
  const ShardUnit& unit = layout_.units[u];
  UnitState& state = states_[u];
  if (options_.method == "topk") return start_top_k(grads, unit, state, shard);
  return start_half(grads, unit, state, shard);
}

UnitCompression::Started UnitCompression::start_half(std::span<const float> grads,
                                                     const ShardUnit& unit, UnitState& state,
                                                     std::span<float> shard) {
  Started started;
  const HalfType type = options_.method == "fp16" ? HalfType::kFp16 : HalfType::kBf16;
  const float n = static_cast<float>(layout_.ranks);
  const std::span<float> slice = shard.first(unit.slice), tail = shard.subspan(unit.slice);
  if (unit.slice > 0) {
    state.wire.resize(unit.sliced());
    state.mine.resize(unit.slice);
    // Divided before the sum, as DDP's hooks do, so that N large values cannot overflow fp16.
    compression::encode_half(type, grads.subspan(unit.begin, unit.sliced()), state.wire, n);
    started.works.push_back(
        comm_->reduce_scatter_half_async(state.wire, state.mine, type, ReduceOp::kSum));
  }
  if (unit.tail() > 0) {
    started.works.push_back(comm_->allreduce_into_async(
        grads.subspan(unit.tail_begin(), unit.tail()), tail, ReduceOp::kAvg));
  }
  started.then = [&state, slice, type] {
    if (!slice.empty()) compression::decode_half(type, state.mine, slice);
  };
  return started;
}

UnitCompression::Started UnitCompression::start_top_k(std::span<const float> grads,
                                                      const ShardUnit& unit, UnitState& state,
                                                      std::span<float> shard) {
  if (!state.codec) state.codec = std::make_unique<compression::TopKCodec>(unit.floats());
  state.codec->select(grads.subspan(unit.begin, unit.floats()), options_.topk_ratio, state.sent);
  const std::size_t k = state.sent.indices.size();
  state.pairs.resize(2 * k);
  compression::pack_words(state.sent, state.pairs);
  state.gathered.resize(state.pairs.size() * static_cast<std::size_t>(layout_.ranks));
  Started started;
  started.works.push_back(comm_->allgather_words_async(state.pairs, state.gathered));
  // Indices are the unit's; this rank keeps those of its slice and of the tail.
  const std::size_t mine_begin = unit.slice_begin(layout_.rank) - unit.begin;
  const std::size_t tail_begin = unit.tail_begin() - unit.begin;
  const std::size_t slice = unit.slice, floats = unit.floats(), ranks = layout_.ranks;
  started.then = [&state, shard, k, mine_begin, tail_begin, slice, floats, ranks] {
    std::fill(shard.begin(), shard.end(), 0.0f);
    compression::SparseGradient received;
    for (std::size_t r = 0; r < ranks; ++r) {
      compression::unpack_words({state.gathered.data() + r * 2 * k, 2 * k}, received);
      for (std::size_t i = 0; i < k; ++i) {
        const std::size_t index = received.indices[i];
        GRADSYNC_CHECK(index < floats, "topk: an index past the unit");
        const float value = received.values[i];
        if (index >= mine_begin && index < mine_begin + slice) {
          shard[index - mine_begin] += value;
        } else if (index >= tail_begin) {
          shard[slice + index - tail_begin] += value;
        }
      }
    }
    const float n = static_cast<float>(ranks);
    for (float& g : shard) g /= n;
  };
  return started;
}

}  // namespace gradsync
