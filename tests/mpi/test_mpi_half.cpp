// MpiCommunicator's allreduce_half, reduce_scatter_half and allgather_words under mpirun: every
// process is one rank and runs these cases in order (run_mpi_tests.py: 1 to 4 ranks, both thread
// levels). The checks are the ones the other backends' tests run in threads
// (tests/support/half_collective_checks.h).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "tests/mpi/mpi_world.h"
#include "tests/support/half_collective_checks.h"

using namespace gradsync::testing;
using namespace std::chrono_literals;
using gradsync::HalfType;
using gradsync::ReduceOp;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// FNV-1a of the values' bits: one word a rank, for comparing results across ranks.
std::uint32_t digest(const std::vector<std::uint16_t>& values) {
  std::uint32_t hash = 2166136261u;
  for (const std::uint16_t v : values) hash = (hash ^ v) * 16777619u;
  return hash;
}

}  // namespace

TEST_CASE("mpi: allreduce_half is exact in fp16 and bf16, sum and avg, at odd lengths") {
  const auto comm = mpi_communicator("half_exact");
  const int n = comm->size();
  for (const std::size_t length :
       {std::size_t(0), std::size_t(1), std::size_t(n + 1), std::size_t(100003)}) {
    check_half_exact(*comm, length);
  }
  check_half_overflow(*comm);
  CHECK(comm->counters().collectives == 4 * 4 + 4);
}

TEST_CASE("mpi: non-integer 16-bit averages are the same bits on every rank") {
  const auto comm = mpi_communicator("half_bits");
  const int n = comm->size(), r = comm->rank();
  for (const HalfType type : {HalfType::kFp16, HalfType::kBf16}) {
    std::vector<std::uint16_t> data = half_noisy_data(type, r, 20011);
    comm->allreduce_half(data, type, ReduceOp::kAvg);
    const std::vector<std::uint32_t> mine = {digest(data)};
    std::vector<std::uint32_t> everyone(static_cast<std::size_t>(n));
    comm->allgather_words(mine, everyone);
    for (int k = 0; k < n; ++k) CHECK(everyone[std::size_t(k)] == mine[0]);
  }
}

TEST_CASE("mpi: allreduce_half counts 2 bytes a value") {
  const auto comm = mpi_communicator("half_counters");
  check_half_counts_two_bytes(*comm, 60 * 1024);
  const std::uint64_t n = std::uint64_t(comm->size());
  const gradsync::CommCounters before = comm->counters();
  std::vector<std::uint16_t> data(3000);
  comm->allreduce_half(data, HalfType::kBf16, ReduceOp::kSum);
  CHECK(comm->counters().bytes_sent - before.bytes_sent == 2 * 2 * 3000 * (n - 1) / n);
}

TEST_CASE("mpi: allgather_words and the float allgather move NaN patterns bit for bit") {
  const auto comm = mpi_communicator("words");
  for (const std::size_t length : {std::size_t(0), std::size_t(1), std::size_t(3001)}) {
    check_words_exact(*comm, length);
    check_float_allgather_bits(*comm, length);
  }
}

TEST_CASE("mpi: a float allreduce against an fp16 one of the same count is a desync") {
  const auto comm = mpi_communicator("half_desync");
  const int n = comm->size(), r = comm->rank();
  if (n == 1) return;
  std::vector<float> floats(1000, 1.0f);
  std::vector<std::uint16_t> halves(1000, 0x3C00);
  std::string message;
  try {
    if (r == n - 1) {
      comm->allreduce(floats, ReduceOp::kSum);
    } else {
      comm->allreduce_half(halves, HalfType::kFp16, ReduceOp::kSum);
    }
    FAIL_CHECK("the mismatched collective should have failed");
  } catch (const gradsync::PeerError& e) {
    message = e.what();
  }
  MESSAGE(message);
  CHECK(has(message, "desync"));
  CHECK(has(message, "collective #1 allreduce of 1000 floats"));
  CHECK(has(message, "collective #1 allreduce fp16 of 1000 fp16 values"));
}

TEST_CASE("mpi: reduce_scatter_half is exact at odd block lengths, the allreduce_half's blocks") {
  const auto comm = mpi_communicator("half_reduce_scatter");
  for (const std::size_t block :
       {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(1001), std::size_t(25013)}) {
    check_half_reduce_scatter_exact(*comm, block);
  }
  check_half_reduce_scatter_async(*comm, 777);
  check_half_reduce_scatter_refuses_sizes(*comm);
  CHECK(comm->counters().collectives == 5 * 8 + 3 + 1);
}

TEST_CASE("mpi: reduce_scatter_half counts 2 bytes a value") {
  const auto comm = mpi_communicator("half_reduce_scatter_counters");
  check_half_reduce_scatter_counts(*comm, 60 * 1024);
  // (N - 1) / N of the input each way, 2 bytes a value.
  const std::uint64_t n = std::uint64_t(comm->size());
  const gradsync::CommCounters before = comm->counters();
  std::vector<std::uint16_t> in(1001 * n), out(1001);
  comm->reduce_scatter_half(in, out, HalfType::kFp16, ReduceOp::kAvg);
  CHECK(comm->counters().bytes_sent - before.bytes_sent == 2 * 1001 * (n - 1));
  CHECK(comm->counters().bytes_received - before.bytes_received == 2 * 1001 * (n - 1));
}

TEST_CASE("mpi: a float reduce-scatter against an fp16 one of the same count is a desync") {
  const auto comm = mpi_communicator("half_reduce_scatter_desync");
  const int n = comm->size(), r = comm->rank();
  if (n == 1) return;
  const std::size_t block = 250;
  const std::vector<float> floats(block * std::size_t(n), 1.0f);
  const std::vector<std::uint16_t> halves(block * std::size_t(n), 0x3C00);
  std::vector<float> float_out(block);
  std::vector<std::uint16_t> half_out(block);
  std::string message;
  try {
    if (r == n - 1) {
      comm->reduce_scatter(floats, float_out, ReduceOp::kSum);
    } else {
      comm->reduce_scatter_half(halves, half_out, HalfType::kFp16, ReduceOp::kSum);
    }
    FAIL_CHECK("the mismatched collective should have failed");
  } catch (const gradsync::PeerError& e) {
    message = e.what();
  }
  MESSAGE(message);
  const std::string count = std::to_string(block * std::size_t(n));
  CHECK(has(message, "desync"));
  CHECK(has(message, "collective #1 reduce-scatter of " + count + " floats"));
  CHECK(has(message, "collective #1 reduce-scatter fp16 of " + count + " fp16 values"));
}
