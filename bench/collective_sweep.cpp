#include "bench/collective_sweep.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>

#include "allreduce/in_memory_store.h"
#include "bench/sprint.h"
#include "common/error.h"
#include "common/stopwatch.h"

namespace gradsync {
namespace {

// Auto iterations aim at spec.seconds of timed work per measurement (0.3 s by default: long
// enough to average out scheduler noise on loopback, short enough that a 1 KiB..64 MiB sweep
// finishes in seconds), within these bounds.
constexpr int kMinAutoIters = 5;
constexpr int kMaxAutoIters = 1000;
constexpr int kProbeCalls = 3;  // the fewest warm-up calls an auto-iterations estimate times
// How often a rank waiting for the others' numbers looks for a failure report.
constexpr std::chrono::milliseconds kFailureCheck{100};
const std::string kFailedKey = "bench/failed";

// Hexadecimal floating point: the exact double, back through strtod.
std::string exact(double value) { return sprint("%a", value); }

// The warm-up of an auto-iterations measurement, each call timed (at least kProbeCalls of
// them), and their median: what one call takes. A single call timed alone, as this was before,
// ranged 0.5-6 ms for a 1 MiB allreduce at N = 4 on two cores where the calls around it took
// 0.6-1 ms, so the timed loop ran anything from 80 to 700 iterations, and the count alone moved
// the figure: a connection's early calls run at another speed than its later ones (there,
// busbw 2.0 over 100 iterations, 2.4 over 3000). The median leaves out the first call's page
// faults and a rank's late start alike.
double median_call_seconds(BenchRank& self, RankBuffers& buffers, bool in_place, int warmup) {
  std::vector<double> calls;
  for (int k = 0; k < std::max(warmup, kProbeCalls); ++k) {
    Stopwatch call;
    self.run(buffers, in_place);
    calls.push_back(call.seconds());
  }
  std::nth_element(calls.begin(), calls.begin() + std::ptrdiff_t(calls.size() / 2), calls.end());
  return calls[calls.size() / 2];
}

Measurement measure(const SweepSpec& spec, int rank, BenchRank& self, RankExchange& exchange,
                    std::size_t count, bool in_place, RankBuffers& buffers) {
  const CollectiveOp& op = *spec.op;
  const int n = spec.ranks;
  op.init(rank, n, count, in_place, buffers);
  self.load(buffers);
  int iters = spec.iters;
  if (iters == 0) {
    // Every rank must run the same number of iterations, so all derive it from the slowest
    // rank's estimate of one call: the median of its timed warm-up calls.
    const double call = median_call_seconds(self, buffers, in_place, spec.warmup);
    double slowest = 1e-7;
    for (const std::string& p : exchange.all(exact(call))) {
      slowest = std::max(slowest, std::strtod(p.c_str(), nullptr));
    }
    iters = std::clamp(static_cast<int>(std::ceil(spec.seconds / slowest)), kMinAutoIters,
                       kMaxAutoIters);
  } else {
    self.run_many(buffers, in_place, spec.warmup);
  }
  // The barrier lines the ranks up so that no rank's clock includes waiting for a late peer
  // to arrive at the first iteration.
  self.barrier();
  Stopwatch clock;
  self.run_many(buffers, in_place, iters);
  const double mean = clock.seconds() / iters;
  // Check a fresh run, not the timed ones: in-place allreduce keeps summing its output.
  op.init(rank, n, count, in_place, buffers);
  self.load(buffers);
  self.run(buffers, in_place);
  self.unload(buffers);
  const std::uint64_t wrong = count_wrong(op, n, buffers);

  Measurement agreed{.iters = iters};
  for (const std::string& text : exchange.all(exact(mean) + " " + std::to_string(wrong))) {
    std::istringstream in(text);
    std::string seconds;
    std::uint64_t rank_wrong = 0;
    in >> seconds >> rank_wrong;
    agreed.seconds = std::max(agreed.seconds, std::strtod(seconds.c_str(), nullptr));
    agreed.wrong += rank_wrong;
  }
  return agreed;
}

}  // namespace

RankExchange::RankExchange(Store& store, int rank, int size, std::chrono::milliseconds timeout)
    : store_(store), rank_(rank), size_(size), timeout_(timeout) {}

std::vector<std::string> RankExchange::all(const std::string& mine) {
  const std::string prefix = "bench/x/" + std::to_string(sequence_++) + "/";
  store_.set(prefix + std::to_string(rank_), mine);
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(prefix + std::to_string(r));
  // Waited for in slices, so that a rank that failed (and will never post) is noticed within
  // one slice rather than at the timeout.
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    try {
      store_.wait(keys, std::clamp(left, std::chrono::milliseconds(1), kFailureCheck));
      break;
    } catch (const TimeoutError&) {
      if (store_.check({kFailedKey}, timeout_)) throw Error(store_.get(kFailedKey, timeout_));
      if (left > kFailureCheck) continue;
      // Name the ranks that never posted, and the whole wait, not the last slice.
      std::string missing;
      int first = -1;
      for (int r = 0; r < size_; ++r) {
        if (store_.check({keys[static_cast<std::size_t>(r)]}, timeout_)) continue;
        if (first < 0) first = r;
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      throw TimeoutError(first, "bench", "exchange #" + std::to_string(sequence_ - 1),
                         "no numbers from rank(s) " + missing + " within " +
                             std::to_string(timeout_.count()) + " ms");
    }
  }
  std::vector<std::string> values;
  for (const std::string& key : keys) values.push_back(store_.get(key, timeout_));
  return values;
}

void RankExchange::fail(const std::string& why) noexcept {
  try {
    // The first report stays: later ones are mostly ranks failing because of it.
    if (!store_.check({kFailedKey}, timeout_)) {
      store_.set(kFailedKey, "rank " + std::to_string(rank_) + " failed: " + why);
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): the report is a courtesy, the error goes up
  }
}

void sweep_rank(const SweepSpec& spec, int rank, std::vector<BackendRank>& backends,
                RankExchange& exchange, const std::function<void(const RowResult&)>& on_row) {
  RankBuffers buffers;
  for (const std::size_t size : spec.sizes) {
    const std::size_t count = spec.op->count(size, spec.ranks);
    for (BackendRank& backend : backends) {
      RowResult row;
      row.backend = backend.backend;
      row.bytes = count * sizeof(float);
      row.count = count;
      // Out of place first, as nccl-tests.
      row.out_of_place = measure(spec, rank, *backend.rank, exchange, count, false, buffers);
      row.in_place = measure(spec, rank, *backend.rank, exchange, count, true, buffers);
      if (rank == 0) on_row(row);
    }
  }
  // Close only when every rank is done, as a job's ranks would finish in its launcher.
  exchange.all("done");
}

void sweep_threads(const SweepSpec& spec,
                   const std::function<std::vector<BackendRank>(int rank, Store& store)>& connect,
                   const std::function<void(const RowResult&)>& on_row) {
  // The Store outlives every communicator made over it: the threads join first.
  InMemoryStore store;
  std::mutex failure_mutex;
  std::exception_ptr failure;
  auto rank_main = [&](int rank) {
    RankExchange exchange(store, rank, spec.ranks, spec.timeout);
    try {
      std::vector<BackendRank> backends = connect(rank, store);
      sweep_rank(spec, rank, backends, exchange, on_row);
    } catch (const std::exception& e) {
      {
        std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
      // Leaving the try block closed this rank's connections, so peers blocked in a
      // collective fail at once; this wakes those waiting for its numbers.
      exchange.fail(e.what());
    }
  };
  {
    std::vector<std::jthread> threads;
    for (int rank = 0; rank < spec.ranks; ++rank) threads.emplace_back(rank_main, rank);
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace gradsync
