// `gradsync bench allreduce --device gpu`: the collective_bench sweep on NcclCommunicator, one
// rank per visible GPU (ranks as threads of this process, meeting through one InMemoryStore by
// the same unique-id path a multi-process job uses), on device buffers. Same plug-ins, same
// timing rules and the same table as on CPU (collective_bench.h); each row's timed iterations
// are issued back to back on the communicator's stream and waited for once, as nccl-tests does,
// and the check run copies the result back to the host to count wrong elements.
#pragma once

#include <string>
#include <vector>

#include "bench/collective_sweep.h"

namespace gradsync {

struct GpuSweep {
  std::string transport;  // for the table's header: "NCCL 2.28.9, GPUs 0..3, one rank per GPU"
};

// Checks that this build has NCCL and that enough GPUs are visible for `ranks`, and sets it
// when 0 (every visible GPU). Throws a one-line ConfigError naming --device or --ranks otherwise.
GpuSweep nccl_sweep_setup(int& ranks);

// Runs the sweep (measure_sweep's rules). Rank r uses GPU r.
std::vector<SizeResult> nccl_measure(const SweepSpec& spec);

}  // namespace gradsync
