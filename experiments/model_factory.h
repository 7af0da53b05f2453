// The model a configuration names (model.kind), built for one replica.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "experiments/config.h"
#include "worker/model.h"

namespace gradsync {

// `widths` is RunPlan::widths (the MLP's input, hidden and output widths from the data);
// `max_batch` the largest batch forward_backward will see. Parameters are initialised from
// train.seed, the same on every replica.
std::unique_ptr<Model> make_model(const Config& config, const std::vector<int>& widths,
                                  int max_batch);

// The parameter count make_model's model will have, without allocating it.
std::int64_t model_parameters(const Config& config, const std::vector<int>& widths);

}  // namespace gradsync
