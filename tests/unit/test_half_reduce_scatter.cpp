// reduce_scatter_half (allreduce/communicator.h) on every CPU backend that runs in threads (tcp,
// shm, gloo where the build has it, the hierarchical communicator: tests/support/half_backends.h):
// exact blocks, the same bits as allreduce_half's where both add alike, 2 bytes a value on the
// wire, sizes refused at the call, and a desync against any other collective of the same count.
// Values are known in closed form (tests/support/half_collective_checks.h).
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "allreduce/in_memory_store.h"
#include "allreduce/tcp/tcp_ring.h"
#include "common/error.h"
#include "tests/support/error_checks.h"
#include "tests/support/half_backends.h"
#include "tests/support/half_collective_checks.h"
#include "tests/support/ring_ranks.h"

using namespace gradsync::testing;
using namespace gradsync::testing::half_backends;
using namespace std::chrono_literals;
using gradsync::Communicator;
using gradsync::HalfType;
using gradsync::ReduceOp;

TEST_CASE(
    "reduce_scatter_half: exact blocks for 1..6 ranks at odd block lengths, the same bits as "
    "allreduce_half's") {
  for (const Backend& backend : backends()) {
    for (int n = 1; n <= 6; ++n) {
      CAPTURE(backend.name);
      CAPTURE(n);
      run_world(backend, n, [&](Communicator& comm) {
        // 4099 values a block: several of shm's chunks (2048 values) per block.
        for (const std::size_t block : {std::size_t(0), std::size_t(1), std::size_t(3),
                                        std::size_t(1001), std::size_t(4099)}) {
          check_half_reduce_scatter_exact(comm, block);
        }
        check_half_reduce_scatter_async(comm, 777);
        CHECK(comm.counters().collectives == 5 * 8 + 3);
      });
    }
  }
}

TEST_CASE(
    "reduce_scatter_half: sums that round are the allreduce_half's blocks where both add "
    "alike") {
  for (const Backend& backend : backends()) {
    // Every backend at 2 ranks; shm and the hierarchical communicator at every size (shm rounds
    // each slot sum once, the hierarchical communicator's reduce-scatter is its allreduce_half).
    const bool any_size = backend.name != "tcp" && backend.name != "gloo";
    for (const int n : {2, 3, 5}) {
      if (n > 2 && !any_size) continue;
      CAPTURE(backend.name);
      CAPTURE(n);
      run_world(backend, n, [&](Communicator& comm) {
        check_half_reduce_scatter_matches_allreduce(comm, 4001);
      });
    }
  }
}

TEST_CASE("reduce_scatter_half: the byte counters count 2 bytes a value") {
  for (const Backend& backend : backends()) {
    for (const int n : {2, 3, 4}) {
      CAPTURE(backend.name);
      CAPTURE(n);
      run_world(backend, n,
                [&](Communicator& comm) { check_half_reduce_scatter_counts(comm, 60 * 1024); });
    }
  }
  // The reduce-scatter ring moves (N - 1) / N of the input each way: N - 1 blocks of 2 bytes a
  // value.
  const int n = 3;
  const std::size_t block = 1001;
  gradsync::InMemoryStore store;
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_tcp_ring(store, r, n, ring_options());
    std::vector<std::uint16_t> in(block * n), out(block);
    comm->reduce_scatter_half(in, out, HalfType::kFp16, ReduceOp::kAvg);
    CHECK(comm->counters().bytes_sent == 2 * (n - 1) * block);
    CHECK(comm->counters().bytes_received == 2 * (n - 1) * block);
  });
}

TEST_CASE("reduce_scatter_half: sizes that disagree are refused at the call, nothing issued") {
  for (const Backend& backend : backends()) {
    for (const int n : {1, 2, 3}) {
      CAPTURE(backend.name);
      CAPTURE(n);
      run_world(backend, n, [&](Communicator& comm) {
        check_half_reduce_scatter_refuses_sizes(comm);
        CHECK(comm.counters().collectives == 1);
      });
    }
  }
}

TEST_CASE("reduce_scatter_half: a rank in a float reduce-scatter of the same count is a desync") {
  for (const Backend& backend : backends(5s)) {
    for (const int n : {2, 3}) {
      CAPTURE(backend.name);
      CAPTURE(n);
      const std::size_t block = 250;
      const std::string count = std::to_string(block * n);
      std::vector<std::string> messages(static_cast<std::size_t>(n));
      gradsync::InMemoryStore store;
      run_ranks(n, [&](int r) {
        const auto comm = backend.make(store, r, n);
        std::vector<float> warmup(10, 1.0f);
        comm->allreduce(warmup, ReduceOp::kSum);
        const auto start = Clock::now();
        const std::vector<float> floats(block * n, 1.0f);
        const std::vector<std::uint16_t> halves(block * n, 0x3C00);
        std::vector<float> float_out(block);
        std::vector<std::uint16_t> half_out(block);
        messages[std::size_t(r)] = error_of<gradsync::Error>(
            [&] {
              if (r == 0) {
                comm->reduce_scatter(floats, float_out, ReduceOp::kSum);
              } else {
                comm->reduce_scatter_half(halves, half_out, HalfType::kFp16, ReduceOp::kSum);
              }
            },
            "rank " + std::to_string(r) + ": the mismatched collective should have failed");
        CHECK(ms_since(start) < 4000);  // before the timeout
      });
      // The hierarchical communicator reduce-scatters through its levels' allreduces: they are
      // what meet, and what its error names.
      const bool levels = backend.name.starts_with("hierarchical");
      const std::string floats_in =
          (levels ? "allreduce of " : "reduce-scatter of ") + count + " floats";
      const std::string halves_in =
          (levels ? "allreduce fp16 of " : "reduce-scatter fp16 of ") + count + " fp16 values";
      bool named = false;
      std::string all;
      for (const std::string& message : messages) {
        all += message + "\n";
        named =
            named || (has(message, "desync") && has(message, floats_in) && has(message, halves_in));
      }
      CHECK_MESSAGE(named, all);
    }
  }
}

TEST_CASE(
    "reduce_scatter_half: the other format, or an allreduce_half of the same count, is a "
    "desync (tcp, shm, gloo)") {
  for (const Backend& backend : backends(5s)) {
    // The hierarchical communicator's reduce-scatter is its levels' allreduce_half of the same
    // count: a rank there and a rank in allreduce_half both finish, each with its own result.
    if (backend.name.starts_with("hierarchical")) continue;
    for (const bool against_allreduce : {false, true}) {
      CAPTURE(backend.name);
      CAPTURE(against_allreduce);
      const int n = 2;
      std::vector<std::string> messages(n);
      gradsync::InMemoryStore store;
      run_ranks(n, [&](int r) {
        const auto comm = backend.make(store, r, n);
        std::vector<std::uint16_t> in(14, 0x3C00), out(7);
        messages[std::size_t(r)] = error_of<gradsync::Error>(
            [&] {
              if (r == 0) {
                comm->reduce_scatter_half(in, out, HalfType::kFp16, ReduceOp::kAvg);
              } else if (against_allreduce) {
                comm->allreduce_half(in, HalfType::kFp16, ReduceOp::kAvg);
              } else {
                comm->reduce_scatter_half(in, out, HalfType::kBf16, ReduceOp::kAvg);
              }
            },
            "the mismatched collectives should have failed");
      });
      const std::string other = against_allreduce ? "allreduce fp16 avg of 14 fp16 values"
                                                  : "reduce-scatter bf16 avg of 14 bf16 values";
      bool named = false;
      for (const std::string& message : messages) {
        named = named ||
                (has(message, "desync") &&
                 has(message, "reduce-scatter fp16 avg of 14 fp16 values") && has(message, other));
      }
      CHECK_MESSAGE(named, messages[0] << "\n" << messages[1]);
    }
  }
}
