// make_strategies: the strategies one process runs, one per local replica.
//
// `single` gives one; `dp` gives `workers` replicas that share one DataParallel group (they
// must run on separate threads, since each synchronize() waits for the others). A wrong name
// throws gradsync::ConfigError listing the valid ones.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/emulated_link.h"
#include "strategies/sync_strategy.h"
#include "worker/sgd.h"

namespace gradsync {

struct StrategyOptions {
  std::string name = "single";
  int workers = 1;
  SgdOptions sgd;
  std::chrono::milliseconds timeout{60000};  // any wait on another replica
  std::shared_ptr<EmulatedLink> link;        // dp: replica 0's link (network.link_gbps)
};

// The strategy names gradsync knows, in the order the docs list them.
const std::vector<std::string>& strategy_names();

std::vector<std::unique_ptr<SyncStrategy>> make_strategies(const StrategyOptions& options);

}  // namespace gradsync
