// What the GPU tests share: skipping cleanly where no GPU is visible (CI builds the GPU code on
// machines without one, and `make test` must pass there), failing where GPUs are there but
// unusable or GRADSYNC_REQUIRE_GPU promises them, and a small random dataset.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>

#include "common/random.h"
#include "model/dataset.h"
#include "worker/model_factory.h"

namespace gradsync::testing {

// GPUs this machine must show for the GPU tests to be run rather than skipped: the count
// GRADSYNC_REQUIRE_GPU gives (scripts/gpu-check.sh sets 1), 0 when it is unset. On a GPU machine
// that makes "no GPU visible" a failure, not a silent pass.
inline int required_gpus() {
  const char* text = std::getenv("GRADSYNC_REQUIRE_GPU");
  return text == nullptr ? 0 : std::atoi(text);
}

// What a GPU test needing `needed` GPUs does here: run, skip (passing without running), or
// fail, with the line to say. `count` is visible_gpus() (injectable for tests), `required`
// required_gpus().
struct GpuGate {
  enum Action { kRun, kSkip, kFail } action = kRun;
  std::string message;
};

inline GpuGate gpu_gate(int needed, const std::function<int()>& count = visible_gpus,
                        int required = required_gpus()) {
  int visible = 0;
  try {
    visible = count();
  } catch (const std::exception& e) {
    // GPUs that are there but unusable (a driver too old for this CUDA runtime) fail loudly:
    // skipping would let a GPU machine pass every GPU test without running a kernel.
    return {GpuGate::kFail, std::string("GPUs present but unusable: ") + e.what()};
  }
  if (visible >= needed) return {GpuGate::kRun, ""};
  const std::string counts =
      std::to_string(needed) + " CUDA device(s), " + std::to_string(visible) + " visible";
  // A test needing more GPUs than promised still skips: the two-GPU cases on a one-GPU machine.
  if (required >= needed) {
    return {GpuGate::kFail,
            "GRADSYNC_REQUIRE_GPU=" + std::to_string(required) + " but this test needs " + counts};
  }
  return {GpuGate::kSkip, "skipped: needs " + counts};
}

// Returns from the test (after saying so in its output) when gpu_gate says skip: the test
// passes without running; fails it when gpu_gate says fail.
#define GRADSYNC_SKIP_WITHOUT_GPUS(needed)                                                     \
  do {                                                                                         \
    const ::gradsync::testing::GpuGate gradsync_gate_ = ::gradsync::testing::gpu_gate(needed); \
    if (gradsync_gate_.action == ::gradsync::testing::GpuGate::kFail) {                        \
      FAIL(gradsync_gate_.message);                                                            \
    }                                                                                          \
    if (gradsync_gate_.action == ::gradsync::testing::GpuGate::kSkip) {                        \
      MESSAGE(gradsync_gate_.message);                                                         \
      return;                                                                                  \
    }                                                                                          \
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
