// The shard in sync mode (bulk-synchronous), ShardState driven directly: every push averaged
// once, replies chunk by chunk as soon as each chunk is updated, checkpoints and resuming.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "common/checkpoint_file.h"
#include "server/shard_state.h"
#include "tests/support/shard_driver.h"

using namespace gradsync;
using namespace gradsync::testing;
using namespace std::chrono_literals;

TEST_CASE("ps shard: sync averages all N pushes once, holds PULL until INIT") {
  Log log;
  ShardState state(options_for(3, 10, Mode::kSync, log), Clock::now());
  Driver d{state, 10};
  for (int r = 0; r < 3; ++r) REQUIRE(d.hello(r, 3, 10).size() == 1);
  // Rank 2 pulls before rank 0's INIT: held, then answered right after the INIT's ack.
  CHECK(d.pull(2).empty());
  auto out = d.init(1.f);
  REQUIRE(out.size() == 2);
  // INIT's ack carries no parameters; the held PULL's reply does.
  CHECK((out[0].header.type == MessageType::kReply && out[0].header.payload_bytes == 0));
  CHECK((out[1].peer == "w2" && first_param(out[1]) == 1.f));
  for (std::uint64_t step = 0; step < 3; ++step) {
    CHECK(d.push(2, step, 3.f).empty());  // arrival order does not matter
    CHECK(d.push(0, step, 1.f).empty());
    out = d.push(1, step, 2.f);
    REQUIRE(out.size() == 3);
    for (const Outgoing& reply : out)
      CHECK((reply.header.step == step + 1 && reply.header.aux == 0));
  }
  CHECK(state.params()[9] == doctest::Approx(0.4f));  // mean 2, lr 0.1, 3 steps: 1 - 3 * 0.2
  // A push for the wrong step is answered with an ERROR, not parameters.
  CHECK(error_text(d.push(0, 7, 1.f).at(0)).find("pushed step 7, this shard is at step 3") !=
        std::string::npos);
}

TEST_CASE("ps shard: INIT and PULLs wait at the start gate until every worker said HELLO") {
  // Each worker's first exchange then ends after all have joined, whichever started first:
  // the common moment workers under other launchers take as time zero.
  Log log;
  ShardState state(options_for(3, 10, Mode::kAsync, log), Clock::now());
  Driver d{state, 10};
  REQUIRE(d.hello(0, 3, 10).size() == 1);
  REQUIRE(d.hello(2, 3, 10).size() == 1);
  CHECK(d.init(1.f).empty());  // held: worker 1 has not joined
  CHECK(d.pull(2).empty());
  const auto out = d.hello(1, 3, 10);
  REQUIRE(out.size() == 3);
  CHECK((out[0].peer == "w1" && out[0].header.type == MessageType::kHelloAck));
  CHECK((out[1].peer == "w0" && out[1].header.type == MessageType::kReply &&
         out[1].header.payload_bytes == 0));  // INIT's ack
  CHECK((out[2].peer == "w2" && first_param(out[2]) == 1.f));
  // A second INIT while the first is held is refused as one.
  Log log2;
  ShardState gated(options_for(2, 10, Mode::kSync, log2), Clock::now());
  Driver g{gated, 10};
  REQUIRE(g.hello(0, 2, 10).size() == 1);
  CHECK(g.init(1.f).empty());
  CHECK(error_text(g.init(1.f).at(0)).find("INIT again") != std::string::npos);
}

TEST_CASE("ps shard: sync checkpoints its range, and a shard resumed from it goes on without INIT") {
  // Two runs of 4 steps with momentum: one straight through, one that stops after step 2 and is
  // resumed by a fresh shard from the step-2 checkpoint. Both must end with the same parameters.
  const std::filesystem::path root = std::filesystem::temp_directory_path() /
                                     ("gradsync_shard_ckpt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  const std::uint64_t model = 2 * ParamStore::kChunkFloats + 20;  // two chunks per shard
  Log log;
  auto options = [&](std::int64_t every) {
    PsShardOptions o = options_for(2, model, Mode::kSync, log);
    o.shard = 1;
    o.shards = 2;
    o.sgd = {0.1, 0.9, 0.0};
    o.checkpoint_every = every;
    o.checkpoint_last_step = 4;
    o.checkpoint_root = root.string();
    o.checkpoint_description = "test model";
    return o;
  };
  auto run = [&](ShardState& state, std::uint64_t from, std::uint64_t to, bool init) {
    Driver d{state, model};
    for (int r = 0; r < 2; ++r) REQUIRE(d.hello(r, 2, model).size() == 1);
    if (init) REQUIRE(!d.init(1.f).empty());
    for (std::uint64_t step = from; step < to; ++step) {
      CHECK(d.push(0, step, 0.5f + static_cast<float>(step)).empty());
      CHECK(d.push(1, step, 1.f).size() == 2 * chunk_ranges(state.range()).size());
    }
    return std::vector<float>(state.params().begin(), state.params().end());
  };
  ShardState straight(options(0), Clock::now());
  const std::vector<float> expected = run(straight, 0, 4, true);

  ShardState first(options(2), Clock::now());
  run(first, 0, 4, true);  // writes steps 2 and 4 (the last)
  const std::string step2 = gradsync::checkpoint_step_folder(root.string(), 2);
  const gradsync::CheckpointPart part =
      gradsync::read_checkpoint_part(step2 + "/" + gradsync::checkpoint_part_name(1, 2));
  CHECK(part.step == 2);
  CHECK(part.optimizer_steps == 2);
  CHECK((part.begin == first.range().begin && part.end == first.range().end));
  CHECK(part.description == "test model");
  CHECK(std::filesystem::exists(gradsync::checkpoint_step_folder(root.string(), 4)));

  PsShardOptions resumed_options = options(0);
  resumed_options.resume =
      PsShardOptions::Start{part.step, part.optimizer_steps, part.params, part.momentum};
  ShardState resumed(resumed_options, Clock::now());
  CHECK(resumed.version() == 2);
  CHECK(resumed.initialised());
  const std::vector<float> got = run(resumed, 2, 4, false);
  CHECK(got == expected);  // bit for bit: same averages, same momentum
  std::filesystem::remove_all(root);
}

TEST_CASE("ps shard: a large range is answered in chunks, each sent as soon as it is updated") {
  Log log;
  const std::uint64_t chunk = ParamStore::kChunkFloats, model = 5 * chunk;
  PsShardOptions o = options_for(2, model, Mode::kSync, log);
  o.shard = 1;
  o.shards = 2;
  ShardState state(o, Clock::now());
  Driver d{state, model};
  d.start(2, 1.f);
  d.push(0, 0, 1.f);
  const auto out = d.push(1, 0, 3.f);
  // 2.5 chunks: three REPLYs per worker, chunk by chunk, tiling [2.5, 5) chunks in order.
  // Shard 1 answers worker 1 first (shard k starts at rank k mod N, spreading the replies of
  // K shards over the workers' links).
  REQUIRE(out.size() == 6);
  std::uint64_t at = state.range().begin;
  for (std::size_t i = 0; i < out.size(); i += 2) {
    CHECK((out[i].peer == "w1" && out[i + 1].peer == "w0"));
    CHECK((out[i].header.key_begin == at && out[i + 1].header.key_begin == at));
    CHECK(out[i].payload.bytes.data() == out[i + 1].payload.bytes.data());  // shared, no copy
    CHECK(first_param(out[i]) == doctest::Approx(0.8f));                    // 1 - 0.1 * 2
    at = out[i].header.key_end;
  }
  CHECK(at == state.range().end);
  CHECK(state.store().copies_on_write() == 0);
  // The next update finds these replies still held (as if ZeroMQ were still sending them):
  // it writes a copy instead of the bytes under them.
  d.push(0, 1, 1.f);
  CHECK(d.push(1, 1, 1.f).size() == 6);
  CHECK(state.store().copies_on_write() == 1);
  CHECK(first_param(out[0]) == doctest::Approx(0.8f));
}

TEST_CASE("ps shard: sync answers chunk 0 of a step before the step's last chunk is pushed") {
  Log log;
  const std::uint64_t chunk = ParamStore::kChunkFloats, model = 2 * chunk + 100;  // 3 chunks
  ShardState state(options_for(2, model, Mode::kSync, log), Clock::now());
  Driver d{state, model};
  d.start(2, 1.f);
  for (std::uint64_t step = 0; step < 2; ++step) {
    // Worker 0 pushes its whole step; worker 1 only chunk 0 so far: chunk 0 is complete.
    for (std::size_t c = 0; c < 3; ++c) CHECK(d.push_chunk(0, step, c, 1.f).empty());
    auto out = d.push_chunk(1, step, 0, 3.f);
    REQUIRE(out.size() == 2);  // chunk 0 to both workers, at once
    for (const Outgoing& reply : out) {
      CHECK((reply.header.type == MessageType::kReply && reply.header.key_begin == 0 &&
             reply.header.key_end == chunk && reply.header.step == step + 1));
    }
    CHECK((out[0].peer == "w0" && out[1].peer == "w1"));
    CHECK(first_param(out[0]) == doctest::Approx(1.f - 0.2f * (step + 1)));  // mean 2, lr 0.1
    // ...while chunks 1 and 2 are not: the step is not over, chunk 1 still waits for worker 1.
    CHECK(state.version() == step);
    CHECK(state.params()[chunk] == doctest::Approx(1.f - 0.2f * step));
    out = d.push_chunk(1, step, 1, 3.f);
    REQUIRE(out.size() == 2);
    CHECK(out[0].header.key_begin == chunk);
    CHECK(state.version() == step);
    out = d.push_chunk(1, step, 2, 3.f);  // the last chunk ends the step
    REQUIRE(out.size() == 2);
    CHECK((out[1].header.key_begin == 2 * chunk && out[1].header.key_end == model));
    CHECK(state.version() == step + 1);
  }
  // Every chunk saw the same two steps: identical to a whole-range average.
  CHECK(std::ranges::all_of(state.params(), [](float p) { return std::abs(p - 0.6f) < 1e-6f; }));
  CHECK(log.size() == 0);
}
