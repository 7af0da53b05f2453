// GlooCommunicator: N ranks as N threads of this process over loopback, joined through one
// InMemoryStore, under every allreduce algorithm gloo_algorithms() lists. Expected values are
// known in closed form (tests/support/ring_ranks.h): rank r holds r + 1 + i % 7 at element i, so
// the sum over n ranks is n(n+1)/2 + n (i % 7) and the average (n+1)/2 + i % 7, both exactly
// representable: any summation order must reproduce them bit for bit.
// Compiled only where the build has Gloo (tests/CMakeLists.txt).
#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "allreduce/gloo/gloo_communicator.h"
#include "allreduce/in_memory_store.h"
#include "allreduce/tcp/socket.h"
#include "allreduce/tcp/tcp_ring.h"
#include "allreduce/tcp/tcp_store.h"
#include "common/error.h"
#include "tests/support/collective_value_checks.h"
#include "tests/support/gloo_checks.h"
#include "tests/support/reduce_scatter_checks.h"
#include "tests/support/ring_ranks.h"

using namespace gradsync::testing;
using namespace std::chrono_literals;
using gradsync::Communicator;
using gradsync::ReduceOp;

TEST_CASE("gloo: the algorithms are the three this Debian Gloo has, and gloo is compiled in") {
  CHECK(gradsync::gloo_compiled_in());
  CHECK(gradsync::gloo_algorithms() ==
        std::vector<std::string>{"ring", "ring_chunked", "halving_doubling"});
  CHECK(!gradsync::gloo_version().empty());
}

TEST_CASE("gloo: every collective is exact for 1..4 ranks, awkward lengths and every algorithm") {
  for (const std::string& algorithm : gradsync::gloo_algorithms()) {
    for (int n = 1; n <= 4; ++n) {
      CAPTURE(algorithm);
      CAPTURE(n);
      // Empty, one element (fewer than ranks), one more than the ranks, and ~4 MB no n divides.
      const std::vector<std::size_t> lengths = {0, 1, std::size_t(n + 1), 1000003};
      const int root = n - 1;  // not rank 0 wherever there is another
      gradsync::InMemoryStore store;
      run_ranks(n, [&](int r) {
        auto comm = gradsync::make_gloo_communicator(store, r, n, gloo_options(algorithm));
        CHECK(comm->rank() == r);
        CHECK(comm->size() == n);
        std::uint64_t sent = 0, received = 0;
        for (std::size_t length : lengths) {
          const std::uint64_t bytes = length * sizeof(float);
          check_collectives_once(*comm, length, root);
          // allreduce sum and avg: 2(N-1)/N of the buffer each way, twice; broadcast: the root
          // sends it, the others receive it; allgather: N-1 of N blocks each way.
          sent += 2 * (2 * bytes * std::uint64_t(n - 1) / std::uint64_t(n));
          received += 2 * (2 * bytes * std::uint64_t(n - 1) / std::uint64_t(n));
          if (n > 1) (r == root ? sent : received) += bytes;
          sent += bytes * std::uint64_t(n) * std::uint64_t(n - 1) / std::uint64_t(n);
          received += bytes * std::uint64_t(n) * std::uint64_t(n - 1) / std::uint64_t(n);
        }
        const auto counters = comm->counters();
        CHECK(counters.collectives == 5 * lengths.size());
        CHECK(counters.bytes_sent == sent);
        CHECK(counters.bytes_received == received);
      });
    }
  }
}

TEST_CASE("gloo: ranks agree bit for bit, and with 2 ranks the avg is TcpRing's exactly") {
  for (const std::string& algorithm : gradsync::gloo_algorithms()) {
    for (int n : {2, 3, 4}) {
      CAPTURE(algorithm);
      CAPTURE(n);
      const std::size_t length = 100003;
      const auto [gloo, ring] = average_beside_ring(n, gloo_options(algorithm), length);
      for (int r = 1; r < n; ++r) CHECK(gloo[std::size_t(r)] == gloo[0]);
      std::size_t differ = 0;
      for (std::size_t i = 0; i < length; ++i) differ += gloo[0][i] != ring[0][i] ? 1 : 0;
      MESSAGE("gloo " << algorithm << ", " << n << " ranks: " << differ << " of " << length
                      << " averages differ from TcpRing's in the last bits");
      // Two addends sum alike in either order, and both divide the sum once by 2.
      if (n == 2) CHECK(differ == 0);
    }
  }
}

TEST_CASE("gloo: collectives queued back to back complete in order with the right values") {
  for (const std::string& algorithm : gradsync::gloo_algorithms()) {
    CAPTURE(algorithm);
    const int n = 3;
    gradsync::InMemoryStore store;
    run_ranks(n, [&](int r) {
      auto comm = gradsync::make_gloo_communicator(store, r, n, gloo_options(algorithm));
      const int count = 30;
      std::vector<std::vector<float>> buffers;
      std::vector<std::shared_ptr<gradsync::Work>> works;
      for (int k = 0; k < count; ++k) buffers.push_back(rank_data(r, std::size_t(1 + 997 * k)));
      std::vector<float> gathered(std::size_t(n) * 5);
      std::vector<float> mine(5, float(r));
      std::vector<float> broadcast(1000, r == 2 ? 42.0f : 0.0f);
      for (int k = 0; k < count; ++k) {
        works.push_back(comm->allreduce_async(buffers[std::size_t(k)],
                                              k % 2 ? ReduceOp::kAvg : ReduceOp::kSum));
        if (k == count / 2) works.push_back(comm->allgather_async(mine, gathered));
        if (k == count / 3) works.push_back(comm->broadcast_async(broadcast, 2));
        if (k == count / 4) works.push_back(comm->barrier_async());
      }
      // Waiting for the last one first: once it is done, every earlier one must be done too.
      works.back()->wait(20s);
      for (const auto& w : works) CHECK(w->completed());
      for (const auto& w : works) w->wait(1s);
      for (int k = 0; k < count; ++k) {
        const float divisor = k % 2 ? float(n) : 1.0f;
        CHECK(wrong_elements(buffers[std::size_t(k)],
                             [&](std::size_t i) { return expected_sum(n, i) / divisor; }) == 0);
      }
      CHECK(wrong_elements(gathered, [](std::size_t j) { return float(j / 5); }) == 0);
      CHECK(wrong_elements(broadcast, [](std::size_t) { return 42.0f; }) == 0);
      CHECK(comm->counters().collectives == std::uint64_t(count + 3));
    });
  }
}

TEST_CASE("gloo: reduce-scatter gives rank r block r's exact sum, the allreduce's bits") {
  // The reduce-scatter is one ring whatever the allreduce algorithm; each one is compared.
  for (const std::string& algorithm : gradsync::gloo_algorithms()) {
    for (int n = 1; n <= 4; ++n) {
      CAPTURE(algorithm);
      CAPTURE(n);
      gradsync::InMemoryStore store;
      run_ranks(n, [&](int r) {
        auto comm = gradsync::make_gloo_communicator(store, r, n, gloo_options(algorithm));
        std::uint64_t sent = 0;
        for (std::size_t block : reduce_scatter_blocks(n)) {
          check_reduce_scatter(*comm, block);
          // The counters' formulas: (N-1)/N of the input per reduce-scatter (4 of them), twice
          // that per allreduce (3).
          sent += 10 * std::uint64_t(n - 1) * block * sizeof(float);
        }
        check_reduce_scatter_refuses_sizes(*comm);
        sent += std::uint64_t(n - 1) * 4 * sizeof(float);
        const auto counters = comm->counters();
        CHECK(counters.collectives == 7 * reduce_scatter_blocks(n).size() + 1);
        CHECK(counters.bytes_sent == sent);
        CHECK(counters.bytes_received == sent);
      });
    }
  }
}

TEST_CASE("gloo: reduce-scatter gives TcpRing's reduce-scatter bits, non-integers included") {
  // Both run the same ring schedule and add in the same order.
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    const std::size_t block = 25013;
    gradsync::InMemoryStore store;
    run_ranks(n, [&](int r) {
      const std::vector<float> in = noisy_data(r, block * std::size_t(n));
      auto comm = gradsync::make_gloo_communicator(store, r, n, gloo_options());
      auto tcp = gradsync::make_tcp_ring(store, r, n, ring_options());
      for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        std::vector<float> gloo(block), ring(block);
        comm->reduce_scatter(in, gloo, op);
        tcp->reduce_scatter(in, ring, op);
        CHECK_MESSAGE(gloo == ring, "rank " << r << (op == ReduceOp::kAvg ? " avg" : " sum"));
      }
    });
  }
}

TEST_CASE("gloo: ranks join through a real TcpStore") {
  int port = 0;
  {
    auto probe = gradsync::tcp::listen_on("127.0.0.1", 0);
    port = gradsync::tcp::local_port(probe);
  }
  const int n = 3;
  run_ranks(n, [&](int r) {
    gradsync::TcpStoreOptions store_options;
    store_options.port = port;
    store_options.is_server = r == 0;
    store_options.timeout = 10s;
    auto store = gradsync::make_tcp_store(store_options);
    auto comm = gradsync::make_gloo_communicator(*store, r, n, gloo_options("halving_doubling"));
    std::vector<float> data = rank_data(r, 100001);
    comm->allreduce(data, ReduceOp::kSum);
    CHECK(wrong_elements(data, [&](std::size_t i) { return expected_sum(n, i); }) == 0);
    comm.reset();
    // Rank 0's store server must outlive the others' last request (as in the TcpRing test).
    if (r != 0) {
      store->set("done/" + std::to_string(r), "1");
    } else {
      store->wait({"done/1", "done/2"}, 10s);
    }
  });
}

TEST_CASE("gloo: an unknown algorithm is a ConfigError listing the valid ones") {
  gradsync::InMemoryStore store;
  try {
    gradsync::make_gloo_communicator(store, 0, 1, gloo_options("bcube"));
    FAIL_CHECK("an unknown algorithm must be refused");
  } catch (const gradsync::ConfigError& e) {
    CHECK(e.key() == "comm.algorithm");
    CHECK(has(e.what(), "'bcube'"));
    CHECK(has(e.what(), "(valid for gloo: ring, ring_chunked, halving_doubling)"));
  }
}
