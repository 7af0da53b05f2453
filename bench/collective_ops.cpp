// The collectives `gradsync bench allreduce` measures, one plug-in each (collective_ops.h's
// CollectiveOp): initial data, expected values in closed form, bus factor, the call itself in
// nccl-tests' two forms.
#include "bench/collective_ops.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>

#include "allreduce/communicator.h"
#include "common/error.h"

namespace gradsync {
namespace {

constexpr const char* kWhere = "bench";

// Data repeat with this prime period: a segment delivered to the wrong offset is caught unless
// the offset error is a multiple of it, which ring segment boundaries never are by accident.
// n * kPeriod + n(n+1)/2 < 2^24 for n <= kMaxRanks keeps every partial sum exact in float.
constexpr std::size_t kPeriod = 32749;

// ---- Plug-ins. Bus factors and sizes are explained beside CollectiveOp and in
// docs/benchmarks.md; the data below is chosen so that each expected value has a closed form.

std::size_t buffer_count(std::size_t bytes, int /*n*/) {
  return std::max<std::size_t>(1, bytes / sizeof(float));
}
// The gathered output holds n equal parts, so round down to a multiple of n.
std::size_t gathered_count(std::size_t bytes, int n) {
  const auto parts = static_cast<std::size_t>(n);
  return std::max(parts, bytes / sizeof(float) / parts * parts);
}
float pattern(std::size_t i) { return static_cast<float>(i % kPeriod); }

// allreduce (sum): rank r holds (r + 1) + p(i), so the sum is n(n+1)/2 + n * p(i). Out of
// place the output starts at -1, so that a copy that never happened shows.
double allreduce_bus(int n) { return 2.0 * (n - 1) / n; }
void allreduce_init(int rank, int /*n*/, std::size_t count, bool in_place, RankBuffers& b) {
  std::vector<float>& data = in_place ? b.out : b.in;
  data.resize(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<float>(rank + 1) + pattern(i);
  if (in_place) {
    b.in.clear();
  } else {
    b.out.assign(count, -1.0f);
  }
}
float allreduce_expected(int n, std::size_t /*count*/, std::size_t i) {
  return static_cast<float>(n * (n + 1) / 2) + static_cast<float>(n) * pattern(i);
}
// Sum, not average: averaging would add a scaling pass that a library's sum does not make. In
// place, the values grow by a factor n per timed iteration (possibly to inf, which costs nothing
// extra on x86); only the separate verification run after the timed loop is checked. Out of
// place is the backend's own (allreduce_into), as nccl-tests call ncclAllReduce(send, recv).
void allreduce_run(Communicator& comm, RankBuffers& b, bool in_place) {
  if (in_place) {
    comm.allreduce(b.out, ReduceOp::kSum);
  } else {
    comm.allreduce_into(b.in, b.out, ReduceOp::kSum);
  }
}

// broadcast from rank 0: the root holds 1 + p(i); every output starts at -1 so that a rank
// that received nothing is counted wrong.
double broadcast_bus(int /*n*/) { return 1.0; }
void broadcast_init(int rank, int /*n*/, std::size_t count, bool in_place, RankBuffers& b) {
  b.in.clear();
  b.out.assign(count, -1.0f);
  if (rank != 0) return;
  std::vector<float>& data = in_place ? b.out : b.in;
  data.resize(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = 1.0f + pattern(i);
}
float broadcast_expected(int /*n*/, std::size_t /*count*/, std::size_t i) {
  return 1.0f + pattern(i);
}
void broadcast_run(Communicator& comm, RankBuffers& b, bool in_place) {
  // Only the root has an input to move: the others' outputs are overwritten anyway.
  if (!in_place && comm.rank() == 0) std::copy(b.in.begin(), b.in.end(), b.out.begin());
  comm.broadcast(b.out, 0);
}

// allgather: rank r contributes r + 256 * p(j) for its j-th element, so each gathered element
// says which rank (low 8 bits) and which position (the rest) it came from. In place, the input
// is this rank's part of the output (nccl-tests' layout) and `in` is sized as scratch.
double allgather_bus(int n) { return static_cast<double>(n - 1) / n; }
void allgather_init(int rank, int n, std::size_t count, bool in_place, RankBuffers& b) {
  const std::size_t part = count / static_cast<std::size_t>(n);
  b.in.resize(part);
  b.out.assign(count, -1.0f);
  float* data = in_place ? b.out.data() + static_cast<std::size_t>(rank) * part : b.in.data();
  for (std::size_t j = 0; j < part; ++j) data[j] = static_cast<float>(rank) + 256.0f * pattern(j);
}
float allgather_expected(int n, std::size_t count, std::size_t i) {
  const std::size_t part = count / static_cast<std::size_t>(n);
  return static_cast<float>(i / part) + 256.0f * pattern(i % part);
}
void allgather_run(Communicator& comm, RankBuffers& b, bool in_place) {
  if (in_place) {
    // The Communicator does not promise that an allgather's input may be its own block of the
    // output for every backend: MPI's detects it and passes MPI_IN_PLACE, TcpRing's copy of it
    // becomes a no-op, but Gloo's and the GPU paths are not held to it. So this rank's part goes
    // through `in`, the same for every backend: one copy of 1/N of the output more than a true
    // in-place allgather (for mpi at 2 ranks, 1-64 MiB on the 2-core VM, within the run-to-run
    // noise of passing the block itself).
    const auto mine = b.out.begin() + static_cast<std::ptrdiff_t>(comm.rank() * b.in.size());
    std::copy(mine, mine + static_cast<std::ptrdiff_t>(b.in.size()), b.in.begin());
  }
  comm.allgather(b.in, b.out);
}

const std::array<CollectiveOp, 3>& collective_ops() {
  static const std::array<CollectiveOp, 3> ops = {{
      {"allreduce", "sum", -1,
       "out-of-place = the backend's own (Communicator::allreduce_into: the input is read where "
       "the schedule needs it, never copied into the output first)",
       allreduce_bus, buffer_count, allreduce_init, allreduce_expected, allreduce_run},
      {"broadcast", "none", 0,
       "out-of-place = the root copies its input into the output, then the in-place broadcast, "
       "timed together (gradsync's Communicator broadcasts in place only)",
       broadcast_bus, buffer_count, broadcast_init, broadcast_expected, broadcast_run},
      {"allgather", "none", -1,
       "in-place = this rank's part copied out of the output, then the out-of-place allgather, "
       "timed together (gradsync's Communicator promises out-of-place gathers only)",
       allgather_bus, gathered_count, allgather_init, allgather_expected, allgather_run},
  }};
  return ops;
}

}  // namespace

const CollectiveOp& find_collective_op(const std::string& name) {
  std::string valid;
  for (const CollectiveOp& op : collective_ops()) {
    if (op.name == name) return op;
    valid += (valid.empty() ? "" : ", ") + op.name;
  }
  throw ConfigError(kWhere, "--op", "unknown collective '" + name + "' (valid: " + valid + ")");
}

std::uint64_t count_wrong(const CollectiveOp& op, int n, const RankBuffers& buffers) {
  std::uint64_t wrong = 0;
  const std::size_t count = buffers.out.size();
  for (std::size_t i = 0; i < count; ++i) wrong += buffers.out[i] != op.expected(n, count, i);
  return wrong;
}

}  // namespace gradsync
