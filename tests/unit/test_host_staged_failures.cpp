// How the host-staged communicator (strategies/allreduce/host_staged_communicator.h) fails: a
// rank that never issues a collective makes the other time out with the host communicator's
// error, and abort or destruction end the collectives in flight at once, the device buffers
// left as they were. Two ranks as two threads on GPU 0 (tcp, and gloo where the build has it);
// skips without a GPU.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "allreduce/in_memory_store.h"
#include "common/error.h"
#include "gpu_test_support.h"
#include "model/cuda/cuda_device.h"
#include "tests/support/error_checks.h"
#include "tests/support/host_staged_support.h"
#include "tests/support/ring_ranks.h"

using namespace gradsync::testing;
using namespace gradsync::testing::host_staged;
using namespace std::chrono_literals;
using gradsync::ReduceOp;
using gradsync::Work;

TEST_CASE(
    "host-staged communicator: a rank that never issues the collective makes the other "
    "time out, with the host communicator's error") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  for (const std::string& backend : host_backends()) {
    CAPTURE(backend);
    const int n = 2;
    const auto timeout = 1000ms;
    gradsync::InMemoryStore store;
    Latch failed(1);
    run_ranks(
        n,
        [&](int r) {
          gradsync::cuda::DeviceGuard on(0);
          auto comm = staged(store, r, n, backend, nullptr, timeout);
          const std::vector<float> values = noisy_data(r, 10000);
          auto device = garbage(values.size());
          upload(device.span(), values);
          comm->allreduce(device.span(), ReduceOp::kAvg);  // #1 succeeds on both
          if (r == 1) {
            // Rank 1 stays alive, connections open, but never issues #2.
            CHECK(failed.wait(30s));
            return;
          }
          upload(device.span(), values);
          const auto start = Clock::now();
          std::string message;
          try {
            comm->allreduce(device.span(), ReduceOp::kAvg);
            FAIL_CHECK("collective #2 should have timed out");
          } catch (const gradsync::TimeoutError& e) {
            message = e.what();
            // TcpRing knows whom it waited for; Gloo's own message names no peer with 2 ranks.
            if (backend == "tcp") CHECK(e.rank() == 1);
          }
          const auto elapsed = ms_since(start);
          failed.count_down();
          MESSAGE(backend << ": rank 0 after " << elapsed << " ms: " << message);
          CHECK(elapsed >= 900);
          CHECK(elapsed < 1000 + 2000 + 5000);  // timeout, the ring's report grace, slack
          CHECK(has(message, "collective #2 allreduce avg of 10000 floats"));
          CHECK(has(message, "timed out after 1000 ms"));
          if (backend == "tcp") CHECK(has(message, "waiting for rank 1"));
          // The buffer was not written by a failed collective: it holds what was uploaded.
          CHECK(download(device.span()) == values);
          // The communicator is now unusable, and says why, at once.
          const auto again = Clock::now();
          CHECK(error_of<gradsync::TimeoutError>([&] { comm->barrier(); }, "still failed") ==
                message);
          CHECK(ms_since(again) < 500);
        },
        60s);
  }
}

TEST_CASE(
    "host-staged communicator: abort and destruction end the collectives in flight at "
    "once, and leave the device buffers alone") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  for (const std::string& backend : host_backends()) {
    CAPTURE(backend);
    const int n = 2;
    gradsync::InMemoryStore store;
    Latch done(1);
    run_ranks(
        n,
        [&](int r) {
          gradsync::cuda::DeviceGuard on(0);
          // A long timeout: nothing below may take it.
          auto comm = staged(store, r, n, backend, nullptr, 20s);
          const std::vector<float> values = noisy_data(r, 10000);
          auto device = garbage(values.size());
          upload(device.span(), values);
          comm->allreduce(device.span(), ReduceOp::kAvg);  // #1 succeeds on both
          if (r == 1) {
            CHECK(done.wait(30s));  // never issues #2
            return;
          }
          upload(device.span(), values);
          // Abort: the running collective (waiting for rank 1) and those queued behind it fail
          // at once, naming the reason.
          std::vector<std::shared_ptr<Work>> works;
          for (std::size_t k = 0; k < 3; ++k) {
            works.push_back(
                comm->allreduce_async(device.span().subspan(k * 1000, 1000), ReduceOp::kAvg));
          }
          std::this_thread::sleep_for(100ms);  // the first is running by now
          const auto start = Clock::now();
          comm->abort("rank 0 failed: results/metrics.csv: No space left on device");
          for (const auto& work : works) {
            CHECK(has(error_of<gradsync::Error>([&] { work->wait(comm->timeout()); },
                                                "an aborted collective must fail"),
                      "No space left on device"));
          }
          CHECK(ms_since(start) < 3000);
          CHECK(download(device.span()) == values);
          // Destruction with a collective in flight (here failing) returns at once too.
          auto late = comm->allreduce_async(device.span(), ReduceOp::kAvg);
          const auto destroyed = Clock::now();
          comm.reset();
          CHECK(ms_since(destroyed) < 3000);
          CHECK_THROWS_AS(late->wait(1s), gradsync::Error);
          CHECK(download(device.span()) == values);
          done.count_down();
        },
        60s);
  }
  // A communicator destroyed while its collective waits for a peer (not aborted first) does
  // not wait for that peer's timeout either.
  for (const std::string& backend : host_backends()) {
    CAPTURE(backend);
    const int n = 2;
    gradsync::InMemoryStore store;
    Latch done(1);
    run_ranks(
        n,
        [&](int r) {
          gradsync::cuda::DeviceGuard on(0);
          auto comm = staged(store, r, n, backend, nullptr, 20s);
          const std::vector<float> values = noisy_data(r, 10000);
          auto device = garbage(values.size());
          upload(device.span(), values);
          comm->allreduce(device.span(), ReduceOp::kAvg);
          if (r == 1) {
            CHECK(done.wait(30s));
            return;
          }
          upload(device.span(), values);
          auto work = comm->allreduce_async(device.span(), ReduceOp::kAvg);
          std::this_thread::sleep_for(100ms);
          const auto start = Clock::now();
          comm.reset();
          CHECK(ms_since(start) < 3000);
          CHECK_THROWS_AS(work->wait(1s), gradsync::Error);
          CHECK(download(device.span()) == values);
          done.count_down();
        },
        60s);
  }
}
