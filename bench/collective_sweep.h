// One sweep of sizes over N ranks run as threads of this process, with nccl-tests' timing rules
// (collective_bench.h says them): what the TcpRing, Gloo and NCCL runners share. Each runner
// supplies a BenchRank per rank; measure_sweep does the rest.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "bench/collective_ops.h"

namespace gradsync {

// A connected rank of one implementation. Used by one thread only.
class BenchRank {
 public:
  virtual ~BenchRank() = default;
  virtual void barrier() = 0;
  virtual void run(RankBuffers& buffers) = 0;  // one collective, blocking
  // `times` collectives back to back, returning when the last is done. A rank whose
  // collectives queue on a device (NCCL) issues them all and waits once, as nccl-tests does.
  virtual void run_many(RankBuffers& buffers, int times) {
    for (int k = 0; k < times; ++k) run(buffers);
  }
  // Where a rank keeps its buffers elsewhere (GPU memory): `load` after the host buffers were
  // (re)initialised, `unload` before they are checked. Host ranks need neither.
  virtual void load(RankBuffers& /*buffers*/) {}
  virtual void unload(RankBuffers& /*buffers*/) {}
};

struct SweepSpec {
  const CollectiveOp* op = nullptr;
  int ranks = 2;
  std::vector<std::size_t> sizes;  // requested bytes per row
  int warmup = 5;
  int iters = 0;  // 0: auto
  std::chrono::milliseconds timeout{60000};
};

struct SizeResult {
  std::size_t bytes = 0;  // count * sizeof(float): the row's size S
  std::size_t count = 0;
  int iters = 0;
  double seconds = 0;       // max over ranks of the mean per-iteration time
  std::uint64_t wrong = 0;  // summed over ranks
};

// Runs spec.ranks threads; thread r calls connect(r) once, sweeps every size with the timing
// rules of collective_bench.h, and destroys its rank only once every rank is done. The first failure (in time)
// is rethrown after every thread has joined.
std::vector<SizeResult> measure_sweep(
    const SweepSpec& spec, const std::function<std::unique_ptr<BenchRank>(int rank)>& connect);

}  // namespace gradsync
