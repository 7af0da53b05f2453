// What the strategy tests share: one synthetic data set and the `single` reference run that
// every synchronous strategy must follow step for step.
#pragma once

#include <vector>

#include "model/optimizer/sgd.h"
#include "model/synthetic_data.h"
#include "worker/in_process.h"

namespace gradsync::testing {

// 4096 training samples of 32 features, 10 classes; built once per test binary.
inline const TrainTest& synthetic_data() {
  static const TrainTest set = [] {
    SyntheticDataOptions options;
    options.train_samples = 4096;
    options.test_samples = 256;
    return make_synthetic_data(options);
  }();
  return set;
}

// `single` on the global batch: the reference trajectory; returns the final parameters.
inline std::vector<float> train_single(const std::vector<int>& hidden, int batch,
                                       std::int64_t steps, const SgdOptions& sgd) {
  Config config;
  config.train.batch = batch;
  config.train.lr = sgd.lr;
  config.train.momentum = sgd.momentum;
  config.train.weight_decay = sgd.weight_decay;
  config.model.hidden = hidden;
  LoopOptions loop;
  loop.steps = steps;
  loop.keep_params = true;
  return train_in_process(config, synthetic_data(), loop, {}, {}).front().final_params;
}

}  // namespace gradsync::testing
