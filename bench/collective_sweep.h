// One rank's part of the collective sweep, with nccl-tests' timing rules (collective_bench.h
// says them), and N ranks run as threads of this process: what every backend and every way of
// starting ranks (threads, processes, mpirun) share. A backend supplies a BenchRank per rank;
// the ranks agree on iteration counts and gather their times through the Store they share
// (RankExchange), so the same code runs whether ranks are threads or processes.
//
//   std::vector<BackendRank> mine = {{"tcp", std::move(tcp_rank)}, {"gloo", std::move(gloo)}};
//   RankExchange exchange(store, rank, ranks, timeout);
//   sweep_rank(spec, rank, mine, exchange, [](const RowResult& row) { print(row); });
//
// Blocking: sweep_rank returns when every rank has finished the sweep (a rank done with the
// last collective must not close its connections under a neighbour still in it). Every wait is
// bounded by spec.timeout. A rank that fails calls RankExchange::fail, so that ranks waiting
// for its numbers fail at once instead of at the timeout.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "allreduce/store.h"
#include "bench/collective_ops.h"

namespace gradsync {

// A connected rank of one backend. Used by one thread only.
class BenchRank {
 public:
  virtual ~BenchRank() = default;
  virtual void barrier() = 0;
  virtual void run(RankBuffers& buffers, bool in_place) = 0;  // one collective, blocking
  // `times` collectives back to back, returning when the last is done. A rank whose
  // collectives queue on a device (NCCL) issues them all and waits once, as nccl-tests does.
  virtual void run_many(RankBuffers& buffers, bool in_place, int times) {
    for (int k = 0; k < times; ++k) run(buffers, in_place);
  }
  // Where a rank keeps its buffers elsewhere (GPU memory): `load` after the host buffers were
  // (re)initialised, `unload` before they are checked. Host ranks need neither.
  virtual void load(RankBuffers& /*buffers*/) {}
  virtual void unload(RankBuffers& /*buffers*/) {}
};

struct BackendRank {
  std::string backend;  // the table's backend column: "tcp", "gloo", "mpi", "nccl"
  std::unique_ptr<BenchRank> rank;
};

struct SweepSpec {
  const CollectiveOp* op = nullptr;
  int ranks = 2;
  std::vector<std::size_t> sizes;  // requested bytes per row
  int warmup = 5;
  int iters = 0;         // 0: auto, enough for about `seconds`
  double seconds = 0.3;  // auto iterations' timed work per measurement
  std::chrono::milliseconds timeout{60000};
};

// One form (out of place or in place) of one row, as the ranks agreed on it.
struct Measurement {
  int iters = 0;
  double seconds = 0;       // max over ranks of the mean per-iteration time
  std::uint64_t wrong = 0;  // summed over ranks
};

struct RowResult {
  std::string backend;
  std::size_t bytes = 0;  // count * sizeof(float): the row's size S
  std::size_t count = 0;
  Measurement out_of_place;
  Measurement in_place;
};

// Numbers shared between the ranks of one sweep through their Store, under "bench/x/": each
// call posts this rank's text under the next sequence number and returns every rank's, in
// rank order. Every rank must make the same calls. Thread-compatible (one per rank).
class RankExchange {
 public:
  RankExchange(Store& store, int rank, int size, std::chrono::milliseconds timeout);
  // Blocks until every rank has posted (bounded by the timeout: TimeoutError naming the keys
  // still missing); throws Error at once when a rank has posted a failure.
  std::vector<std::string> all(const std::string& mine);
  // Tells the other ranks that this one failed; never throws (the Store may be gone too).
  void fail(const std::string& why) noexcept;

 private:
  Store& store_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::uint64_t sequence_ = 0;
};

// This rank's part of the sweep: for each size, each backend in turn, the out-of-place then the
// in-place measurement. `on_row` is called on rank 0 only, as each row completes.
void sweep_rank(const SweepSpec& spec, int rank, std::vector<BackendRank>& backends,
                RankExchange& exchange, const std::function<void(const RowResult&)>& on_row);

// spec.ranks ranks as threads of this process over one in-memory Store: thread r calls
// connect(r, store) for its backends (every rank the same backends in the same order), then
// sweep_rank. The first failure (in time) is rethrown after every thread has joined.
void sweep_threads(const SweepSpec& spec,
                   const std::function<std::vector<BackendRank>(int rank, Store& store)>& connect,
                   const std::function<void(const RowResult&)>& on_row);

}  // namespace gradsync
