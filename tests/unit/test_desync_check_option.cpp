// comm.desync_check reaches the backends through make_communicator: over gloo, ranks that issue
// allreduces of different sizes fail at once with a desync naming both sizes when it is on, and
// wait out the timeout when it is off (the header exchange is the whole difference).
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "allreduce/in_memory_store.h"
#include "allreduce/make_communicator.h"
#include "common/error.h"
#include "tests/support/ring_ranks.h"

using namespace gradsync::testing;
using namespace std::chrono_literals;

#ifdef GRADSYNC_HAVE_GLOO
TEST_CASE("comm.desync_check: on, gloo names the mismatch at once; off, it times out") {
  for (const bool check : {true, false}) {
    CAPTURE(check);
    gradsync::InMemoryStore store;
    run_ranks(2, [&](int r) {
      gradsync::CommunicatorOptions options;
      options.backend = "gloo";
      options.tcp.timeout = 1000ms;
      options.desync_check = check;
      auto comm = gradsync::make_communicator(store, r, 2, options);
      std::vector<float> data = rank_data(r, r == 0 ? 1000 : 2000);
      const auto began = std::chrono::steady_clock::now();
      std::string message;
      bool timed_out = false;
      try {
        comm->allreduce(data, gradsync::ReduceOp::kSum);
      } catch (const gradsync::TimeoutError& e) {
        timed_out = true;
        message = e.what();
      } catch (const gradsync::Error& e) {
        message = e.what();
      }
      const auto took = std::chrono::steady_clock::now() - began;
      if (check) {
        CHECK(!timed_out);
        CHECK(message.find("desync") != std::string::npos);
        CAPTURE(message);
        CHECK(message.find("of 1000 floats") != std::string::npos);
        CHECK(message.find("of 2000 floats") != std::string::npos);
        CHECK(took < 900ms);
      } else {
        CHECK(timed_out);
        CHECK(took >= 900ms);
      }
    });
  }
}
#endif
