// make_strategies: the strategies one process runs, one per local replica.
//
// `single` gives one; `dp` gives `workers` replicas that share one DataParallel group (they
// must run on separate threads, since each synchronize() waits for the others). A wrong name
// throws gradsync::ConfigError listing the valid ones.
//
// With `device` >= 0 the models live on GPUs: `single` updates on that device, and `dp` is the
// GPU group of strategies/dp/dp_gpu_strategy.h (replica r's model on device r; a build with NCCL
// and at least `workers` visible GPUs). Without them: ConfigError naming key `device`.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/emulated_link.h"
#include "strategies/sync_strategy.h"
#include "model/optimizer/sgd.h"

namespace gradsync {

struct StrategyOptions {
  std::string name = "single";
  int workers = 1;
  SgdOptions sgd;
  std::chrono::milliseconds timeout{60000};  // any wait on another replica
  std::shared_ptr<EmulatedLink> link;        // dp: replica 0's link (network.link_gbps)
  int device = -1;  // -1: models in host memory; else the CUDA ordinal of replica 0's model
};

// The strategy names gradsync knows, in the order the docs list them.
const std::vector<std::string>& strategy_names();

std::vector<std::unique_ptr<SyncStrategy>> make_strategies(const StrategyOptions& options);

// Throws the ConfigError make_strategies gives `dp` on GPUs in this build and on this machine
// (no NCCL, fewer GPUs than replicas), without making anything: checked before a run starts.
void check_dp_on_gpus(int workers);

}  // namespace gradsync
