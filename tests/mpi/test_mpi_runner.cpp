// MpiRunner, MpiReports and the MPI runtime under mpirun, below the communicator: the desync
// message, the closed runner, the form (blocking or polled) that the thread level picks, the
// yield on a crowded host, and the bounded report collection. Every process is one rank and runs
// these cases in order.
#include <doctest/doctest.h>
#include <mpi.h>
#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "allreduce/collective_kind.h"
#include "allreduce/in_memory_store.h"
#include "allreduce/mpi/mpi_reports.h"
#include "allreduce/mpi/mpi_runner.h"
#include "allreduce/mpi/mpi_runtime.h"
#include "common/error.h"
#include "tests/mpi/mpi_world.h"

using namespace gradsync::testing;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("mpi: desync_error takes the majority's header and blames the others") {
  using gradsync::mpi::Header;
  const auto host = [](int r) { return "host" + std::to_string(r); };
  const Header a{1, 5, 0, 3}, b{1, 6, 0, 3}, c{3, 5, 1, 3};
  // The odd rank out is rank 2, whoever reports it: not rank 0, which differs first from it.
  for (const int me : {0, 2}) {
    const auto e = gradsync::mpi::desync_error({a, a, b, a}, me, "op", host);
    CHECK(e.rank() == 2);
    CHECK(std::string(e.what()) ==
          "rank 2 (host2) during op: desync: rank 2 is in collective #3 allreduce of 6 floats, "
          "but the majority (ranks 0, 1, 3) is in collective #3 allreduce of 5 floats");
  }
  // Two minorities: both named, both blamed.
  const auto two = gradsync::mpi::desync_error({a, c, a, b, a}, 0, "op", host);
  CHECK(two.rank() == 1);
  CHECK(std::string(two.what()) ==
        "ranks 1, 3 (host1, host3) during op: desync: rank 1 is in collective #3 broadcast of 5 "
        "floats from rank 1, rank 3 is in collective #3 allreduce of 6 floats, but the majority "
        "(ranks 0, 2, 4) is in collective #3 allreduce of 5 floats");
  // A tie of three sides: every side named, the others blamed.
  const auto tie = gradsync::mpi::desync_error({a, b, c}, 1, "op", host);
  CHECK(tie.rank() == 0);
  CHECK(has(tie.what(),
            "ranks 0, 2 (host0, host2) during op: desync: no majority: rank 0 is in "
            "collective #3 allreduce of 5 floats, rank 1 is in collective #3 "
            "allreduce of 6 floats, rank 2 is in collective #3 broadcast"));
}

TEST_CASE("mpi: a runner closed before a collective starts fails it and starts nothing") {
  // The communicator's destructor closes its runner, then stops its queue; the queue's thread
  // may take one more collective in between. That one must fail, not start MPI (whose first
  // unfinished MPI_Test would then end the job): the job goes on to the next test case.
  const MpiWorld& w = mpi_world();
  gradsync::MpiOptions options;
  options.store_prefix = "test/closed_runner";
  options.timeout = 10s;
  gradsync::mpi::MpiRunner runner(*w.store, w.rank, w.size, options);
  runner.close();
  gradsync::tcp::RingWork work(1, "collective #1 barrier (mpi)", w.rank, options.timeout,
                               runner.grace());
  bool started = false;
  try {
    // Both forms, whichever the thread level picks (run_mpi_tests.py runs both levels).
    runner.run(work, {std::int64_t(gradsync::CollectiveKind::kBarrier), 0, 0, 1}, 0,
               {"MPI_Barrier",
                [&] {
                  started = true;
                  return MPI_Barrier(runner.comm());
                },
                "MPI_Ibarrier",
                [&](MPI_Request* request) {
                  started = true;
                  return MPI_Ibarrier(runner.comm(), request);
                }});
    FAIL_CHECK("a closed runner ran a collective");
  } catch (const gradsync::Error& e) {
    CHECK(has(e.what(), "collective #1 barrier (mpi) never ran: the communicator was destroyed"));
  }
  CHECK_FALSE(started);
}

TEST_CASE(
    "mpi: MPI_THREAD_MULTIPLE makes blocking calls, SERIALIZED alone polls non-blocking ones") {
  int provided = MPI_THREAD_SINGLE;
  {
    auto held = gradsync::mpi::lock();
    MPI_Query_thread(&provided);
  }
  // gradsync asks for MULTIPLE, which Debian's Open MPI gives; the job that started MPI itself
  // asked for SERIALIZED (main.cpp).
  CHECK(provided == (serialized_asked ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE));
  CHECK(gradsync::mpi::thread_multiple() == (provided == MPI_THREAD_MULTIPLE));
  const MpiWorld& w = mpi_world();
  gradsync::MpiOptions options;
  options.store_prefix = "test/form";
  options.timeout = 20s;
  gradsync::mpi::MpiRunner runner(*w.store, w.rank, w.size, options);
  gradsync::tcp::RingWork work(1, "collective #1 barrier (mpi)", w.rank, options.timeout,
                               runner.grace());
  bool blocked = false, started = false;
  runner.run(work, {std::int64_t(gradsync::CollectiveKind::kBarrier), 0, 0, 1}, 0,
             {"MPI_Barrier",
              [&] {
                blocked = true;
                return MPI_Barrier(runner.comm());
              },
              "MPI_Ibarrier",
              [&](MPI_Request* request) {
                started = true;
                return MPI_Ibarrier(runner.comm(), request);
              }});
  CHECK(blocked == gradsync::mpi::thread_multiple());
  CHECK(started == !gradsync::mpi::thread_multiple());
}

TEST_CASE("mpi: unbound ranks that outnumber the host's cores yield in MPI's progress loop") {
  // What mpirun told this rank, as run_mpi_tests.py starts the job (unbound, N slots declared).
  const char* binding = std::getenv("OMPI_MCA_hwloc_base_binding_policy");
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  cpu_set_t cores;
  CPU_ZERO(&cores);
  REQUIRE(::sched_getaffinity(0, sizeof cores, &cores) == 0);
  const bool unbound = binding != nullptr && std::string(binding) == "none";
  const bool crowded = local != nullptr && std::atoi(local) > CPU_COUNT(&cores);
  const char* yield = std::getenv("OMPI_MCA_mpi_yield_when_idle");
  const auto text = [](const char* value) { return std::string(value ? value : "(unset)"); };
  const std::string said = "binding " + text(binding) + ", " + text(local) + " local ranks, " +
                           std::to_string(CPU_COUNT(&cores)) + " cores, yield " + text(yield);
  MESSAGE(said);
  if (serialized_asked) return;  // MPI was started by main.cpp, not by gradsync
  // 3 and 4 ranks on a 2-core machine; with fewer, or more cores, there is nothing to check.
  if (unbound && crowded) {
    REQUIRE(yield != nullptr);
    CHECK(std::string(yield) == "1");
  }
}

TEST_CASE("mpi: collecting reports is bounded by the grace period, however many ranks are silent") {
  // 200 ranks of which only 3 ever report, over an in-memory Store: a round that waited for each
  // silent rank's key (50 ms each, as it once did) would take 10 s; asking which exist first
  // takes no time at all.
  gradsync::InMemoryStore store;
  const int ranks = 200;
  gradsync::mpi::MpiReports mine(store, "reports", 0, ranks);
  // publish() probes the rank's joined key first.
  for (const int r : {0, 5, 17, 199}) store.set("reports/joined/" + std::to_string(r), "h");
  for (const int r : {5, 17, 199}) {
    gradsync::mpi::MpiReports(store, "reports", r, ranks).publish_progress({4, r == 17 ? 4u : 3u});
  }
  const auto began = std::chrono::steady_clock::now();
  const auto all = mine.collect({4, 3}, 4, 300ms);
  const auto took = std::chrono::steady_clock::now() - began;
  MESSAGE("collect took " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                          << " ms");
  CHECK(took < 1s);
  CHECK(took >= 250ms);  // it did wait the grace period for the 196 silent ones
  REQUIRE(all.size() == std::size_t(ranks));
  CHECK(all[0]->started == 4);
  CHECK(all[17]->finished == 4);
  CHECK(all[199]->started == 4);
  CHECK_FALSE(all[1].has_value());
}
