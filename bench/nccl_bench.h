// `gradsync bench allreduce --device gpu`: the collective_bench sweep on NcclCommunicator (the
// backend "nccl"), one rank per visible GPU (ranks as threads of this process, meeting through
// one InMemoryStore by the same unique-id path a multi-process job uses), on device buffers.
// Same plug-ins, same timing rules and the same table as on CPU (collective_bench.h); each
// form's timed iterations are issued back to back on the communicator's stream and waited for
// once, as nccl-tests does, and the check run copies the result back to the host to count wrong
// elements. The form NcclCommunicator lacks is composed as on CPU, with a device-to-device copy
// on the communicator's stream.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "bench/collective_sweep.h"

namespace gradsync {

struct GpuSweep {
  std::string transport;  // for the table's header: "NCCL 2.28.9, GPUs 0..3, one rank per GPU"
};

// Checks that this build has NCCL and that enough GPUs are visible for `ranks`, and sets it
// when 0 (every visible GPU). Throws a one-line ConfigError naming --device or --ranks otherwise.
GpuSweep nccl_sweep_setup(int& ranks);

// Rank `rank` of `size` on GPU `rank`, connected through `store` (collective: every rank calls
// it). The Store must outlive the rank.
std::unique_ptr<BenchRank> make_nccl_rank(const CollectiveOp& op, Store& store, int rank, int size,
                                          std::chrono::milliseconds timeout);

}  // namespace gradsync
