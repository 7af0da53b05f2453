// The collectives `gradsync bench allreduce` measures, one plug-in each (collective_ops.cpp):
// initial data, expected values in closed form, bus factor, the call on gradsync's
// communicator in both of nccl-tests' forms. Shared by every runner (Communicator backends,
// NCCL) and by the tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gradsync {

class Communicator;

// One rank's buffers for one size, as nccl-tests' send and receive buffers. Out of place, the
// collective reads `in` and writes `out`; in place, it works on `out` alone (allgather: this
// rank's part of `out` is its input; `in` is then scratch). `out` is what gets checked.
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
//
// Forms: gradsync's Communicator has one form of each collective (allreduce and broadcast in
// place, allgather out of place). The other form is composed the way a caller of that API must
// compose it, and the copy is timed with the collective: `composed` says how, for the header.
struct CollectiveOp {
  std::string name;
  const char* redop;  // nccl-tests' redop column: "sum", or "none" for data movement
  int root;           // nccl-tests' root column: -1 when the collective has none
  const char* composed;
  double (*bus_factor)(int n);
  // Elements of the collective for a requested size in bytes: the buffer for allreduce and
  // broadcast, the gathered output for allgather (a multiple of n, at least n).
  std::size_t (*count)(std::size_t bytes, int n);
  // Sizes and fills `buffers` with rank's initial data for `count` elements in one form.
  void (*init)(int rank, int n, std::size_t count, bool in_place, RankBuffers& buffers);
  // What out[i] must hold on every rank afterwards.
  float (*expected)(int n, std::size_t count, std::size_t i);
  // Runs the collective once on gradsync's communicator, blocking until it completes.
  void (*run)(Communicator& comm, RankBuffers& buffers, bool in_place);
};

inline constexpr int kMaxRanks = 256;

// The plug-in called `name`; ConfigError listing the valid names otherwise.
const CollectiveOp& find_collective_op(const std::string& name);

// Elements of out[] that differ from op.expected.
std::uint64_t count_wrong(const CollectiveOp& op, int n, const RankBuffers& buffers);

}  // namespace gradsync
