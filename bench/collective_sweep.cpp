#include "bench/collective_sweep.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "common/replica_barrier.h"
#include "common/stopwatch.h"

namespace gradsync {
namespace {

// Auto iterations aim at this much timed work per row: long enough to average out scheduler
// noise on loopback, short enough that a 1 KiB..64 MiB sweep finishes in seconds.
constexpr double kTargetRowSeconds = 0.3;
constexpr int kMinAutoIters = 5;
constexpr int kMaxAutoIters = 1000;

}  // namespace

std::vector<SizeResult> measure_sweep(
    const SweepSpec& spec, const std::function<std::unique_ptr<BenchRank>(int rank)>& connect) {
  const int n = spec.ranks;
  const CollectiveOp& op = *spec.op;
  const std::size_t rows = spec.sizes.size();
  std::vector<SizeResult> results(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    results[r].count = op.count(spec.sizes[r], n);
    results[r].bytes = results[r].count * sizeof(float);
  }
  // [row][rank], each written by its rank's thread only; read after the threads join, or
  // (probe) after the in-process barrier that follows every write.
  struct PerRank {
    double probe = 0, mean = 0;
    std::uint64_t wrong = 0;
  };
  std::vector<std::vector<PerRank>> per_rank(rows, std::vector<PerRank>(n));
  std::vector<int> iters(rows);
  ReplicaBarrier rank_threads(n, "bench rank threads");
  std::mutex failure_mutex;
  std::exception_ptr failure;

  auto rank_main = [&](int rank) {
    try {
      std::unique_ptr<BenchRank> self = connect(rank);
      RankBuffers buffers;
      for (std::size_t row = 0; row < rows; ++row) {
        const std::size_t count = results[row].count;
        op.init(rank, n, count, buffers);
        self->load(buffers);
        self->run_many(buffers, spec.warmup);
        int row_iters = spec.iters;
        if (row_iters == 0) {
          // Every rank must run the same number of iterations, so all derive it from the
          // slowest rank's probe, shared through memory: the ranks are threads of one process.
          self->barrier();
          Stopwatch probe_clock;
          self->run(buffers);
          per_rank[row][rank].probe = probe_clock.seconds();
          rank_threads.arrive_and_wait(rank, spec.timeout);
          double slowest = 1e-7;
          for (const PerRank& p : per_rank[row]) slowest = std::max(slowest, p.probe);
          row_iters = std::clamp(static_cast<int>(std::ceil(kTargetRowSeconds / slowest)),
                                 kMinAutoIters, kMaxAutoIters);
        }
        // The barrier lines the ranks up so that no rank's clock includes waiting for a late
        // peer to arrive at the first iteration.
        self->barrier();
        Stopwatch clock;
        self->run_many(buffers, row_iters);
        per_rank[row][rank].mean = clock.seconds() / row_iters;
        if (rank == 0) iters[row] = row_iters;
        // Check a fresh run, not the timed ones: in-place allreduce keeps summing its output.
        op.init(rank, n, count, buffers);
        self->load(buffers);
        self->run(buffers);
        self->unload(buffers);
        per_rank[row][rank].wrong = count_wrong(op, n, buffers);
      }
      // Close only when every rank is done, as a job's ranks would finish in its launcher:
      // a rank done with the last collective must not hang up on a neighbour still in it.
      rank_threads.arrive_and_wait(rank, spec.timeout);
    } catch (const std::exception& e) {
      {
        std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
      // Leaving the try block closed this rank's connections, so peers blocked in a
      // collective fail at once; this wakes those blocked in the in-process barrier.
      rank_threads.abort("rank " + std::to_string(rank) + " failed: " + e.what());
    }
  };
  {
    std::vector<std::jthread> threads;
    for (int rank = 0; rank < n; ++rank) threads.emplace_back(rank_main, rank);
  }
  if (failure) std::rethrow_exception(failure);

  for (std::size_t r = 0; r < rows; ++r) {
    results[r].iters = iters[r];
    for (const PerRank& p : per_rank[r]) {
      results[r].seconds = std::max(results[r].seconds, p.mean);
      results[r].wrong += p.wrong;
    }
  }
  return results;
}

}  // namespace gradsync
