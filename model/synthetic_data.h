// A teacher-student classification set that needs no files: features are standard normal,
// labels are the argmax of a fixed random "teacher" (a one-hidden-layer tanh network), so a
// student MLP can learn it well but not trivially. Fully determined by the options' seed.
#pragma once

#include <cstdint>

#include "model/dataset.h"

namespace gradsync {

struct SyntheticDataOptions {
  std::int64_t train_samples = 8192;
  std::int64_t test_samples = 2048;
  int dim = 32;
  int classes = 10;
  std::uint64_t seed = 1;
};

TrainTest make_synthetic_data(const SyntheticDataOptions& options);

}  // namespace gradsync
