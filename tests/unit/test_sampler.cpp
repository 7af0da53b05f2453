#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include "common/error.h"
#include "model/sampler.h"

using gradsync::DistributedSampler;

namespace {

constexpr std::int64_t kDatasetSize = 1000;
constexpr int kBatch = 8;
constexpr std::uint64_t kSeed = 42;

std::vector<std::int64_t> as_vector(std::span<const std::int64_t> span) {
  return {span.begin(), span.end()};
}

}  // namespace

TEST_CASE("epoch_permutation is a deterministic permutation that changes with the epoch") {
  const auto p0 = DistributedSampler::epoch_permutation(kDatasetSize, kSeed, 0);
  std::vector<std::int64_t> sorted = p0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::int64_t> identity(kDatasetSize);
  std::iota(identity.begin(), identity.end(), std::int64_t{0});
  CHECK(sorted == identity);
  CHECK(p0 != identity);

  CHECK(DistributedSampler::epoch_permutation(kDatasetSize, kSeed, 0) == p0);
  CHECK(DistributedSampler::epoch_permutation(kDatasetSize, kSeed, 1) != p0);
  CHECK(DistributedSampler::epoch_permutation(kDatasetSize, kSeed, 2) !=
        DistributedSampler::epoch_permutation(kDatasetSize, kSeed, 1));
  CHECK(DistributedSampler::epoch_permutation(kDatasetSize, kSeed + 1, 0) != p0);

  CHECK(DistributedSampler::epoch_permutation(0, kSeed, 0).empty());
  CHECK(DistributedSampler::epoch_permutation(1, kSeed, 0) == std::vector<std::int64_t>{0});
}

TEST_CASE("shards are disjoint, equal, and together form the single-worker batches") {
  for (const int world : {1, 2, 3, 4, 7}) {
    CAPTURE(world);
    std::vector<DistributedSampler> samplers;
    for (int rank = 0; rank < world; ++rank) {
      samplers.emplace_back(kDatasetSize, rank, world, kBatch, kSeed);
    }
    DistributedSampler single(kDatasetSize, 0, 1, world * kBatch, kSeed);
    const std::int64_t steps = kDatasetSize / (std::int64_t{world} * kBatch);
    REQUIRE(samplers[0].steps_per_epoch() == steps);
    REQUIRE(single.steps_per_epoch() == steps);

    for (const std::int64_t epoch : {0, 1}) {
      CAPTURE(epoch);
      const auto permutation = DistributedSampler::epoch_permutation(kDatasetSize, kSeed, epoch);
      std::vector<std::vector<std::int64_t>> shards(world);
      std::set<std::int64_t> epoch_union;
      for (std::int64_t t = 0; t < steps; ++t) {
        const std::int64_t step = epoch * steps + t;
        std::multiset<std::int64_t> step_union;
        for (int rank = 0; rank < world; ++rank) {
          const auto batch = as_vector(samplers[rank].indices(step));
          REQUIRE(batch.size() == static_cast<std::size_t>(kBatch));
          step_union.insert(batch.begin(), batch.end());
          shards[rank].insert(shards[rank].end(), batch.begin(), batch.end());
        }
        const std::multiset<std::int64_t> expected(permutation.begin() + t * world * kBatch,
                                                   permutation.begin() + (t + 1) * world * kBatch);
        CHECK(step_union == expected);
        const auto single_batch = as_vector(single.indices(step));
        CHECK(step_union == std::multiset<std::int64_t>(single_batch.begin(), single_batch.end()));
        epoch_union.insert(step_union.begin(), step_union.end());
      }
      CHECK(epoch_union.size() == static_cast<std::size_t>(steps * world * kBatch));

      std::set<std::int64_t> seen;
      for (int rank = 0; rank < world; ++rank) {
        CHECK(shards[rank].size() == static_cast<std::size_t>(steps * kBatch));
        for (const std::int64_t index : shards[rank]) {
          CHECK(index >= 0);
          CHECK(index < kDatasetSize);
          CHECK(seen.insert(index).second);  // no index on two ranks, nor twice on one
        }
      }
    }
  }
}

TEST_CASE("rank r owns permutation positions r, r+N, ...") {
  const int world = 3;
  DistributedSampler sampler(kDatasetSize, 2, world, kBatch, kSeed);
  const auto permutation = DistributedSampler::epoch_permutation(kDatasetSize, kSeed, 0);
  const auto batch = as_vector(sampler.indices(1));
  for (int j = 0; j < kBatch; ++j) CHECK(batch[j] == permutation[(kBatch + j) * world + 2]);
}

TEST_CASE("indices may be requested in any order") {
  DistributedSampler forward(kDatasetSize, 1, 4, kBatch, kSeed);
  DistributedSampler jumping(kDatasetSize, 1, 4, kBatch, kSeed);
  const std::int64_t steps = forward.steps_per_epoch();
  std::vector<std::vector<std::int64_t>> in_order;
  for (std::int64_t step = 0; step < 3 * steps; ++step) {
    in_order.push_back(as_vector(forward.indices(step)));
  }
  for (const std::int64_t step :
       {2 * steps + 3, std::int64_t{5}, steps, 3 * steps - 1, std::int64_t{0}, steps + 7}) {
    CAPTURE(step);
    CHECK(as_vector(jumping.indices(step)) == in_order[step]);
  }
  CHECK(forward.epoch_of(steps - 1) == 0);
  CHECK(forward.epoch_of(steps) == 1);
  // Consecutive epochs present different samples at the same position.
  CHECK(in_order[0] != in_order[steps]);
}

TEST_CASE("the sampler validates its arguments") {
  CHECK_THROWS_WITH_AS(
      DistributedSampler(31, 0, 4, 8, kSeed),
      doctest::Contains("dataset of 31 samples cannot fill one global batch of 32"),
      gradsync::Error);
  CHECK_NOTHROW(DistributedSampler(32, 3, 4, 8, kSeed));
  CHECK(DistributedSampler(32, 3, 4, 8, kSeed).steps_per_epoch() == 1);
  CHECK(DistributedSampler(63, 0, 4, 8, kSeed).steps_per_epoch() == 1);
  CHECK_THROWS_AS(DistributedSampler(100, 4, 4, 8, kSeed), gradsync::Error);
  CHECK_THROWS_AS(DistributedSampler(100, -1, 4, 8, kSeed), gradsync::Error);
  CHECK_THROWS_AS(DistributedSampler(100, 0, 0, 8, kSeed), gradsync::Error);
  CHECK_THROWS_AS(DistributedSampler(100, 0, 1, 0, kSeed), gradsync::Error);
  DistributedSampler sampler(100, 0, 1, 8, kSeed);
  CHECK_THROWS_AS(sampler.indices(-1), gradsync::Error);
}
