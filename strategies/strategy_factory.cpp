#include "strategies/strategy_factory.h"

#include "common/error.h"
#include "strategies/dp_strategy.h"
#include "strategies/single_strategy.h"

namespace gradsync {

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = {"single", "dp", "allreduce", "ps"};
  return names;
}

std::vector<std::unique_ptr<SyncStrategy>> make_strategies(const StrategyOptions& options) {
  if (options.name == "single") {
    if (options.workers != 1) {
      throw ConfigError("strategy", "workers",
                        "`single` runs exactly one worker, got " + std::to_string(options.workers));
    }
    std::vector<std::unique_ptr<SyncStrategy>> out;
    out.push_back(std::make_unique<SingleStrategy>(options.sgd));
    return out;
  }
  if (options.name == "dp") {
    return make_dp_group(options.workers, options.sgd, options.timeout, options.link);
  }
  if (options.name == "allreduce" || options.name == "ps") {
    throw ConfigError("strategy", "strategy",
                      "`" + options.name +
                          "` runs one process per rank (gradsync worker), not in-process");
  }
  std::string valid;
  for (const auto& name : strategy_names()) valid += (valid.empty() ? "" : ", ") + name;
  throw ConfigError("strategy", "strategy",
                    "unknown strategy '" + options.name + "' (valid: " + valid + ")");
}

}  // namespace gradsync
