// comm.compression: topk (bucket_reducer.h). Each rank selects the k largest entries of its
// bucket plus residual (common/compression/top_k_codec.h); every rank's (index, value) pairs are
// gathered (allgather_words: k indices then k value bits, 8 k bytes a rank) and added into the
// zeroed bucket in rank order, then divided by N: every rank computes the same sum from the
// same pairs, so every rank ends with the same bits. An index sent by several ranks is summed.
#include "strategies/allreduce/top_k_reducer.h"

#include <algorithm>
#include <map>
#include <vector>

#include "common/compression/top_k_codec.h"
#include "common/error.h"
#include "strategies/allreduce/reducer_work.h"

namespace gradsync {
namespace {

using compression::SparseGradient;
using compression::TopKCodec;

struct BucketState {
  TopKCodec codec;
  std::vector<float> velocity;  // local_momentum: u = m u + g, this rank's own
  SparseGradient sent;
  std::vector<std::uint32_t> mine;      // k indices, then k value bits
  std::vector<std::uint32_t> gathered;  // every rank's `mine`, in rank order
};

class TopKReducer final : public BucketReducer {
 public:
  TopKReducer(std::shared_ptr<Communicator> comm, const CompressionOptions& options)
      : comm_(std::move(comm)),
        ratio_(options.topk_ratio),
        momentum_(static_cast<float>(options.local_momentum)),
        start_step_(options.start_step) {}

  std::shared_ptr<Work> start(std::span<float> bucket, std::size_t offset, std::int64_t step,
                              bool blocking) override {
    auto it = states_.find(offset);
    if (it == states_.end()) {
      it = states_.emplace(offset, BucketState{TopKCodec(bucket.size()), {}, {}, {}, {}}).first;
    }
    BucketState& state = it->second;
    GRADSYNC_CHECK(state.codec.size() == bucket.size(),
                   "topk: a bucket's layout changed between steps");
    std::span<const float> selected = bucket;
    if (momentum_ > 0) {
      state.velocity.resize(bucket.size(), 0.0f);
      for (std::size_t i = 0; i < bucket.size(); ++i) {
        state.velocity[i] = momentum_ * state.velocity[i] + bucket[i];
      }
      selected = state.velocity;
      if (step < start_step_) {
        // Warm-up, uncompressed: the average of the velocities is the global momentum's.
        std::copy(state.velocity.begin(), state.velocity.end(), bucket.begin());
        return run_or_issue(
            blocking, [&] { return comm_->allreduce_async(bucket, ReduceOp::kAvg); },
            [&] { comm_->allreduce(bucket, ReduceOp::kAvg); });
      }
    }
    state.codec.select(selected, ratio_, state.sent);
    const std::size_t k = state.sent.indices.size();
    state.mine.resize(2 * k);
    compression::pack_words(state.sent, state.mine);
    state.gathered.resize(state.mine.size() * static_cast<std::size_t>(comm_->size()));
    std::span<const std::uint32_t> in = state.mine;
    std::span<std::uint32_t> out = state.gathered;
    std::shared_ptr<Work> work = run_or_issue(
        blocking, [&] { return comm_->allgather_words_async(in, out); },
        [&] { comm_->allgather_words(in, out); });
    return std::make_shared<ThenWork>(std::move(work), [this, bucket, k, &state] {
      std::fill(bucket.begin(), bucket.end(), 0.0f);
      SparseGradient received;
      for (int r = 0; r < comm_->size(); ++r) {
        compression::unpack_words({state.gathered.data() + std::size_t(r) * 2 * k, 2 * k},
                                  received);
        // Checks every index: a rank's pairs are only ever trusted as far as the bucket goes.
        compression::scatter_add(received, bucket);
      }
      const float n = static_cast<float>(comm_->size());
      for (float& g : bucket) g /= n;
    });
  }

 private:
  std::shared_ptr<Communicator> comm_;
  double ratio_;
  float momentum_;
  std::int64_t start_step_;
  std::map<std::size_t, BucketState> states_;  // by the bucket's offset
};

}  // namespace

std::unique_ptr<BucketReducer> make_top_k_reducer(std::shared_ptr<Communicator> comm,
                                                  const CompressionOptions& options) {
  GRADSYNC_CHECK(options.topk_ratio > 0 && options.topk_ratio <= 1,
                 "topk: the ratio must be in (0, 1]");
  return std::make_unique<TopKReducer>(std::move(comm), options);
}

}  // namespace gradsync
