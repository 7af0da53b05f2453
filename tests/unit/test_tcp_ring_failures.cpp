// TcpRing when something goes wrong: a rank that never calls the collective, one that leaves,
// one that issues another size, a Work waited on past its timeout, a setup that cannot
// complete. Every case ends in bounded time with an error naming the rank at fault.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "allreduce/in_memory_store.h"
#include "allreduce/tcp/socket.h"
#include "allreduce/tcp/tcp_ring.h"
#include "allreduce/tcp/tcp_store.h"
#include "common/error.h"
#include "tests/support/error_checks.h"
#include "tests/support/ring_ranks.h"

using namespace gradsync::testing;
using namespace std::chrono_literals;
using gradsync::Communicator;
using gradsync::ReduceOp;

TEST_CASE("tcp ring: a rank that never calls the collective makes the others time out naming it") {
  const int n = 3;
  const auto timeout = 600ms;
  gradsync::InMemoryStore store;
  Latch others_failed(n - 1);
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_tcp_ring(store, r, n, ring_options(timeout));
    std::vector<float> data = rank_data(r, 1000);
    comm->allreduce(data, ReduceOp::kSum);  // #1 succeeds everywhere
    if (r == 1) {
      // Rank 1 stays alive, connections open, but never issues #2.
      CHECK(others_failed.wait(10s));
      return;
    }
    const auto start = Clock::now();
    const std::string message = error_of<gradsync::TimeoutError>(
        [&] { comm->allreduce(data, ReduceOp::kSum); },
        "rank " + std::to_string(r) + ": collective #2 should have timed out");
    const auto elapsed = ms_since(start);
    others_failed.count_down();
    MESSAGE("rank " << r << " after " << elapsed << " ms: " << message);
    CHECK(elapsed >= 500);
    CHECK(elapsed < 600 + 600 + 5000);  // timeout + report grace + slack for a loaded machine
    CHECK(message.find("timed out after 600 ms") != std::string::npos);
    CHECK(message.find("collective #2 allreduce") != std::string::npos);
    CHECK(message.find("rank 1 no report") != std::string::npos);
    CHECK(message.find("rank " + std::to_string(r) + " 2/1") != std::string::npos);
    if (r == 2) CHECK(message.find("waiting for rank 1") != std::string::npos);
    // The communicator is now unusable, and says why.
    try {
      comm->barrier();
      FAIL_CHECK("a failed communicator must keep failing");
    } catch (const gradsync::TimeoutError& e) {
      CHECK(std::string(e.what()) == message);
    }
  });
}

TEST_CASE("tcp ring: a rank that destroys its communicator fails its neighbours at once") {
  const int n = 4;
  gradsync::InMemoryStore store;
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_tcp_ring(store, r, n, ring_options(10s));
    std::vector<float> data = rank_data(r, 100000);
    comm->allreduce(data, ReduceOp::kSum);
    if (r == 2) {
      comm.reset();  // as if the process died
      return;
    }
    const auto start = Clock::now();
    const std::string message = error_of<gradsync::PeerError>(
        [&] { comm->allreduce(data, ReduceOp::kSum); },
        "rank " + std::to_string(r) + ": collective #2 should have failed");
    MESSAGE("rank " << r << " after " << ms_since(start) << " ms: " << message);
    CHECK(ms_since(start) < 8000);  // before the 10 s timeout
    CHECK(message.find("rank 2 closed the connection") != std::string::npos);
    CHECK(message.find("collective #2 allreduce") != std::string::npos);
  });
}

TEST_CASE("tcp ring: a rank issuing a different size fails with a desync naming both ranks") {
  const int n = 3;
  gradsync::InMemoryStore store;
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_tcp_ring(store, r, n, ring_options(5s));
    std::vector<float> warmup(10, 1.0f);
    for (int k = 0; k < 6; ++k) comm->allreduce(warmup, ReduceOp::kSum);
    std::vector<float> data(r == 0 ? 999 : 1000, 1.0f);
    const auto start = Clock::now();
    try {
      comm->allreduce(data, ReduceOp::kSum);
      FAIL_CHECK("rank " << r << ": the mismatched collective should have failed");
    } catch (const gradsync::PeerError& e) {
      MESSAGE("rank " << r << ": " << std::string(e.what()));
      if (r == 1) {
        CHECK(std::string(e.what()).find(
                  "desync: rank 1 is in collective #7 allreduce of 1000 floats but rank 0 sent "
                  "collective #7 allreduce of 999 floats") != std::string::npos);
      }
    }
    CHECK(ms_since(start) < 8000);  // before the 10 s timeout
  });
}

TEST_CASE("tcp ring: a reduce-scatter of another size or op on one rank is a desync") {
  // Rank 0 differs; rank 1, its right neighbour, reads rank 0's header and names both.
  struct Case {
    std::size_t block0;
    ReduceOp op0;
    const char* rank0_sent;
  };
  for (const Case& c : {Case{3, ReduceOp::kSum, "collective #2 reduce-scatter of 9 floats"},
                        Case{4, ReduceOp::kAvg, "collective #2 reduce-scatter avg of 12 floats"}}) {
    CAPTURE(c.rank0_sent);
    const int n = 3;
    gradsync::InMemoryStore store;
    run_ranks(n, [&](int r) {
      auto comm = gradsync::make_tcp_ring(store, r, n, ring_options(5s));
      std::vector<float> warmup(10, 1.0f);
      comm->allreduce(warmup, ReduceOp::kSum);
      const std::size_t block = r == 0 ? c.block0 : 4;
      std::vector<float> in(block * std::size_t(n), 1.0f), out(block);
      const auto start = Clock::now();
      const std::string message = error_of<gradsync::PeerError>(
          [&] { comm->reduce_scatter(in, out, r == 0 ? c.op0 : ReduceOp::kSum); },
          "rank " + std::to_string(r) + ": the mismatched reduce-scatter should have failed");
      MESSAGE("rank " << r << ": " << message);
      if (r == 1) {
        CHECK(message.find(std::string("desync: rank 1 is in collective #2 reduce-scatter of 12 "
                                       "floats but rank 0 sent ") +
                           c.rank0_sent) != std::string::npos);
      }
      CHECK(ms_since(start) < 4000);  // before the 5 s timeout
    });
  }
}

TEST_CASE("tcp ring: Work::wait gives up at its timeout, and destruction never hangs") {
  gradsync::InMemoryStore store;
  Latch waited(1);
  run_ranks(2, [&](int r) {
    auto comm = gradsync::make_tcp_ring(store, r, 2, ring_options(20s));
    if (r == 1) {
      CHECK(waited.wait(10s));  // never joins rank 0's collective
      return;
    }
    std::vector<float> data(1000, 1.0f);
    auto work = comm->allreduce_async(data, ReduceOp::kSum);
    auto queued = comm->barrier_async();
    auto start = Clock::now();
    CHECK_THROWS_AS(work->wait(100ms), gradsync::TimeoutError);
    CHECK(ms_since(start) < 5000);  // the 100 ms wait, not the ring's 20 s
    CHECK_FALSE(work->completed());
    start = Clock::now();
    comm.reset();                   // with one collective running and one queued
    CHECK(ms_since(start) < 5000);  // at once, not after the ring's 20 s
    CHECK(work->completed());
    CHECK(queued->completed());
    CHECK_THROWS_AS(work->wait(0ms), gradsync::Error);
    CHECK_THROWS_AS(queued->wait(0ms), gradsync::Error);
    waited.count_down();
  });
}

TEST_CASE("tcp ring: setup fails naming a rank that never starts, or one of another world size") {
  {
    gradsync::InMemoryStore store;
    run_ranks(2, [&](int r) {  // ranks 0 and 1 of 3; rank 2 never starts
      const auto start = Clock::now();
      try {
        gradsync::make_tcp_ring(store, r, 3, ring_options(500ms));
        FAIL_CHECK("setup should have timed out");
      } catch (const gradsync::TimeoutError& e) {
        MESSAGE("rank " << r << ": " << std::string(e.what()));
        CHECK(e.rank() == 2);
        CHECK(std::string(e.what()).find("rank 2") != std::string::npos);
      }
      CHECK(ms_since(start) < 8000);  // the 500 ms given, not a hang
    });
  }
  {
    gradsync::InMemoryStore store;
    run_ranks(2, [&](int r) {  // rank 0 believes in 3 ranks, rank 1 in 2
      try {
        gradsync::make_tcp_ring(store, r, r == 0 ? 3 : 2, ring_options(1s));
        FAIL_CHECK("setup should have failed");
      } catch (const gradsync::PeerError& e) {
        MESSAGE("rank " << r << ": " << std::string(e.what()));
        if (r == 1) CHECK(std::string(e.what()).find("of 3") != std::string::npos);
      }
    });
  }
}

TEST_CASE("tcp ring: a rank that aborts with a reason fails its neighbours naming that reason") {
  // A rank that fails on its own (its data, its disk) aborts before it leaves: its neighbours
  // say why, not only "closed the connection (process died?)".
  const int n = 3;
  gradsync::InMemoryStore store;
  Latch aborted(1);
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_tcp_ring(store, r, n, ring_options(10s));
    std::vector<float> data = rank_data(r, 1000);
    comm->allreduce(data, ReduceOp::kSum);
    if (r == 1) {
      comm->abort("rank 1 failed: results/metrics.csv: No space left on device");
      aborted.count_down();
      // Its own later calls say why too.
      CHECK(error_of<gradsync::Error>([&] { comm->allreduce(data, ReduceOp::kSum); },
                                      "an aborted communicator must fail")
                .find("this rank aborted: rank 1 failed: results/metrics.csv") !=
            std::string::npos);
      return;
    }
    CHECK(aborted.wait(10s));
    const auto start = Clock::now();
    const std::string message = error_of<gradsync::PeerError>(
        [&] { comm->allreduce(data, ReduceOp::kSum); },
        "rank " + std::to_string(r) + ": collective #2 should have failed");
    MESSAGE("rank " << r << ": " << message);
    CHECK(ms_since(start) < 8000);  // at once, not at the 10 s timeout
    // "(Broken pipe)" or nothing between them, depending on whether this rank was sending.
    CHECK(message.find("rank 1 closed the connection") != std::string::npos);
    CHECK(message.find("(it failed first: rank 1 failed: results/metrics.csv: No space left on "
                       "device)") != std::string::npos);
  });
}

TEST_CASE("tcp ring: strays on a listener are refused and blame no rank; the ring still forms") {
  // Rank 0 waits for rank 1 (its left neighbour of 2). Before rank 1 starts, three strays
  // connect to rank 0's listener: one sends garbage, one another run's hello (another token),
  // one nothing and closes. Each is refused; rank 0 accepts rank 1 and the ring works.
  const int n = 2;
  gradsync::InMemoryStore store;
  const gradsync::TcpRingOptions options = ring_options(10s);
  std::atomic<bool> strays_done{false};
  run_ranks(n + 1, [&](int r) {
    if (r == n) {  // the strays
      const std::string address = store.get(options.store_prefix + "/addr/0", 10s);
      std::string host;
      int port = 0;
      gradsync::tcp::parse_endpoint(address, host, port);
      std::string error;
      const auto deadline = Clock::now() + 5s;
      {
        auto garbage = gradsync::tcp::connect_with_retry(host, port, deadline, error);
        const char text[] = "GET / HTTP/1.0\r\n\r\n....";  // 24 bytes: a hello's size
        gradsync::tcp::send_all(garbage.fd(), text, 24, deadline);
        std::this_thread::sleep_for(100ms);
      }
      {
        // Another run's hello: magic "HELO", version 2, rank 1 of 2, another token.
        auto other = gradsync::tcp::connect_with_retry(host, port, deadline, error);
        const std::uint32_t hello[6] = {0x4f4c4548, 2, 1, 2, 12345, 678};
        gradsync::tcp::send_all(other.fd(), hello, sizeof hello, deadline);
        std::this_thread::sleep_for(100ms);
      }
      // Connects, says nothing, and closes.
      gradsync::tcp::connect_with_retry(host, port, deadline, error);
      std::this_thread::sleep_for(200ms);
      strays_done = true;
      return;
    }
    if (r == 1) {
      while (!strays_done) std::this_thread::sleep_for(10ms);
    }
    auto comm = gradsync::make_tcp_ring(store, r, n, options);
    std::vector<float> data = rank_data(r, 1000);
    comm->allreduce(data, ReduceOp::kSum);
    for (std::size_t i = 0; i < data.size(); i += 97) CHECK(data[i] == expected_sum(n, i));
  });
}
