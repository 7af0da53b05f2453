// `single`: one worker, no communication. The baseline every other strategy is checked
// against: trained on the global batch, it follows the same parameter trajectory as any
// synchronous strategy with N workers of batch global/N.
#pragma once

#include <memory>

#include "model/optimizer/sgd.h"
#include "strategies/sync_strategy.h"

namespace gradsync {

class SingleStrategy final : public SyncStrategy {
 public:
  // `device`: where the model's buffers live (Model::device(); -1 for host memory).
  explicit SingleStrategy(const SgdOptions& sgd, int device = -1)
      : sgd_options_(sgd), device_(device) {}

  std::string_view name() const override { return "single"; }
  int rank() const override { return 0; }
  void init(std::span<float> params) override;
  void synchronize(std::span<float> grads, std::span<float> params) override;
  StepStats last_step_stats() const override { return stats_; }
  Optimizer* optimizer() override { return sgd_.get(); }

 private:
  SgdOptions sgd_options_;
  int device_;
  std::unique_ptr<Optimizer> sgd_;
  StepStats stats_;
};

}  // namespace gradsync
