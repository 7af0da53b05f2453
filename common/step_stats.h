// What one training step cost one rank: the numbers metrics.csv records per row.
#pragma once

#include <cstdint>

namespace gradsync {

struct StepStats {
  double compute_s = 0;      // forward + backward on this rank
  double communicate_s = 0;  // moving gradients / parameters and applying the update
  double wait_s = 0;         // blocked on other ranks (stragglers, barriers) doing nothing
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  // allreduce: collectives issued (one per bucket), the B of the cost model's latency term
  std::uint64_t collectives = 0;
  std::uint32_t staleness = 0;  // ps async/ssp: steps the parameters lagged behind (as SSP counts)
};

}  // namespace gradsync
