// The shard in async and ssp modes, ShardState driven directly: pushes applied on arrival,
// staleness reported, and ssp's bound never exceeded.
#include <doctest/doctest.h>

#include <random>

#include "server/shard_state.h"
#include "tests/support/shard_driver.h"

using namespace gradsync;
using namespace gradsync::testing;
using namespace std::chrono_literals;

TEST_CASE("ps shard: async applies each chunk on arrival, ssp counts a step once all chunks came") {
  Log log;
  const std::uint64_t chunk = ParamStore::kChunkFloats, model = chunk + 10;  // 2 chunks
  SUBCASE("async: every chunk is answered as soon as it is applied") {
    ShardState state(options_for(2, model, Mode::kAsync, log), Clock::now());
    Driver d{state, model};
    d.start(2, 0.f);
    auto out = d.push_chunk(0, 0, 0, 1.f);
    REQUIRE(out.size() == 1);
    CHECK((out[0].header.key_begin == 0 && first_param(out[0]) == doctest::Approx(-0.1f)));
    CHECK(state.version() == 0);  // the step is not complete yet
    // Chunks of one step come together: step 1 before step 0's chunk 1 is refused.
    out = d.push_chunk(0, 1, 0, 1.f);
    REQUIRE(out.size() == 1);
    CHECK(error_text(out[0]) == "worker 0 pushed step 1 before every chunk of step 0 arrived");
    CHECK(d.push_chunk(0, 0, 1, 1.f).size() == 1);
    CHECK(state.version() == 1);
    CHECK(error_text(d.push_chunk(0, 0, 0, 1.f).at(0)) ==
          "worker 0 pushed step 0 after step 0: steps must increase");
  }
  SUBCASE("ssp s=0: the fast worker's step counts once complete, its reply waits for the slow") {
    ShardState state(options_for(2, model, Mode::kSsp, log, 0), Clock::now());
    Driver d{state, model};
    d.start(2, 0.f);
    d.pull(1);
    // Worker 0 would be ahead after step 0 (worker 1 is at 0): nothing answered, then held.
    CHECK(d.push_chunk(0, 0, 0, 1.f).empty());
    CHECK(d.push_chunk(0, 0, 1, 1.f).empty());
    CHECK(state.version() == 1);
    // Worker 1 is the slowest: each of its chunks is answered at once; its last one releases
    // worker 0's whole range.
    auto out = d.push_chunk(1, 0, 0, 1.f);
    REQUIRE(out.size() == 1);
    CHECK((out[0].peer == "w1" && out[0].header.key_begin == 0));
    out = d.push_chunk(1, 0, 1, 1.f);
    REQUIRE(out.size() == 3);
    CHECK((out[0].peer == "w1" && out[0].header.key_begin == chunk));
    CHECK((out[1].peer == "w0" && out[1].header.key_begin == 0 && out[2].peer == "w0"));
    for (const Outgoing& reply : out) CHECK(reply.header.aux == 0);
    CHECK(first_param(out[1]) == doctest::Approx(-0.2f));
  }
}

TEST_CASE("ps shard: async applies every push as its own step and reports staleness") {
  Log log;
  ShardState state(options_for(2, 4, Mode::kAsync, log), Clock::now());
  Driver d{state, 4};
  d.start(2, 0.f);
  CHECK(d.pull(1).size() == 1);
  // Worker 0 runs three steps while worker 1 computes its first.
  for (std::uint64_t step = 0; step < 3; ++step) {
    auto out = d.push(0, step, 1.f);
    REQUIRE(out.size() == 1);
    CHECK(out[0].header.aux == step);  // step t on params holding worker 1's steps < 0
  }
  auto out = d.push(1, 0, 10.f);
  CHECK((out.size() == 1 && out[0].header.aux == 0 && state.version() == 4));
  CHECK(state.params()[0] == doctest::Approx(-1.3f));  // no averaging: -0.1 * (1 + 1 + 1 + 10)
}

TEST_CASE("ps shard: ssp never lets a worker start more than s steps ahead of the slowest") {
  for (int s : {0, 1, 2}) {
    for (int world : {2, 3}) {
      CAPTURE(s);
      CAPTURE(world);
      Log log;
      ShardState state(options_for(world, 4, Mode::kSsp, log, s), Clock::now());
      Driver d{state, 4};
      d.start(world, 0.f);
      for (int r = 1; r < world; ++r) d.pull(r);
      // Each worker is computing (may push its next step) or waiting for its reply.
      std::vector<std::uint64_t> next(world, 0);
      std::vector<bool> waiting(world, false);
      std::mt19937 random(s * 10 + world);
      int held = 0;
      std::uint32_t worst = 0;
      for (int round = 0; round < 400; ++round) {
        const int pick = random() % (world + 2);
        const int r = pick >= world ? 0 : pick;  // worker 0 is scheduled 3 times as often
        if (waiting[r]) continue;
        waiting[r] = true;
        for (const Outgoing& out : d.push(r, next[r]++, 1.f)) {
          const int to = out.peer[1] - '0';
          REQUIRE(waiting[to]);
          waiting[to] = false;
          worst = std::max(worst, out.header.aux);
          // The bound: the step it starts now (next[to]) is at most s ahead of any worker's
          // clock (its pushes so far, all applied on arrival).
          for (int o = 0; o < world; ++o) CHECK(next[to] <= next[o] + s);
        }
        held += waiting[r] ? 1 : 0;
      }
      CHECK(worst <= static_cast<std::uint32_t>(s));
      CHECK(held > 0);
    }
  }
}
