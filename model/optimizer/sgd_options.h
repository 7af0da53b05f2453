// The hyper-parameters of SGD with momentum and weight decay (torch.optim.SGD's), and the
// learning-rate schedule over the run's optimizer steps (train.lr_schedule, train.warmup_steps).
#pragma once

#include <cstdint>

namespace gradsync {

enum class LrSchedule {
  kConstant,  // lr on every step
  kCosine,    // torch's CosineAnnealingLR(T_max = the run's steps, eta_min = 0) after warm-up
};

struct SgdOptions {
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 0.0;
  LrSchedule schedule = LrSchedule::kConstant;
  // Linear warm-up from lr / warmup_steps to lr over the first warmup_steps steps (Goyal et
  // al.'s for large batches); any schedule.
  std::uint64_t warmup_steps = 0;
  // The optimizer steps the run takes: cosine's horizon, where its rate reaches 0.
  std::uint64_t total_steps = 0;

  // The rate of optimizer step `step` (0-based: the steps already taken), a function of the
  // step alone, so every replica, shard and resumed run applies the same rate at a step.
  double lr_at(std::uint64_t step) const;
};

}  // namespace gradsync
