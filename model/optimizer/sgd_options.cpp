#include "model/optimizer/sgd_options.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace gradsync {

double SgdOptions::lr_at(std::uint64_t step) const {
  if (step < warmup_steps) {
    return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  if (schedule == LrSchedule::kConstant || total_steps <= warmup_steps) return lr;
  // Past the horizon (a run extended on resume) the rate stays at cosine's end, 0.
  const double span = static_cast<double>(total_steps - warmup_steps);
  const double t = std::min(static_cast<double>(step - warmup_steps), span);
  return lr * 0.5 * (1.0 + std::cos(std::numbers::pi * t / span));
}

}  // namespace gradsync
