// allreduce_half and allgather_words (allreduce/communicator.h) on every CPU backend that runs in
// threads: tcp, shm, gloo (where the build has it) and the hierarchical communicator on several
// groupings of ranks into hosts, N ranks as N threads over one InMemoryStore
// (tests/support/half_backends.h). Values are known in closed form
// (tests/support/half_collective_checks.h); mpi runs the same checks under mpirun
// (tests/mpi/test_mpi_half.cpp). reduce_scatter_half: test_half_reduce_scatter.cpp.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "allreduce/collective_kind.h"
#include "allreduce/half_sum.h"
#include "allreduce/in_memory_store.h"
#include "allreduce/tcp/tcp_ring.h"
#include "common/compression/half_codec.h"
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

TEST_CASE("half arithmetic: one fp32 addition, one rounding; avg rounds the divided sum again") {
  using gradsync::compression::bf16_from_float;
  using gradsync::compression::fp16_from_float;
  // 1 + 2^-11 is a tie between 1 and 1 + 2^-10 in fp16: round to even gives 1.
  const std::uint16_t a[] = {fp16_from_float(1.0f), fp16_from_float(65504.0f),
                             fp16_from_float(-0.0f), fp16_from_float(3.0f)};
  const std::uint16_t b[] = {fp16_from_float(0x1p-11f), fp16_from_float(16.0f),
                             fp16_from_float(-0.0f), fp16_from_float(0.0f)};
  std::uint16_t sum[4];
  gradsync::add_halves(HalfType::kFp16, a, b, sum, 4);
  CHECK(sum[0] == fp16_from_float(1.0f));
  CHECK(sum[1] == 0x7C00);  // 65520 rounds up, to inf
  CHECK(sum[2] == 0x8000);  // -0 + -0 is -0
  CHECK(sum[3] == fp16_from_float(3.0f));
  gradsync::divide_halves(HalfType::kFp16, sum, 4, 2.0f);
  CHECK(sum[1] == 0x7C00);  // inf stays inf under kAvg
  CHECK(sum[3] == fp16_from_float(1.5f));
  // shm's rule: the slots in fp32, one rounding at the end (1 + 2^-9 + 2^-9: 2^-8 is exact).
  const std::uint16_t one = bf16_from_float(1.0f), tiny = bf16_from_float(0x1p-9f);
  const std::uint16_t* slots[] = {&one, &tiny, &tiny};
  std::uint16_t out = 0;
  gradsync::sum_half_slots(HalfType::kBf16, &out, slots, 1, 0.0f);
  CHECK(out == bf16_from_float(1.0f + 0x1p-8f));
  // ... where rounding after each addition loses both halves of it: 1 + 2^-9 ties to 1.
  std::uint16_t stepwise = one;
  gradsync::add_halves(HalfType::kBf16, &stepwise, &tiny, &stepwise, 1);
  gradsync::add_halves(HalfType::kBf16, &stepwise, &tiny, &stepwise, 1);
  CHECK(stepwise == one);
}

TEST_CASE("allreduce_half: exact fp16 and bf16 sums and averages for 1..6 ranks, odd lengths") {
  for (const Backend& backend : backends()) {
    for (int n = 1; n <= 6; ++n) {
      CAPTURE(backend.name);
      CAPTURE(n);
      run_world(backend, n, [&](Communicator& comm) {
        for (const std::size_t length : {std::size_t(0), std::size_t(1), std::size_t(n + 1),
                                         std::size_t(4097), std::size_t(30001)}) {
          check_half_exact(comm, length);
        }
        check_half_overflow(comm);
        CHECK(comm.counters().collectives == 5 * 4 + 4);
      });
    }
  }
}

TEST_CASE("allreduce_half: non-integer sums leave every rank with the same bits") {
  for (const Backend& backend : backends()) {
    for (const int n : {3, 4, 5}) {
      CAPTURE(backend.name);
      CAPTURE(n);
      const std::size_t length = 20011;
      for (const HalfType type : {HalfType::kFp16, HalfType::kBf16}) {
        std::vector<std::vector<std::uint16_t>> got(static_cast<std::size_t>(n));
        gradsync::InMemoryStore store;
        run_ranks(n, [&](int r) {
          const auto comm = backend.make(store, r, n);
          got[std::size_t(r)] = half_noisy_data(type, r, length);
          comm->allreduce_half(got[std::size_t(r)], type, ReduceOp::kAvg);
        });
        for (int r = 1; r < n; ++r) CHECK(got[std::size_t(r)] == got[0]);
        // Near the true average, within a few 16-bit roundings of it.
        const float truth = 0.1f * float(n + 1) / 2.0f / 3.0f;
        CHECK(from_half(type, got[0][0]) ==
              doctest::Approx(truth).epsilon(type == HalfType::kFp16 ? 4e-3 : 3e-2));
      }
    }
  }
}

TEST_CASE("allreduce_half: the byte counters count 2 bytes a value") {
  for (const Backend& backend : backends()) {
    for (const int n : {2, 3, 4}) {
      CAPTURE(backend.name);
      CAPTURE(n);
      // A multiple of 60 (every world size here) and of shm's chunk in both element types.
      run_world(backend, n,
                [&](Communicator& comm) { check_half_counts_two_bytes(comm, 60 * 1024); });
    }
  }
  // The ring moves 2 (N - 1) / N of the buffer each way: 2 bytes a value.
  const int n = 3;
  const std::size_t length = 3000;
  gradsync::InMemoryStore store;
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_tcp_ring(store, r, n, ring_options());
    std::vector<std::uint16_t> data(length);
    comm->allreduce_half(data, HalfType::kBf16, ReduceOp::kAvg);
    CHECK(comm->counters().bytes_sent == 2 * 2 * (n - 1) * length / n);
    CHECK(comm->counters().bytes_received == 2 * 2 * (n - 1) * length / n);
  });
}

TEST_CASE("allreduce_half: a rank in a float allreduce of the same count is a desync") {
  for (const Backend& backend : backends(5s)) {
    for (const int n : {2, 3}) {
      CAPTURE(backend.name);
      CAPTURE(n);
      std::vector<std::string> messages(static_cast<std::size_t>(n));
      gradsync::InMemoryStore store;
      run_ranks(n, [&](int r) {
        const auto comm = backend.make(store, r, n);
        std::vector<float> warmup(10, 1.0f);
        comm->allreduce(warmup, ReduceOp::kSum);
        const auto start = Clock::now();
        std::vector<float> floats(1000, 1.0f);
        std::vector<std::uint16_t> halves(1000, 0x3C00);
        messages[std::size_t(r)] = error_of<gradsync::Error>(
            [&] {
              if (r == 0) {
                comm->allreduce(floats, ReduceOp::kSum);
              } else {
                comm->allreduce_half(halves, HalfType::kFp16, ReduceOp::kSum);
              }
            },
            "rank " + std::to_string(r) + ": the mismatched collective should have failed");
        CHECK(ms_since(start) < 4000);  // before the timeout
      });
      bool named = false;
      std::string all;
      for (const std::string& message : messages) {
        all += message + "\n";
        named = named || (has(message, "desync") && has(message, "allreduce of 1000 floats") &&
                          has(message, "allreduce fp16 of 1000 fp16 values"));
      }
      CHECK_MESSAGE(named, all);
    }
  }
}

TEST_CASE("allreduce_half: fp16 against bf16 of the same count is a desync too (tcp)") {
  const int n = 2;
  gradsync::InMemoryStore store;
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_tcp_ring(store, r, n, ring_options(5s));
    std::vector<std::uint16_t> data(7, 0x3C00);
    const std::string message = error_of<gradsync::PeerError>(
        [&] {
          comm->allreduce_half(data, r == 0 ? HalfType::kFp16 : HalfType::kBf16, ReduceOp::kAvg);
        },
        "the mismatched formats should have failed");
    if (r == 1) {
      CHECK(has(message,
                "desync: rank 1 is in collective #1 allreduce bf16 avg of 7 bf16 values "
                "but rank 0 sent collective #1 allreduce fp16 avg of 7 fp16 values"));
    }
  });
}

TEST_CASE("allgather_words: every word arrives bit for bit, NaN patterns included") {
  for (const Backend& backend : backends()) {
    for (int n = 1; n <= 6; ++n) {
      CAPTURE(backend.name);
      CAPTURE(n);
      run_world(backend, n, [&](Communicator& comm) {
        for (const std::size_t length :
             {std::size_t(0), std::size_t(1), std::size_t(n + 2), std::size_t(3001)}) {
          check_words_exact(comm, length);
          check_float_allgather_bits(comm, length);
        }
      });
    }
  }
}

TEST_CASE("hierarchical: an irregular layout's allgather gathers, even hosts of one rank") {
  // Hosts of 3, 1 and 2 ranks, interleaved: the padded gather of every shape at once.
  const std::vector<std::string> ids = {"a", "b", "a", "c", "a", "c"};
  const int n = static_cast<int>(ids.size());
  gradsync::InMemoryStore store;
  run_ranks(n, [&](int r) {
    auto comm = hierarchical(store, ids, r, 10s);
    for (const std::size_t length : {std::size_t(0), std::size_t(1), std::size_t(1001)}) {
      check_words_exact(*comm, length);
      check_float_allgather_bits(*comm, length);
    }
    check_half_exact(*comm, 333);
  });
}

TEST_CASE("allreduce_half: the default of a backend without it says which") {
  // A communicator of the interface's defaults: only what every Communicator must have.
  struct Bare final : Communicator {
    int rank() const override { return 0; }
    int size() const override { return 1; }
    std::chrono::milliseconds timeout() const override { return 1s; }
    std::shared_ptr<gradsync::Work> allreduce_async(std::span<float>, ReduceOp) override {
      return nullptr;
    }
    std::shared_ptr<gradsync::Work> allreduce_into_async(std::span<const float>, std::span<float>,
                                                         ReduceOp) override {
      return nullptr;
    }
    std::shared_ptr<gradsync::Work> broadcast_async(std::span<float>, int) override {
      return nullptr;
    }
    std::shared_ptr<gradsync::Work> allgather_async(std::span<const float> in,
                                                    std::span<float> out) override {
      seen_in = in.data();
      seen_out = out.data();
      return nullptr;
    }
    std::shared_ptr<gradsync::Work> reduce_scatter_async(std::span<const float>, std::span<float>,
                                                         ReduceOp) override {
      return nullptr;
    }
    std::shared_ptr<gradsync::Work> barrier_async() override { return nullptr; }
    gradsync::CommCounters counters() const override { return {}; }
    std::string backend() const override { return "bare"; }
    void abort(const std::string&) override {}
    const float* seen_in = nullptr;
    float* seen_out = nullptr;
  } bare;
  std::vector<std::uint16_t> data(3);
  const std::string message = error_of<gradsync::Error>(
      [&] { bare.allreduce_half_async(data, HalfType::kBf16, ReduceOp::kSum); }, "should throw");
  CHECK(message ==
        "allreduce_half: the bare communicator has no 16-bit allreduce (bf16, 3 values)");
  std::vector<std::uint16_t> block(3);
  CHECK(error_of<gradsync::Error>(
            [&] { bare.reduce_scatter_half_async(data, block, HalfType::kFp16, ReduceOp::kAvg); },
            "should throw") ==
        "reduce_scatter_half: the bare communicator has no 16-bit reduce-scatter (fp16, 3 values)");
  // The words allgather is the float allgather of the same bytes.
  std::vector<std::uint32_t> in(2), out(2);
  bare.allgather_words_async(in, out);
  CHECK(static_cast<const void*>(bare.seen_in) == in.data());
  CHECK(static_cast<void*>(bare.seen_out) == out.data());
}

TEST_CASE("collective kinds: each 16-bit allreduce has its own, named in messages") {
  using gradsync::CollectiveKind;
  CHECK(gradsync::half_allreduce_kind(HalfType::kFp16, ReduceOp::kSum) ==
        CollectiveKind::kAllreduceFp16Sum);
  CHECK(gradsync::half_allreduce_kind(HalfType::kBf16, ReduceOp::kAvg) ==
        CollectiveKind::kAllreduceBf16Avg);
  CHECK(gradsync::describe_collective(CollectiveKind::kAllreduceBf16Avg, 5, 0) ==
        "allreduce bf16 avg of 5 bf16 values");
  CHECK(gradsync::describe_collective(CollectiveKind::kAllreduceSum, 5, 0) ==
        "allreduce of 5 floats");
  // And each 16-bit reduce-scatter, apart from the float one and the 16-bit allreduces.
  CHECK(gradsync::half_reduce_scatter_kind(HalfType::kFp16, ReduceOp::kSum) ==
        CollectiveKind::kReduceScatterFp16Sum);
  CHECK(gradsync::half_reduce_scatter_kind(HalfType::kFp16, ReduceOp::kAvg) ==
        CollectiveKind::kReduceScatterFp16Avg);
  CHECK(gradsync::half_reduce_scatter_kind(HalfType::kBf16, ReduceOp::kSum) ==
        CollectiveKind::kReduceScatterBf16Sum);
  CHECK(gradsync::half_reduce_scatter_kind(HalfType::kBf16, ReduceOp::kAvg) ==
        CollectiveKind::kReduceScatterBf16Avg);
  CHECK(gradsync::describe_collective(CollectiveKind::kReduceScatterFp16Sum, 12, 0) ==
        "reduce-scatter fp16 of 12 fp16 values");
  CHECK(gradsync::describe_collective(CollectiveKind::kReduceScatterBf16Avg, 12, 0) ==
        "reduce-scatter bf16 avg of 12 bf16 values");
  CHECK(gradsync::describe_collective(CollectiveKind::kReduceScatterAvg, 12, 0) ==
        "reduce-scatter avg of 12 floats");
}
