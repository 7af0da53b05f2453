// GlooCommunicator on sync pairs (GlooOptions::pairs sync and busy_poll: the float allreduce on
// a second mesh whose pairs Gloo switched to sync mode, allreduce/gloo/gloo_mesh.h): the same
// closed-form values as test_gloo_communicator.cpp, buffers past what one message may carry
// (cut into pieces, never a send both peers wait on), and the failures a blocked sync read
// must not turn into a hang: a silent peer, a peer that aborts, this rank aborting or being
// destroyed while its thread is blocked in recv. N ranks as N threads, one InMemoryStore.
// Compiled only where the build has Gloo (tests/CMakeLists.txt).
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "allreduce/gloo/gloo_communicator.h"
#include "allreduce/gloo/socket_lookup.h"
#include "allreduce/in_memory_store.h"
#include "allreduce/tcp/tcp_ring.h"
#include "common/error.h"
#include "tests/support/collective_value_checks.h"
#include "tests/support/gloo_checks.h"
#include "tests/support/ring_ranks.h"

using namespace gradsync::testing;
using namespace std::chrono_literals;
using gradsync::ReduceOp;

namespace {

gradsync::GlooOptions sync_options(const std::string& algorithm, const std::string& pairs,
                                   std::chrono::milliseconds timeout = 20s,
                                   bool check_desync = true) {
  auto options = gloo_options(algorithm, timeout, check_desync);
  options.pairs = pairs;
  return options;
}

// More floats than one sync message may carry on this machine: three pieces and a bit.
std::size_t past_one_piece() {
  return 3 * (gradsync::gloo::largest_unread_send() / sizeof(float)) + 7;
}

}  // namespace

TEST_CASE("gloo sync pairs: the modes, and which algorithms they take") {
  CHECK(gradsync::gloo_pair_modes() == std::vector<std::string>{"async", "sync", "busy_poll"});
  gradsync::InMemoryStore store;
  auto config_error = [&](const gradsync::GlooOptions& options) {
    try {
      gradsync::make_gloo_communicator(store, 0, 1, options);
    } catch (const gradsync::ConfigError& e) {
      CHECK(e.key() == "comm.gloo_pairs");
      return std::string(e.what());
    }
    FAIL("expected a ConfigError for comm.gloo_pairs");
    return std::string();
  };
  CHECK(has(config_error(sync_options("ring", "sync")),
            "sync pairs take halving_doubling only (comm.algorithm): gloo's ring runs on unbound "
            "buffers, which only async pairs serve"));
  CHECK(has(config_error(sync_options("ring_chunked", "busy_poll")),
            "busy_poll pairs take halving_doubling only (comm.algorithm): ring_chunked keeps two "
            "messages in flight to a peer"));
  CHECK(has(config_error(sync_options("halving_doubling", "blocking")),
            "unknown mode 'blocking' (valid: async, sync, busy_poll)"));
}

TEST_CASE("gloo sync pairs: every collective is exact for 1..5 ranks and awkward lengths") {
  // 5 ranks: halving-doubling's binary blocks (4 + 1) send across blocks.
  const std::string algorithm = "halving_doubling";
  {
    for (int n = 1; n <= 5; ++n) {
      CAPTURE(n);
      // Empty, fewer than ranks, one more than the ranks, ~4 MB no n divides, several pieces.
      const std::vector<std::size_t> lengths = {0, 1, std::size_t(n + 1), 1000003,
                                                past_one_piece()};
      gradsync::InMemoryStore store;
      run_ranks(n, [&](int r) {
        auto comm = gradsync::make_gloo_communicator(store, r, n, sync_options(algorithm, "sync"));
        for (std::size_t length : lengths) check_collectives_once(*comm, length, n - 1);
        CHECK(comm->counters().collectives == 5 * lengths.size());
      });
    }
  }
}

TEST_CASE("gloo busy_poll pairs: exact at 2 ranks, and the ranks agree bit for bit") {
  const int n = 2;
  gradsync::InMemoryStore store;
  std::vector<std::vector<float>> noisy(n);
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_gloo_communicator(store, r, n,
                                                 sync_options("halving_doubling", "busy_poll"));
    for (std::size_t length : {std::size_t(0), std::size_t(3), past_one_piece()}) {
      check_collectives_once(*comm, length, 1);
    }
    noisy[std::size_t(r)] = noisy_data(r, 100003);
    comm->allreduce(noisy[std::size_t(r)], ReduceOp::kAvg);
  });
  CHECK(noisy[0] == noisy[1]);
}

TEST_CASE("gloo sync pairs: ranks agree bit for bit; 2 ranks average as TcpRing does") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    const auto [gloo, ring] =
        average_beside_ring(n, sync_options("halving_doubling", "sync"), past_one_piece());
    for (int r = 1; r < n; ++r) CHECK(gloo[std::size_t(r)] == gloo[0]);
    if (n == 2) CHECK(gloo[0] == ring[0]);  // two addends sum alike in either order
  }
}

TEST_CASE("gloo sync pairs: ranks whose hosts allow different pieces cut the smallest") {
  // As if rank 0's host had a 16 KiB net.core.wmem_max and the others 1 MiB: every rank must
  // cut the same pieces (each is a Gloo construction taking the same slots on every rank), or
  // their messages would meet the wrong buffers.
  for (int n : {2, 3}) {
    CAPTURE(n);
    gradsync::InMemoryStore store;
    run_ranks(n, [&](int r) {
      auto options = sync_options("halving_doubling", "sync", 10s);
      options.sync_piece_bytes = r == 0 ? 16 << 10 : 1 << 20;
      auto comm = gradsync::make_gloo_communicator(store, r, n, options);
      for (int round = 0; round < 3; ++round) check_collectives_once(*comm, 300007, n - 1);
    });
  }
}

TEST_CASE("gloo sync pairs: 64 MiB at 2 ranks completes: no message both peers wait on") {
  // Whole, halving-doubling's first message would be 32 MiB each way, written before either
  // reads: past Debian's default buffers (212992 bytes) and this VM's (4 MiB), both would block
  // until the timeout (measured with Gloo alone).
  const int n = 2;
  const std::size_t length = std::size_t(16) << 20;
  gradsync::InMemoryStore store;
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_gloo_communicator(store, r, n,
                                                 sync_options("halving_doubling", "sync", 10s));
    std::vector<float> data = rank_data(r, length);
    const auto start = Clock::now();
    comm->allreduce(data, ReduceOp::kSum);
    MESSAGE("rank " << r << ": 64 MiB in " << ms_since(start) << " ms");
    CHECK(wrong_elements(data, [&](std::size_t i) { return expected_sum(n, i); }) == 0);
  });
}

TEST_CASE("gloo sync pairs: a silent peer is a TimeoutError naming it, by the timeout") {
  // Rank 0 waits in the sync pair's read: for the peer's header (the check on), or its payload.
  for (const bool check : {true, false}) {
    CAPTURE(check);
    const int n = 2;
    gradsync::InMemoryStore store;
    Latch failed(1);
    run_ranks(n, [&](int r) {
      auto comm = gradsync::make_gloo_communicator(
          store, r, n, sync_options("halving_doubling", "sync", 1500ms, check));
      std::vector<float> data = rank_data(r, 100000);
      comm->allreduce(data, ReduceOp::kSum);
      if (r == 1) {
        CHECK(failed.wait(20s));  // alive, connections open, never issues #2
        return;
      }
      const auto start = Clock::now();
      const std::string message = error_of<gradsync::TimeoutError>(
          [&] { comm->allreduce(data, ReduceOp::kSum); }, "collective #2 should have timed out");
      failed.count_down();
      MESSAGE("rank 0 after " << ms_since(start) << " ms: " << message);
      CHECK(ms_since(start) >= 1400);
      CHECK(ms_since(start) < 6000);
      CHECK(has(message, "rank 1"));
      CHECK(has(message,
                "collective #2 allreduce sum of 100000 floats (gloo halving_doubling, "
                "sync pairs)"));
    });
  }
}

TEST_CASE("gloo sync pairs: the header round keeps the collective's deadline across peers") {
  // Rank 0 reads rank 1's header, which comes 1 s late, then rank 2's, which never comes: the
  // second read gets what is left of 2 s, not 2 s of its own.
  const int n = 3;
  gradsync::InMemoryStore store;
  Latch failed(2);
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_gloo_communicator(store, r, n,
                                                 sync_options("halving_doubling", "sync", 2000ms));
    std::vector<float> data = rank_data(r, 1000);
    comm->allreduce(data, ReduceOp::kSum);
    if (r == 2) {
      CHECK(failed.wait(20s));  // never issues #2
      return;
    }
    if (r == 1) std::this_thread::sleep_for(1000ms);
    const auto start = Clock::now();
    const std::string message = error_of<gradsync::TimeoutError>(
        [&] { comm->allreduce(data, ReduceOp::kSum); }, "collective #2 should have timed out");
    failed.count_down();
    MESSAGE("rank " << r << " after " << ms_since(start) << " ms: " << message);
    if (r == 0) {
      CHECK(ms_since(start) >= 1900);
      CHECK(ms_since(start) < 2800);  // by the deadline: not 1 s + 2 s
      CHECK(has(message, "rank 2"));
    }
  });
}

TEST_CASE("gloo sync pairs: a peer that aborts wakes the others' blocked reads at once") {
  const int n = 3;
  gradsync::InMemoryStore store;
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_gloo_communicator(
        store, r, n, sync_options("halving_doubling", "sync", 20s, false));
    std::vector<float> data = rank_data(r, 100000);
    comm->allreduce(data, ReduceOp::kSum);
    if (r == 1) {
      std::this_thread::sleep_for(300ms);  // the others block in #2's reads
      comm->abort("rank 1 failed: out of memory");
      return;
    }
    const auto start = Clock::now();
    const std::string message = error_of<gradsync::PeerError>(
        [&] { comm->allreduce(data, ReduceOp::kSum); }, "collective #2 should have failed");
    MESSAGE("rank " << r << " after " << ms_since(start) << " ms: " << message);
    CHECK(ms_since(start) < 5000);  // at once, not at the 20 s timeout
    CHECK(has(message, "rank 1 aborted: rank 1 failed: out of memory"));
  });
}

TEST_CASE("gloo sync pairs: abort and destruction wake this rank's own blocked read") {
  for (const bool destroy : {false, true}) {
    CAPTURE(destroy);
    const int n = 2;
    gradsync::InMemoryStore store;
    Latch done(1);
    run_ranks(n, [&](int r) {
      auto comm = gradsync::make_gloo_communicator(
          store, r, n, sync_options("halving_doubling", "sync", 20s, false));
      if (r == 1) {
        CHECK(done.wait(20s));  // issues nothing: rank 0 blocks reading from it
        return;
      }
      std::vector<float> a = rank_data(r, 1000), b = rank_data(r, 1000);
      auto running = comm->allreduce_async(a, ReduceOp::kSum);
      auto queued = comm->allreduce_async(b, ReduceOp::kSum);
      std::this_thread::sleep_for(300ms);
      const auto start = Clock::now();
      if (destroy) {
        comm.reset();
      } else {
        comm->abort("rank 0 is leaving");
      }
      const char* why = destroy ? "destroyed" : "this rank aborted: rank 0 is leaving";
      for (const auto& work : {running, queued}) {
        CHECK(has(error_of<gradsync::Error>([&] { work->wait(5s); }, "must fail"), why));
      }
      CHECK(ms_since(start) < 2000);
      done.count_down();
    });
  }
}
