// HierarchicalCommunicator: N ranks as N threads of this process, grouped into hosts by the ids
// each test gives them; shared memory within a host, a TcpRing among the hosts' leaders, all
// joined through one InMemoryStore. Expected values are in closed form (tests/support/
// ring_ranks.h: integer-valued data, exact in any summation order).
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "allreduce/hierarchical/hierarchical_communicator.h"
#include "allreduce/hierarchical/host_layout.h"
#include "allreduce/in_memory_store.h"
#include "allreduce/shm/shm_communicator.h"
#include "allreduce/tcp/tcp_ring.h"
#include "common/error.h"
#include "tests/support/allreduce_into_checks.h"
#include "tests/support/collective_value_checks.h"
#include "tests/support/reduce_scatter_checks.h"
#include "tests/support/ring_ranks.h"

using namespace gradsync::testing;
using namespace std::chrono_literals;
using gradsync::HostLayout;
using gradsync::ReduceOp;

namespace {

// What make_communicator builds for comm.hierarchical: on (allreduce/make_communicator.cpp),
// from host ids given here instead of the hosts' own.
std::unique_ptr<gradsync::Communicator> hierarchical(gradsync::Store& store,
                                                     const std::vector<std::string>& ids, int rank,
                                                     std::chrono::milliseconds timeout = 10s,
                                                     std::size_t chunk_bytes = 4096) {
  const HostLayout layout = gradsync::host_layout(ids, rank);
  const auto shm = [&](const std::string& prefix, int timeouts) {
    gradsync::ShmOptions options;
    options.timeout = timeouts * timeout;
    options.chunk_bytes = chunk_bytes;  // 4 KiB: many chunk steps, both sets of slots
    options.run_id = 0x41e4a000ull;
    options.store_prefix = prefix;
    options.machine_ranks = static_cast<int>(ids.size());  // as make_communicator sets it
    return gradsync::make_shm_communicator(store, layout.local_rank, layout.local_size(), options);
  };
  const std::string host = "hier/host" + std::to_string(layout.host);
  gradsync::HierarchyLevels levels;
  levels.in_host = shm(host, 1);
  levels.from_leader = shm(host + "/after", 3);
  if (layout.leader() && layout.hosts > 1) {
    gradsync::TcpRingOptions ring = ring_options(2 * timeout);
    ring.store_prefix = "hier/leaders";
    levels.between_hosts = gradsync::make_tcp_ring(store, layout.host, layout.hosts, ring);
  }
  return gradsync::make_hierarchical_communicator(rank, layout, levels);
}

// Host ids for n ranks: in blocks of `per_host` (the last host may have fewer).
std::vector<std::string> blocks(int n, int per_host) {
  std::vector<std::string> ids;
  for (int r = 0; r < n; ++r) ids.push_back("host" + std::to_string(r / per_host));
  return ids;
}

}  // namespace

TEST_CASE("host layout: hosts in the order of their lowest rank, leaders the lowest") {
  const HostLayout a = gradsync::host_layout({"x", "x", "y", "y"}, 3);
  CHECK(a.hosts == 2);
  CHECK(a.host == 1);
  CHECK(a.local_rank == 1);
  CHECK(a.local_size() == 2);
  CHECK_FALSE(a.leader());
  CHECK(a.regular());
  CHECK(a.mixed());
  const HostLayout b = gradsync::host_layout({"y", "x", "y", "z", "x"}, 4);
  CHECK(b.host_of_rank == std::vector<int>{0, 1, 0, 2, 1});
  CHECK(b.ranks_of_host[1] == std::vector<int>{1, 4});
  CHECK(b.local_rank == 1);
  CHECK_FALSE(b.regular());
  CHECK(b.mixed());
  CHECK_FALSE(gradsync::host_layout({"x", "x", "x"}, 0).mixed());  // one host
  CHECK_FALSE(gradsync::host_layout({"x", "y", "z"}, 0).mixed());  // a rank per host
  CHECK(gradsync::host_layout({"x", "y", "z"}, 2).regular());
}

TEST_CASE("hierarchical: every collective is exact for 1..6 ranks on every grouping") {
  for (int n = 1; n <= 6; ++n) {
    // One host, a host per rank, pairs, triples, and interleaved hosts (not regular).
    std::vector<std::vector<std::string>> groupings = {blocks(n, n), blocks(n, 1), blocks(n, 2),
                                                       blocks(n, 3)};
    std::vector<std::string> interleaved;
    for (int r = 0; r < n; ++r) interleaved.push_back(r % 2 == 0 ? "even" : "odd");
    groupings.push_back(interleaved);
    for (const std::vector<std::string>& ids : groupings) {
      CAPTURE(n);
      CAPTURE(ids[n - 1]);
      CAPTURE(ids[0]);
      const std::vector<std::size_t> lengths = {0, 1, std::size_t(n + 1), 4097, 100003};
      gradsync::InMemoryStore store;
      run_ranks(n, [&](int r) {
        auto comm = hierarchical(store, ids, r);
        CHECK(comm->rank() == r);
        CHECK(comm->size() == n);
        for (std::size_t length : lengths) {
          for (int root : {0, n - 1}) check_collectives_once(*comm, length, root);
        }
        CHECK(comm->counters().collectives == 10 * lengths.size());
      });
    }
  }
}

TEST_CASE("hierarchical: reduce-scatter and out-of-place allreduce match the allreduce") {
  for (int n : {2, 4, 5}) {
    CAPTURE(n);
    gradsync::InMemoryStore store;
    run_ranks(n, [&](int r) {
      auto comm = hierarchical(store, blocks(n, 2), r, 10s, 1 << 18);
      for (std::size_t block : reduce_scatter_blocks(n)) check_reduce_scatter(*comm, block);
      for (std::size_t length : allreduce_into_lengths(n)) check_allreduce_into(*comm, length);
      check_allreduce_into_refusals(*comm);
    });
  }
}

TEST_CASE("hierarchical: ranks end with the same bits on non-integer data") {
  const int n = 4;
  const std::size_t length = 50003;
  gradsync::InMemoryStore store;
  std::vector<std::vector<float>> got(n);
  run_ranks(n, [&](int r) {
    auto comm = hierarchical(store, blocks(n, 2), r);
    got[std::size_t(r)].resize(length);
    for (std::size_t i = 0; i < length; ++i) {
      got[std::size_t(r)][i] = 0.1f * float(r + 1) / float(i + 3);
    }
    comm->allreduce(got[std::size_t(r)], ReduceOp::kAvg);
  });
  for (int r = 1; r < n; ++r) CHECK(got[std::size_t(r)] == got[0]);
  CHECK(got[0][0] == doctest::Approx(0.1 * 10 / 3 / 4).epsilon(1e-6));
}

TEST_CASE("hierarchical: the leaders alone carry bytes between hosts") {
  const int n = 4;
  const std::size_t length = 1 << 16;
  gradsync::InMemoryStore store;
  std::vector<gradsync::CommCounters> counters(n);
  run_ranks(n, [&](int r) {
    auto comm = hierarchical(store, blocks(n, 2), r);
    std::vector<float> data = rank_data(r, length);
    comm->allreduce(data, ReduceOp::kSum);
    CHECK(wrong_elements(data, [&](std::size_t i) { return expected_sum(n, i); }) == 0);
    counters[std::size_t(r)] = comm->counters();
    CHECK(comm->backend() == (r % 2 == 0 ? "shm+tcp" : "shm+leaders"));
  });
  // The leaders' ring of 2 sends 2 (H - 1) / H S = S each; the others only their share of the
  // host's shared memory.
  const std::uint64_t s = length * sizeof(float);
  CHECK(counters[0].bytes_sent > counters[1].bytes_sent + s / 2);
  CHECK(counters[2].bytes_sent > counters[3].bytes_sent + s / 2);
}

TEST_CASE("hierarchical: a rank that leaves is named by its global rank on every host") {
  const int n = 4;
  gradsync::InMemoryStore store;
  std::vector<std::string> errors(n);
  const auto start = Clock::now();
  run_ranks(n, [&](int r) {
    auto comm = hierarchical(store, blocks(n, 2), r, 800ms);
    std::vector<float> data = rank_data(r, 5000);
    comm->allreduce(data, ReduceOp::kSum);
    if (r == 3) return;  // rank 3 (host 1's second rank) leaves before the second allreduce
    try {
      comm->allreduce(data, ReduceOp::kSum);
    } catch (const gradsync::Error& e) {
      errors[std::size_t(r)] = e.what();
    }
  });
  CHECK(ms_since(start) < 8000);
  for (int r = 0; r < 3; ++r) {
    CAPTURE(errors[std::size_t(r)]);
    CHECK(errors[std::size_t(r)].find("rank 3") != std::string::npos);
  }
}

TEST_CASE("hierarchical: an abort reaches the other host at once, with its reason") {
  const int n = 4;
  gradsync::InMemoryStore store;
  std::vector<std::string> errors(n);
  const auto start = Clock::now();
  run_ranks(n, [&](int r) {
    auto comm = hierarchical(store, blocks(n, 2), r, 20s);
    if (r == 1) {
      std::this_thread::sleep_for(100ms);
      comm->abort("rank 1 failed: its data file is unreadable");
      return;
    }
    std::vector<float> data = rank_data(r, 1000);
    try {
      comm->allreduce(data, ReduceOp::kSum);
    } catch (const gradsync::Error& e) {
      errors[std::size_t(r)] = e.what();
    }
  });
  CHECK(ms_since(start) < 5000);
  for (int r : {0, 2, 3}) {
    CAPTURE(errors[std::size_t(r)]);
    CHECK(errors[std::size_t(r)].find("its data file is unreadable") != std::string::npos);
  }
}
