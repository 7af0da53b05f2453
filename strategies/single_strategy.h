// `single`: one worker, no communication. The baseline every other strategy is checked
// against: trained on the global batch, it follows the same parameter trajectory as any
// synchronous strategy with N workers of batch global/N.
#pragma once

#include <optional>

#include "strategies/sync_strategy.h"
#include "worker/sgd.h"

namespace gradsync {

class SingleStrategy final : public SyncStrategy {
 public:
  explicit SingleStrategy(const SgdOptions& sgd) : sgd_options_(sgd) {}

  std::string_view name() const override { return "single"; }
  int rank() const override { return 0; }
  void init(std::span<float> params) override;
  void synchronize(std::span<float> grads, std::span<float> params) override;
  StepStats last_step_stats() const override { return stats_; }

 private:
  SgdOptions sgd_options_;
  std::optional<Sgd> sgd_;
  StepStats stats_;
};

}  // namespace gradsync
