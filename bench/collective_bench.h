// `gradsync bench allreduce`: collective bandwidth in the manner of nccl-tests. N ranks run as N
// threads of this process, each with its own TcpRing (real TCP over 127.0.0.1, addresses
// exchanged through one InMemoryStore); message sizes are swept from min to max by a factor.
//
//   CollectiveBenchOptions options;
//   options.op = "allgather";
//   options.ranks = 4;
//   std::cout << run_collective_bench(options);   // the whole table, or JSON lines
//
// Per size: warm-up iterations, a barrier, timed iterations; the row's time is the maximum over
// ranks of each rank's mean per-iteration time (the collective is as slow as its slowest rank).
// Afterwards the buffers are re-initialised, the collective runs once more and every element
// is compared with its closed-form value ("#wrong"). When gradsync is built with Gloo, the
// same sweep runs on Gloo's ring over Gloo's TCP transport, with the same timing rules, and its
// columns follow ours. The formulas are in docs/benchmarks.md.
//
// Blocking: run_collective_bench returns when the sweep is done. Every wait (ring setup, each
// collective, the in-process rendezvous between rank threads) is bounded by options.timeout;
// a failure on any rank is rethrown from run_collective_bench after every thread has ended.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gradsync {

class Communicator;

struct CollectiveBenchOptions {
  std::string op = "allreduce";  // allreduce | broadcast | allgather
  std::size_t min_bytes = 4096;
  std::size_t max_bytes = 64 << 20;
  int factor = 2;  // each size is the previous one times this
  int ranks = 2;
  int warmup = 5;
  int iters = 0;  // timed iterations per size; 0: auto, enough for about 0.3 s per row
  bool json = false;
  bool gloo = true;  // add Gloo's columns when gradsync is built with Gloo
  std::chrono::milliseconds timeout{60000};
  // cpu: TcpRing ranks over loopback. gpu: NcclCommunicator ranks, one per GPU (threads of
  // this process), on device buffers; `ranks` 0 means every visible GPU. Same table either way.
  std::string device = "cpu";
};

// "512", "4K", "64M", "1G" (powers of 1024; a trailing "B" is allowed) to bytes. Throws
// gradsync::ConfigError quoting the text when it is not such a size.
std::size_t parse_size(const std::string& text);

// Runs the sweep; returns the table (header lines start with '#') or, with options.json, one
// JSON object per size. Throws ConfigError for invalid options before anything runs.
std::string run_collective_bench(const CollectiveBenchOptions& options);

// The same, with the wrong elements counted over every row: a caller that must not pass a
// wrong collective off as a fast one (`gradsync bench allreduce` exits 1) checks them.
struct CollectiveBenchReport {
  std::string text;
  std::uint64_t wrong = 0;        // gradsync's communicator (TcpRing, or NCCL)
  std::uint64_t gloo_wrong = 0;   // Gloo's, when it ran beside
};
CollectiveBenchReport run_collective_bench_report(const CollectiveBenchOptions& options);

// True when this build has the Gloo comparison (GRADSYNC_HAVE_GLOO).
bool gloo_compiled_in();

// ---- The pieces below are shared by the TcpRing and Gloo runners and by the tests. ----

// One rank's buffers for one size. allreduce and broadcast work in place on `out`; allgather
// reads `in` (out.size() / N elements) and writes `out`.
struct RankBuffers {
  std::vector<float> in;
  std::vector<float> out;
};

// One plug-in per collective (nccl-tests' table of collectives, without its globals). Every
// value is an integer below 2^24, so float sums are exact in any order and a result is either
// right or wrong, never "close". That bounds the ranks to kMaxRanks.
//
// Size and bandwidth (docs/benchmarks.md): `count` elements of float make the row's size S.
//   algbw = S / time
//   busbw = algbw * bus_factor(N), where bus_factor(N) * S is what each rank must send (and
//   receive) in a bandwidth-optimal algorithm, so busbw is comparable across ops and N and
//   with the link's speed:
//     allreduce  2(N-1)/N  reduce-scatter then all-gather: each moves (N-1)/N of S
//     allgather  (N-1)/N   S is the gathered output; each rank receives all but its own part
//     broadcast  1         every rank but the root receives all of S
struct CollectiveOp {
  std::string name;
  const char* layout;  // for the table's header: "sum, in place", ...
  double (*bus_factor)(int n);
  // Elements of the collective for a requested size in bytes: the buffer for allreduce and
  // broadcast, the gathered output for allgather (a multiple of n, at least n).
  std::size_t (*count)(std::size_t bytes, int n);
  // Sizes and fills `buffers` with rank's initial data for `count` elements.
  void (*init)(int rank, int n, std::size_t count, RankBuffers& buffers);
  // What out[i] must hold on every rank afterwards.
  float (*expected)(int n, std::size_t count, std::size_t i);
  // Runs the collective once on gradsync's communicator, blocking until it completes.
  void (*run)(Communicator& comm, RankBuffers& buffers);
};

inline constexpr int kMaxRanks = 256;

// The plug-in called `name`; ConfigError listing the valid names otherwise.
const CollectiveOp& find_collective_op(const std::string& name);

// Elements of out[] that differ from op.expected.
std::uint64_t count_wrong(const CollectiveOp& op, int n, const RankBuffers& buffers);

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
// rules above, and destroys its rank only once every rank is done. The first failure (in time)
// is rethrown after every thread has joined.
std::vector<SizeResult> measure_sweep(
    const SweepSpec& spec, const std::function<std::unique_ptr<BenchRank>(int rank)>& connect);

}  // namespace gradsync
