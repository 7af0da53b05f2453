// DistributedSampler: each rank's share of every global batch, as PyTorch's
// DistributedSampler(drop_last=True) + DataLoader(drop_last=True) give it (with the
// sampler's default drop_last=False, PyTorch pads the last shard by repeating samples).
//
// Every epoch has its own permutation of [0, dataset_size), a pure function of (seed, epoch),
// identical on every rank with no communication. Rank r owns positions r, r+N, r+2N, ... of
// that permutation (a disjoint, equal shard; the tail that does not fill a whole global batch
// is dropped), and its batch b is the next `batch` of them. Consequently the union of all
// ranks' batches at step t is exactly positions [t*N*batch, (t+1)*N*batch) of the permutation:
// the same samples a single worker with global batch N*batch sees at step t. That is what
// lets every synchronous strategy be compared with `single` step for step.
//
// Not thread-safe; one sampler per rank. indices() stays valid until the next call.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gradsync {

class DistributedSampler {
 public:
  // Throws gradsync::Error when the dataset cannot fill one global batch (world * batch).
  DistributedSampler(std::int64_t dataset_size, int rank, int world_size, int batch,
                     std::uint64_t seed);

  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  std::int64_t epoch_of(std::int64_t step) const { return step / steps_per_epoch_; }

  // This rank's sample indices for global step `step` (any order of calls is allowed;
  // the epoch permutation is recomputed only when the epoch changes).
  std::span<const std::int64_t> indices(std::int64_t step);

  // The permutation of one epoch (exposed for tests).
  static std::vector<std::int64_t> epoch_permutation(std::int64_t dataset_size, std::uint64_t seed,
                                                     std::int64_t epoch);

 private:
  std::int64_t size_;
  int rank_;
  int world_;
  int batch_;
  std::uint64_t seed_;
  std::int64_t steps_per_epoch_;
  std::int64_t cached_epoch_ = -1;
  std::vector<std::int64_t> permutation_;
  std::vector<std::int64_t> batch_indices_;
};

}  // namespace gradsync
