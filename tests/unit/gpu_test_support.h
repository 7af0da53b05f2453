// What the GPU tests share: skipping cleanly where no GPU is visible (CI builds the GPU code on
// machines without one, and `make test` must pass there), and a small random dataset.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>

#include "common/random.h"
#include "model/dataset.h"
#include "worker/model_factory.h"

namespace gradsync::testing {

// True (after saying so in the test's output) when fewer than `needed` GPUs are visible: the
// test returns at once and passes.
#define GRADSYNC_SKIP_WITHOUT_GPUS(needed)                                                   \
  do {                                                                                       \
    const int gradsync_visible_gpus_ = ::gradsync::visible_gpus();                           \
    if (gradsync_visible_gpus_ < (needed)) {                                                 \
      MESSAGE("skipped: needs " << (needed) << " CUDA device(s), " << gradsync_visible_gpus_ \
                                << " visible");                                              \
      return;                                                                                \
    }                                                                                        \
  } while (0)

inline Dataset random_dataset(std::int64_t n, int dim, int classes, std::uint64_t seed) {
  Dataset data;
  data.name = "random";
  data.size = n;
  data.dim = dim;
  data.classes = classes;
  SplitMix64 rng(seed);
  for (std::int64_t i = 0; i < n * dim; ++i) data.features.push_back(float(rng.normal()));
  for (std::int64_t i = 0; i < n; ++i) data.labels.push_back(std::int32_t(rng.below(classes)));
  return data;
}

}  // namespace gradsync::testing
