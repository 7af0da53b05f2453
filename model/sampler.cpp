#include "model/sampler.h"

#include <numeric>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/random.h"

namespace gradsync {
DistributedSampler::DistributedSampler(std::int64_t dataset_size, int rank, int world_size,
                                       int batch, std::uint64_t seed)
    : size_(dataset_size), rank_(rank), world_(world_size), batch_(batch), seed_(seed) {
  if (world_size < 1) {
    throw Error("DistributedSampler: world size must be >= 1, got " + std::to_string(world_size));
  }
  if (rank < 0 || rank >= world_size) {
    throw Error("DistributedSampler: rank " + std::to_string(rank) + " is outside [0, " +
                std::to_string(world_size) + ")");
  }
  if (batch < 1) {
    throw Error("DistributedSampler: batch must be >= 1, got " + std::to_string(batch));
  }
  const std::int64_t global_batch = std::int64_t{world_size} * batch;
  if (dataset_size < global_batch) {
    throw Error("DistributedSampler: dataset of " + std::to_string(dataset_size) +
                " samples cannot fill one global batch of " + std::to_string(global_batch) + " (" +
                std::to_string(world_size) + " ranks x batch " + std::to_string(batch) + ")");
  }
  steps_per_epoch_ = dataset_size / global_batch;
  batch_indices_.resize(static_cast<std::size_t>(batch));
}

std::span<const std::int64_t> DistributedSampler::indices(std::int64_t step) {
  if (step < 0) throw Error("DistributedSampler: negative step " + std::to_string(step));
  const std::int64_t epoch = epoch_of(step);
  if (epoch != cached_epoch_) {
    permutation_ = epoch_permutation(size_, seed_, epoch);
    cached_epoch_ = epoch;
  }
  // Rank r's shard is positions r, r+N, r+2N, ...; its batch b is shard entries
  // [b*B, (b+1)*B), i.e. permutation positions (b*B + j)*N + r.
  const std::int64_t first = (step % steps_per_epoch_) * batch_;
  for (int j = 0; j < batch_; ++j) {
    batch_indices_[j] = permutation_[static_cast<std::size_t>((first + j) * world_ + rank_)];
  }
  return batch_indices_;
}

std::vector<std::int64_t> DistributedSampler::epoch_permutation(std::int64_t dataset_size,
                                                                std::uint64_t seed,
                                                                std::int64_t epoch) {
  if (dataset_size < 0) {
    throw Error("DistributedSampler: negative dataset size " + std::to_string(dataset_size));
  }
  std::vector<std::int64_t> permutation(static_cast<std::size_t>(dataset_size));
  std::iota(permutation.begin(), permutation.end(), std::int64_t{0});
  // Our own generator (common/random.h): std::shuffle differs between standard libraries, and
  // every rank must draw the same permutation without talking to the others.
  SplitMix64 rng(mix_seed(seed, static_cast<std::uint64_t>(epoch)));
  for (std::size_t i = permutation.size(); i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(rng.below(i));
    std::swap(permutation[i - 1], permutation[j]);
  }
  return permutation;
}

}  // namespace gradsync
