// GlooCommunicator's failures: N ranks as N threads of this process, one InMemoryStore, as in
// test_gloo_communicator.cpp. A rank that never issues, times out first, issues another
// collective (a desync, or with the check off a timeout), aborts, or is destroyed mid-collective;
// joining without every rank. Every wait is bounded and every message names the rank at fault.
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
#include "tests/support/gloo_checks.h"
#include "tests/support/reduce_scatter_checks.h"
#include "tests/support/ring_ranks.h"

using namespace gradsync::testing;
using namespace std::chrono_literals;
using gradsync::Communicator;
using gradsync::ReduceOp;

TEST_CASE("gloo: a rank that never issues its part makes the others time out") {
  for (const std::string& algorithm : gradsync::gloo_algorithms()) {
    CAPTURE(algorithm);
    const int n = 3;
    const auto timeout = 1500ms;
    gradsync::InMemoryStore store;
    Latch others_failed(n - 1);
    run_ranks(n, [&](int r) {
      auto comm = gradsync::make_gloo_communicator(store, r, n, gloo_options(algorithm, timeout));
      std::vector<float> data = rank_data(r, 100000);
      comm->allreduce(data, ReduceOp::kSum);  // #1 succeeds everywhere
      if (r == 2) {
        // Rank 2 stays alive, connections open, but never issues #2.
        CHECK(others_failed.wait(20s));
        return;
      }
      const auto start = Clock::now();
      const std::string message = error_of<gradsync::TimeoutError>(
          [&] { comm->allreduce(data, ReduceOp::kSum); },
          "rank " + std::to_string(r) + ": collective #2 should have timed out");
      const auto elapsed = ms_since(start);
      others_failed.count_down();
      MESSAGE(algorithm << ": rank " << r << " after " << elapsed << " ms: " << message);
      CHECK(elapsed >= 1400);
      CHECK(elapsed < 6000);  // the timeout, a report's grace, and slack for a loaded machine
      CHECK(has(message, "collective #2 allreduce sum of 100000 floats (gloo " + algorithm));
      CHECK(has(message,
                "timed out after 1500 ms waiting for rank 2 to send its header for "
                "this collective"));
      // The failure stays: the next call says the same at once.
      const auto again = Clock::now();
      CHECK(error_of<gradsync::TimeoutError>([&] { comm->barrier(); }, "still failed") == message);
      CHECK(ms_since(again) < 500);
    });
  }
}

TEST_CASE("gloo: a rank whose peer timed out first fails with a TimeoutError at once, naming it") {
  // A chain of waits inside the payload, so without the header check (with it, ranks 0..2 would
  // all wait for rank 3's header, each until its own deadline).
  // In ring_chunked rank r waits for rank r + 1's "ready" before it sends on. Rank 3 never
  // issues #2, so rank 2 waits for rank 3 and rank 1 for rank 2 (and rank 0 for rank 3's data).
  // Rank 2 gives up first (a shorter timeout) and closes its connections; rank 1 reads
  // end-of-file long before its own deadline and finds rank 2's report in the Store: a
  // timeout, not a crash.
  const int n = 4;
  gradsync::InMemoryStore store;
  Latch others_failed(n - 1);
  run_ranks(n, [&](int r) {
    const auto timeout = r == 2 ? 1000ms : 5000ms;
    auto comm =
        gradsync::make_gloo_communicator(store, r, n, gloo_options("ring_chunked", timeout, false));
    std::vector<float> data = rank_data(r, 100000);
    comm->allreduce(data, ReduceOp::kSum);
    if (r == 3) {
      CHECK(others_failed.wait(20s));  // never issues #2
      return;
    }
    const auto start = Clock::now();
    const std::string message = error_of<gradsync::TimeoutError>(
        [&] { comm->allreduce(data, ReduceOp::kSum); }, "collective #2 should have timed out");
    others_failed.count_down();
    MESSAGE("rank " << r << " after " << ms_since(start) << " ms: " << message);
    if (r == 1) {
      CHECK(ms_since(start) < 3500);  // rank 2's 1 s and a report's grace, not its own 5 s
      CHECK(has(message,
                "rank 2 closed the connection after a timeout: rank 2 timed out after "
                "1000 ms waiting for rank 3 in collective #2"));
    }
  });
}

TEST_CASE("gloo: without the desync check, different sizes time out instead of exchanging bytes") {
  // The tag of each collective hashes its shape: the two ranks' messages never meet. (With one
  // tag Gloo would deliver 2000 floats into a 1000-float receive and assert on its own thread.)
  gradsync::InMemoryStore store;
  run_ranks(2, [&](int r) {
    auto comm = gradsync::make_gloo_communicator(store, r, 2, gloo_options("ring", 1000ms, false));
    std::vector<float> data = rank_data(r, r == 0 ? 1000 : 2000);
    const std::string message = error_of<gradsync::TimeoutError>(
        [&] { comm->allreduce(data, ReduceOp::kSum); }, "mismatched sizes must time out");
    CHECK(has(message, "collective #1 allreduce sum of " + std::to_string(data.size())));
  });
}

namespace {

// One way for the last rank of a world to disagree with the others in collective #2: what the
// others do, what it does instead, and how the desync message reads each.
struct Mismatch {
  const char* name;
  std::function<void(Communicator&, std::vector<float>&)> majority, odd;
  const char* majority_text;
  const char* odd_text;
};

std::vector<Mismatch> mismatches() {
  const auto sum = [](Communicator& c, std::vector<float>& d) { c.allreduce(d, ReduceOp::kSum); };
  const auto resized = [](std::size_t n) {
    return [n](Communicator& c, std::vector<float>& d) {
      d.resize(n);
      c.allreduce(d, ReduceOp::kSum);
    };
  };
  return {
      {"size", sum, resized(6), "allreduce of 5 floats", "allreduce of 6 floats"},
      {"op", sum, [](Communicator& c, std::vector<float>& d) { c.allreduce(d, ReduceOp::kAvg); },
       "allreduce of 5 floats", "allreduce avg of 5 floats"},
      {"operation", sum, [](Communicator& c, std::vector<float>& d) { c.broadcast(d, 0); },
       "allreduce of 5 floats", "broadcast of 5 floats from rank 0"},
      {"empty", sum, resized(0), "allreduce of 5 floats", "allreduce of 0 floats"},
  };
}

}  // namespace

TEST_CASE("gloo: mismatched collectives fail every rank with a desync naming both sides") {
  // Under every algorithm, before any payload moves (ring_chunked and halving_doubling would
  // take the other's bytes by slot and end the process), well before the 20 s timeout; and the
  // failure stays, as any other. On sync pairs too, whose headers go through those pairs.
  const std::vector<std::pair<std::string, std::string>> configs = {{"ring", "async"},
                                                                    {"ring_chunked", "async"},
                                                                    {"halving_doubling", "async"},
                                                                    {"halving_doubling", "sync"}};
  for (const auto& [algorithm, pairs] : configs) {
    for (const int n : {2, 3}) {
      for (const Mismatch& mismatch : mismatches()) {
        CAPTURE(algorithm);
        CAPTURE(pairs);
        CAPTURE(n);
        CAPTURE(mismatch.name);
        const int odd = n - 1;
        const std::string majority_ranks = n == 2 ? "rank 0 is in" : "ranks 0, 1 are in";
        const std::string expected = "desync: rank " + std::to_string(odd) +
                                     " is in collective #2 " + mismatch.odd_text + " but " +
                                     majority_ranks + " collective #2 " + mismatch.majority_text;
        gradsync::InMemoryStore store;
        run_ranks(n, [&](int r) {
          auto options = gloo_options(algorithm, 20s);
          options.pairs = pairs;
          auto comm = gradsync::make_gloo_communicator(store, r, n, options);
          std::vector<float> data = rank_data(r, 5);
          comm->allreduce(data, ReduceOp::kSum);  // #1 agrees everywhere
          data = rank_data(r, 5);
          const auto start = Clock::now();
          int blamed = -1;
          std::string message;
          try {
            (r == odd ? mismatch.odd : mismatch.majority)(*comm, data);
            FAIL_CHECK("rank " << r << ": collective #2 must fail with a desync");
          } catch (const gradsync::TimeoutError& e) {
            FAIL_CHECK("rank " << r << ": a desync, not a timeout: " << e.what());
          } catch (const gradsync::PeerError& e) {
            message = e.what();
            blamed = e.rank();
          }
          CHECK(ms_since(start) < 5000);
          CHECK_MESSAGE(has(message, expected), message);
          // The rank each blames is one it disagrees with.
          CHECK(blamed == (r == odd ? 0 : odd));
          CHECK(error_of<gradsync::PeerError>([&] { comm->barrier(); }, "still failed") == message);
        });
      }
    }
  }
}

TEST_CASE("gloo: a desync among three kinds of collective names every odd rank, majority last") {
  const int n = 4;
  gradsync::InMemoryStore store;
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_gloo_communicator(store, r, n, gloo_options("halving_doubling"));
    std::vector<float> data = rank_data(r, r == 1 ? 6 : 5);
    const std::string message = error_of<gradsync::PeerError>(
        [&] { r == 3 ? comm->broadcast(data, 2) : comm->allreduce(data, ReduceOp::kSum); },
        "a desync");
    CHECK_MESSAGE(has(message,
                      "desync: rank 1 is in collective #1 allreduce of 6 floats; rank 3 is in "
                      "collective #1 broadcast of 5 floats from rank 2; but ranks 0, 2 are in "
                      "collective #1 allreduce of 5 floats"),
                  message);
  });
}

TEST_CASE("gloo: a reduce-scatter ring that is slow, then stuck, fails by its own deadline") {
  // Without the header check, so that the ring itself waits. Rank 1 never issues #2; rank 2
  // issues it 1 s late. Rank 0 gets rank 2's block at 1 s, then waits for rank 1 to take its
  // own: that wait gets what is left of the 1.5 s, not 1.5 s more.
  const int n = 3;
  gradsync::InMemoryStore store;
  Latch others_failed(2);
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_gloo_communicator(store, r, n, gloo_options("ring", 1500ms, false));
    std::vector<float> in = rank_data(r, 3 * 1000), out(1000);
    comm->reduce_scatter(in, out, ReduceOp::kSum);  // #1 succeeds everywhere
    if (r == 1) {
      CHECK(others_failed.wait(20s));
      return;
    }
    if (r == 2) std::this_thread::sleep_for(1000ms);
    const auto start = Clock::now();
    const std::string message = error_of<gradsync::PeerError>(
        [&] { comm->reduce_scatter(in, out, ReduceOp::kSum); }, "collective #2 must fail");
    const auto elapsed = ms_since(start);
    others_failed.count_down();
    MESSAGE("rank " << r << " after " << elapsed << " ms: " << message);
    CHECK(has(message, "rank 1"));
    if (r == 0) {
      CHECK(elapsed >= 1400);
      CHECK(elapsed < 2200);  // its deadline; each wait with the whole timeout would be 2.5 s
      CHECK(has(message,
                "timed out after 1500 ms waiting for rank 1 to take block 2 (step 1 of "
                "the reduce-scatter ring)"));
    }
  });
}

TEST_CASE(
    "gloo: a reduce-scatter of another size is a desync, and one never issued names the peer") {
  // The header check catches it; without it, another size is another tag: the ranks' messages
  // never meet and each times out (Gloo's own ReduceScatterHalvingDoubling would end the process).
  for (const bool check : {true, false}) {
    CAPTURE(check);
    gradsync::InMemoryStore store;
    run_ranks(2, [&](int r) {
      auto comm =
          gradsync::make_gloo_communicator(store, r, 2, gloo_options("ring", 1000ms, check));
      const std::size_t block = r == 0 ? 1000 : 1001;
      std::vector<float> in(2 * block, 1.0f), out(block);
      const auto start = Clock::now();
      const std::string message = error_of<gradsync::PeerError>(
          [&] { comm->reduce_scatter(in, out, ReduceOp::kSum); }, "mismatched sizes must fail");
      CHECK(has(message, "collective #1 reduce-scatter sum of " + std::to_string(in.size()) +
                             " floats (gloo ring)"));
      if (check) {
        CHECK(ms_since(start) < 900);  // before the timeout
        CHECK(has(message,
                  "desync: rank 1 is in collective #1 reduce-scatter of 2002 floats but "
                  "rank 0 is in collective #1 reduce-scatter of 2000 floats"));
      } else {
        CHECK(has(message, "timed out after 1000 ms"));
      }
    });
  }
  // Rank 2 stays, connections open, and never issues #2: rank 0 waits for its block, rank 1
  // for it to take one; both time out naming rank 2 (rank 1 perhaps through rank 0's report).
  const int n = 3;
  gradsync::InMemoryStore store;
  Latch others_failed(n - 1);
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_gloo_communicator(store, r, n, gloo_options("ring", 1500ms));
    std::vector<float> in = rank_data(r, 3 * 10000), out(10000);
    comm->reduce_scatter(in, out, ReduceOp::kAvg);  // #1 succeeds everywhere
    if (r == 2) {
      CHECK(others_failed.wait(20s));
      return;
    }
    const auto start = Clock::now();
    const std::string message = error_of<gradsync::TimeoutError>(
        [&] { comm->reduce_scatter(in, out, ReduceOp::kAvg); },
        "rank " + std::to_string(r) + ": collective #2 should have timed out");
    const auto elapsed = ms_since(start);
    others_failed.count_down();
    MESSAGE("rank " << r << " after " << elapsed << " ms: " << message);
    CHECK(elapsed >= 1400);
    CHECK(elapsed < 6000);
    CHECK(has(message, "collective #2 reduce-scatter avg of 30000 floats (gloo ring)"));
    CHECK(has(message, "rank 2"));
    CHECK(error_of<gradsync::TimeoutError>([&] { comm->barrier(); }, "still failed") == message);
  });
}

TEST_CASE("gloo: abort on one rank makes peers blocked in a collective fail at once, naming it") {
  for (const std::string& algorithm : gradsync::gloo_algorithms()) {
    CAPTURE(algorithm);
    const int n = 3;
    gradsync::InMemoryStore store;
    run_ranks(n, [&](int r) {
      auto comm = gradsync::make_gloo_communicator(store, r, n, gloo_options(algorithm, 20s));
      std::vector<float> data = rank_data(r, 100000);
      comm->allreduce(data, ReduceOp::kSum);
      if (r == 1) {
        // Let the others block in collective #2, then leave for a reason of its own.
        std::this_thread::sleep_for(300ms);
        comm->abort("rank 1 failed: results/metrics.csv: No space left on device");
        const std::string mine = error_of<gradsync::Error>(
            [&] { comm->allreduce(data, ReduceOp::kSum); }, "an aborted communicator must fail");
        CHECK(has(mine, "this rank aborted: rank 1 failed: results/metrics.csv"));
        CHECK(error_of<gradsync::Error>([&] { comm->barrier(); }, "still aborted") == mine);
        return;
      }
      const auto start = Clock::now();
      const std::string message = error_of<gradsync::PeerError>(
          [&] { comm->allreduce(data, ReduceOp::kSum); },
          "rank " + std::to_string(r) + ": collective #2 should have failed");
      MESSAGE(algorithm << ": rank " << r << " after " << ms_since(start) << " ms: " << message);
      CHECK(ms_since(start) < 5000);  // at once, not at the 20 s timeout
      CHECK(has(message,
                "closed the connection after a failure: rank 1 aborted: rank 1 failed: "
                "results/metrics.csv: No space left on device"));
      CHECK(has(message, "collective #2 allreduce sum"));
    });
  }
}

TEST_CASE("gloo: abort fails this rank's running and queued collectives without waiting") {
  const int n = 2;
  gradsync::InMemoryStore store;
  Latch done(1);
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_gloo_communicator(store, r, n, gloo_options("ring", 20s));
    if (r == 1) {
      CHECK(done.wait(20s));  // issues nothing: rank 0's collective blocks on it
      return;
    }
    std::vector<float> a = rank_data(r, 1000), b = rank_data(r, 1000);
    auto running = comm->allreduce_async(a, ReduceOp::kSum);
    auto queued = comm->allreduce_async(b, ReduceOp::kSum);
    std::this_thread::sleep_for(200ms);
    const auto start = Clock::now();
    comm->abort("rank 0 is leaving");
    CHECK(ms_since(start) < 1000);
    for (const auto& work : {running, queued}) {
      CHECK(has(error_of<gradsync::Error>([&] { work->wait(5s); }, "aborted work must fail"),
                "this rank aborted: rank 0 is leaving"));
    }
    CHECK(ms_since(start) < 2000);
    done.count_down();
  });
}

TEST_CASE("gloo: destroying a communicator with work running and queued never hangs") {
  const int n = 2;
  gradsync::InMemoryStore store;
  Latch done(1);
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_gloo_communicator(store, r, n, gloo_options("ring", 20s));
    if (r == 1) {
      CHECK(done.wait(20s));
      return;
    }
    std::vector<float> a = rank_data(r, 1000), b = rank_data(r, 1000);
    auto running = comm->allreduce_async(a, ReduceOp::kSum);
    auto queued = comm->barrier_async();
    std::this_thread::sleep_for(200ms);
    const auto start = Clock::now();
    comm.reset();
    CHECK(ms_since(start) < 2000);
    CHECK(has(error_of<gradsync::Error>([&] { running->wait(1s); }, "must fail"), "destroyed"));
    CHECK(has(error_of<gradsync::Error>([&] { queued->wait(1s); }, "must fail"), "destroyed"));
    done.count_down();
  });
}

TEST_CASE("gloo: joining goes through the gradsync Store and times out naming the missing keys") {
  gradsync::InMemoryStore store;
  run_ranks(2, [&](int r) {
    auto options = gloo_options();
    options.store_prefix = "job7/gloo";
    auto comm = gradsync::make_gloo_communicator(store, r, 2, options);
    comm->barrier();
  });
  CHECK(store.check({"job7/gloo/rank_0", "job7/gloo/rank_1", "job7/gloo/0", "job7/gloo/1"}, 1s));

  // Three ranks expected, two come.
  gradsync::InMemoryStore lonely;
  run_ranks(2, [&](int r) {
    const auto start = Clock::now();
    const std::string message = error_of<gradsync::TimeoutError>(
        [&] { gradsync::make_gloo_communicator(lonely, r, 3, gloo_options("ring", 1000ms)); },
        "joining without rank 2 must time out");
    MESSAGE("rank " << r << ": " << message);
    CHECK(has(message, "gloo/2"));
    CHECK(ms_since(start) < 5000);
  });
}
