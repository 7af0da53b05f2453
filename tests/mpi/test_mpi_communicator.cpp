// MpiCommunicator under mpirun: every process is one rank and runs these cases in order. Values
// are known in closed form (tests/support/ring_ranks.h): rank r holds r + 1 + i % 7 at element
// i, so the sum over n ranks is n(n+1)/2 + n (i % 7), exact in any summation order. The cases
// that end the job (a stalled rank, abort, destruction mid-collective) are skipped unless named
// with -tc and --no-skip; run_mpi_tests.py runs them on their own and checks how the job ended.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "allreduce/mpi/mpi_runtime.h"
#include "common/error.h"
#include "tests/mpi/mpi_world.h"
#include "tests/support/allreduce_into_checks.h"
#include "tests/support/reduce_scatter_checks.h"
#include "tests/support/ring_ranks.h"

using namespace gradsync::testing;
using namespace std::chrono_literals;
using gradsync::ReduceOp;
using gradsync::Work;

namespace {

// Lengths worth trying: none, one, one more than the ranks, and ~4 MB not divisible by them.
std::vector<std::size_t> lengths(int n) { return {0, 1, std::size_t(n + 1), 1000003}; }

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("mpi: allreduce, broadcast and allgather are exact at every length") {
  const auto comm = mpi_communicator("exact");
  const int n = comm->size(), r = comm->rank();
  for (const std::size_t length : lengths(n)) {
    CAPTURE(length);
    std::vector<float> sum = rank_data(r, length), avg = sum;
    comm->allreduce(sum, ReduceOp::kSum);
    comm->allreduce(avg, ReduceOp::kAvg);
    CHECK(wrong_elements(sum, [&](std::size_t i) { return expected_sum(n, i); }) == 0);
    // The average divides the exact sum by float(n) on every rank, as TcpRing does.
    CHECK(wrong_elements(avg, [&](std::size_t i) { return expected_sum(n, i) / float(n); }) == 0);

    const int root = int(length % std::size_t(n));
    std::vector<float> shared = r == root ? rank_data(root, length) : std::vector<float>(length);
    comm->broadcast(shared, root);
    CHECK(shared == rank_data(root, length));

    std::vector<float> gathered(length * std::size_t(n), -1.0f);
    comm->allgather(rank_data(r, length), gathered);
    for (int k = 0; k < n; ++k) {
      CHECK(std::equal(gathered.begin() + std::ptrdiff_t(k * length),
                       gathered.begin() + std::ptrdiff_t((k + 1) * length),
                       rank_data(k, length).begin()));
    }
    // In place: this rank's block of the output is the input.
    std::vector<float> in_place(length * std::size_t(n), -1.0f);
    const auto mine = std::span(in_place).subspan(std::size_t(r) * length, length);
    std::ranges::copy(rank_data(r, length), mine.begin());
    comm->allgather(mine, in_place);
    CHECK(in_place == gathered);
  }
  comm->barrier();
}

TEST_CASE("mpi: reduce_scatter gives each rank its block of the allreduce") {
  const auto comm = mpi_communicator("reduce_scatter");
  for (const std::size_t block : reduce_scatter_blocks(comm->size())) {
    check_reduce_scatter(*comm, block);
  }
  check_reduce_scatter_refuses_sizes(*comm);
}

TEST_CASE("mpi: allreduce_into is exact, leaves its input, and matches in place bitwise") {
  const auto comm = mpi_communicator("allreduce_into");
  for (const std::size_t length : allreduce_into_lengths(comm->size())) {
    check_allreduce_into(*comm, length);
  }
  check_allreduce_into_refusals(*comm);
}

TEST_CASE("mpi: collectives in flight complete in issue order") {
  const auto comm = mpi_communicator("async");
  const int n = comm->size(), r = comm->rank();
  std::vector<std::vector<float>> buffers;
  for (int k = 0; k < 6; ++k) buffers.push_back(rank_data(r, std::size_t(1000 * k + 1)));
  std::vector<float> shared = r == 0 ? rank_data(0, 5000) : std::vector<float>(5000);
  std::vector<std::shared_ptr<Work>> works;
  for (auto& b : buffers) works.push_back(comm->allreduce_async(b, ReduceOp::kSum));
  works.push_back(comm->broadcast_async(shared, 0));
  works.push_back(comm->barrier_async());
  works.back()->wait(comm->timeout());
  for (const auto& w : works) CHECK(w->completed());
  for (const auto& b : buffers) {
    CHECK(wrong_elements(b, [&](std::size_t i) { return expected_sum(n, i); }) == 0);
  }
  CHECK(shared == rank_data(0, 5000));
  const gradsync::CommCounters counters = comm->counters();
  CHECK(counters.collectives == works.size());
}

TEST_CASE("mpi: non-integer averages are the same bits on every rank") {
  const auto comm = mpi_communicator("bits");
  const int n = comm->size(), r = comm->rank();
  std::vector<float> avg(4099);
  for (std::size_t i = 0; i < avg.size(); ++i) avg[i] = 0.1f * float(r + 1) / float(i + 3);
  comm->allreduce(avg, ReduceOp::kAvg);
  std::vector<float> everyone(avg.size() * std::size_t(n));
  comm->allgather(avg, everyone);
  for (int k = 0; k < n; ++k) {
    CHECK(std::memcmp(everyone.data() + std::size_t(k) * avg.size(), avg.data(),
                      avg.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("mpi: counters count payload bytes by the bandwidth-optimal formulas") {
  const auto comm = mpi_communicator("counters");
  const std::uint64_t n = std::uint64_t(comm->size());
  std::vector<float> data(1000, 1.0f), out(1000 * n);
  comm->allreduce(data, ReduceOp::kSum);
  std::uint64_t expected = 2 * 4000 * (n - 1) / n;
  CHECK(comm->counters().bytes_sent == expected);
  comm->allgather(data, out);
  expected += 4000 * n * (n - 1) / n;
  CHECK(comm->counters().bytes_received == expected);
}

TEST_CASE("mpi: the launcher's rank and size must be MPI's") {
  const MpiWorld& w = mpi_world();
  try {
    gradsync::make_mpi_communicator(*w.store, w.rank, w.size + 1, {});
    FAIL_CHECK("a size that is not MPI_COMM_WORLD's must be refused");
  } catch (const gradsync::Error& e) {
    CHECK(has(e.what(), "MPI_COMM_WORLD makes it " + std::to_string(w.rank) + " of " +
                            std::to_string(w.size)));
  }
}

TEST_CASE("mpi: a mismatched size is a desync on every rank, naming the rank out of step") {
  const auto comm = mpi_communicator("desync");
  const int n = comm->size(), r = comm->rank();
  if (n == 1) return;
  std::vector<float> data(r == n - 1 ? 6 : 5, 1.0f);
  std::string message;
  int blamed = -1;
  try {
    comm->allreduce(data, ReduceOp::kSum);
  } catch (const gradsync::PeerError& e) {
    message = e.what();
    blamed = e.rank();
  }
  MESSAGE(message);
  if (n == 2) {
    // One against one: no majority, both sides named, each blaming the other.
    CHECK(has(message,
              "desync: no majority: rank 0 is in collective #1 allreduce of 5 floats, "
              "rank 1 is in collective #1 allreduce of 6 floats"));
    CHECK(blamed == 1 - r);
  } else {
    // Every rank, the odd one included, blames the odd one, not rank 0.
    std::string majority = "ranks 0";
    for (int k = 1; k < n - 1; ++k) majority += ", " + std::to_string(k);
    CHECK(has(message, "rank " + std::to_string(n - 1) + " ("));
    CHECK(has(message, "desync: rank " + std::to_string(n - 1) +
                           " is in collective #1 allreduce of 6 floats, but the majority (" +
                           majority + ") is in collective #1 allreduce of 5 floats"));
    CHECK(blamed == n - 1);
  }
  // Every later call says the same.
  try {
    comm->barrier();
    FAIL_CHECK("a communicator that failed must stay failed");
  } catch (const gradsync::PeerError& e) {
    CHECK(std::string(e.what()) == message);
  }
}

TEST_CASE("mpi: a desync with no majority names both sides") {
  const auto comm = mpi_communicator("desync_tie");
  const int n = comm->size(), r = comm->rank();
  if (n != 4) return;
  std::vector<float> data(r < 2 ? 5 : 6, 1.0f);
  std::string message;
  int blamed = -1;
  try {
    comm->allreduce(data, ReduceOp::kSum);
  } catch (const gradsync::PeerError& e) {
    message = e.what();
    blamed = e.rank();
  }
  MESSAGE(message);
  CHECK(has(message,
            "desync: no majority: ranks 0, 1 are in collective #1 allreduce of 5 "
            "floats, ranks 2, 3 are in collective #1 allreduce of 6 floats"));
  CHECK(has(message, r < 2 ? "ranks 2, 3 (" : "ranks 0, 1 ("));
  CHECK(blamed == (r < 2 ? 2 : 0));
}

TEST_CASE("mpi: a rank with zero elements where the others have some is caught at once") {
  const auto comm = mpi_communicator("desync_empty", 20s);
  const int n = comm->size(), r = comm->rank();
  if (n == 1) return;
  // Before zero elements exchanged headers, the others waited here for rank n-1's next
  // collective (or until the timeout): now all fail in this one, long before the timeout.
  const auto began = std::chrono::steady_clock::now();
  std::vector<float> data(r == n - 1 ? 0 : 5, 1.0f);
  std::string message;
  try {
    comm->allreduce(data, ReduceOp::kSum);
  } catch (const gradsync::PeerError& e) {
    message = e.what();
  }
  MESSAGE(message);
  CHECK(std::chrono::steady_clock::now() - began < 10s);
  CHECK(
      has(message, "rank " + std::to_string(n - 1) + " is in collective #1 allreduce of 0 floats"));
  // Zero elements everywhere are fine, before and after other collectives.
  const auto ok = mpi_communicator("empty_everywhere");
  std::vector<float> none, some = rank_data(r, 3);
  ok->allreduce(none, ReduceOp::kSum);
  ok->allreduce(some, ReduceOp::kSum);
  ok->broadcast(none, 0);
  ok->allgather(none, none);
  ok->reduce_scatter(none, none, ReduceOp::kAvg);
  CHECK(wrong_elements(some, [&](std::size_t i) { return expected_sum(n, i); }) == 0);
}

TEST_CASE("mpi: a collective waiting for a late rank leaves mpi::lock() free") {
  // MPI_Abort (abort(), a timeout) takes the lock: a collective that held it while it waited
  // for the others would hold up the end of the job by as long. Blocking or polled, with the
  // header exchange (where the wait falls) or without (then in the payload's call), it must not.
  const MpiWorld& w = mpi_world();
  if (w.size == 1) return;
  for (const bool check_desync : {true, false}) {
    CAPTURE(check_desync);
    gradsync::MpiOptions options;
    options.store_prefix =
        std::string("test/lock_free/") + (check_desync ? "checked" : "unchecked");
    options.check_desync = check_desync;
    const auto comm = gradsync::make_mpi_communicator(*w.store, w.rank, w.size, options);
    std::vector<float> data = rank_data(w.rank, 1000);
    if (w.rank == w.size - 1) {
      std::this_thread::sleep_for(600ms);
      comm->allreduce(data, ReduceOp::kSum);
    } else {
      std::atomic<bool> done{false};
      auto longest = std::chrono::steady_clock::duration::zero();
      std::thread prober([&] {
        while (!done) {
          const auto before = std::chrono::steady_clock::now();
          { auto held = gradsync::mpi::lock(); }
          longest = std::max(longest, std::chrono::steady_clock::now() - before);
          std::this_thread::sleep_for(1ms);
        }
      });
      comm->allreduce(data, ReduceOp::kSum);
      done = true;
      prober.join();
      MESSAGE("longest wait for mpi::lock(): "
              << std::chrono::duration_cast<std::chrono::microseconds>(longest).count() << " us");
      CHECK(longest < 250ms);
    }
    CHECK(wrong_elements(data, [&](std::size_t i) { return expected_sum(w.size, i); }) == 0);
  }
}

TEST_CASE("mpi: a rank that stops issuing is named, and the job ends" * doctest::skip()) {
  const auto comm = mpi_communicator("stall", 2s);
  const int n = comm->size(), r = comm->rank();
  REQUIRE(n >= 2);
  std::vector<float> data(1000, 1.0f);
  comm->allreduce(data, ReduceOp::kSum);
  if (r == n - 1) {
    std::this_thread::sleep_for(60s);  // mpirun ends this process long before
  } else {
    // Rank 1 comes 1.5 s late, inside rank 0's timeout: rank 0 must read that it came (its
    // progress report) and name rank n-1 alone.
    if (r == 1) std::this_thread::sleep_for(1500ms);
    comm->allreduce(data, ReduceOp::kSum);  // never returns: the timeout ends the job
  }
  FAIL("the job went on past the stall");
}

TEST_CASE("mpi: abort ends the job at once, saying why" * doctest::skip()) {
  const auto comm = mpi_communicator("abort", 30s);
  std::vector<float> data(1000, 1.0f);
  comm->allreduce(data, ReduceOp::kSum);
  if (comm->rank() == 1 % comm->size()) comm->abort("disk full (on purpose)");
  comm->allreduce(data, ReduceOp::kSum);  // the others wait here until mpirun ends them
  FAIL("the job went on past the abort");
}

TEST_CASE("mpi: a communicator destroyed mid-collective ends the job" * doctest::skip()) {
  auto comm = mpi_communicator("destroyed", 30s);
  if (comm->rank() == 0) {
    std::vector<float> data(1000, 1.0f);
    auto work = comm->allreduce_async(data, ReduceOp::kSum);  // the others never join it
    std::this_thread::sleep_for(200ms);
    comm.reset();  // MPI may still write into `data`: the job must end, not go on
  } else {
    std::this_thread::sleep_for(60s);
  }
  FAIL("the job went on past the destruction");
}
