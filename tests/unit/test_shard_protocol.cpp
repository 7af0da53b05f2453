// The parameter-server shard's protocol, ShardState driven directly on a fake clock: the
// handshake, malformed or misplaced chunks, garbage, and a worker that goes silent.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "server/shard_state.h"
#include "tests/support/shard_driver.h"

using namespace gradsync;
using namespace gradsync::testing;
using namespace std::chrono_literals;

TEST_CASE("ps shard: HELLO is acknowledged with the range, mismatches refused with the reason") {
  Log log;
  PsShardOptions o = options_for(4, 1024, Mode::kSync, log);
  o.shard = 1;
  o.shards = 2;
  ShardState state(o, Clock::now());
  Driver d{state, 1024};
  auto ack = d.hello(2, 4, 1024);
  REQUIRE(ack.size() == 1);
  CHECK(ack[0].header.type == MessageType::kHelloAck);
  CHECK(KeyRange{ack[0].header.key_begin, ack[0].header.key_end} == KeyRange{512, 1024});
  auto refused = [&](int rank, int world, std::uint64_t model) {
    auto out = d.hello(rank, world, model);
    REQUIRE(out.size() == 1);
    return error_text(out[0]);
  };
  CHECK(refused(1, 4, 1000) ==
        "worker 1: model has 1000 parameters, this shard serves a model of 1024");
  CHECK(refused(1, 3, 1024) == "worker 1: world size 3, this shard serves world size 4");
  CHECK(refused(4, 4, 1024) ==
        "worker 4: rank out of range, this shard serves world size 4 "
        "(ranks 0..3)");
  CHECK(refused(2, 4, 1024) == "worker 2: this connection already said HELLO as worker 2");
  wire::Header h = wire::make_header(MessageType::kHello, 2, 0, 0, 1024, 0, 4);
  CHECK(error_text(state.on_message("other", std::vector{header_frame(h)}, d.now)[0]) ==
        "worker 2: rank already connected");
  CHECK(log.has("shard 1: refused HELLO from 6f74686572: worker 2: rank already connected"));
  // Another wire version (a version-1 worker, which pushed whole ranges): decode_header refuses
  // it, yet the worker hears why.
  h.version = 1;
  CHECK(error_text(d.send(3, h)[0]) == "HELLO in wire version 1, this shard speaks version 4");
}

TEST_CASE("ps shard: a worker of another run is refused and logged; its heartbeats count for none") {
  Log log;
  PsShardOptions o = options_for(2, 16, Mode::kAsync, log);
  o.run_id = 0x1234abcd5678ef00;
  o.timeout = 1000ms;
  const auto t0 = Clock::now();
  ShardState state(o, t0);
  Driver d{state, 16, t0};
  auto hello = [&](int rank, std::uint64_t run_id) {
    return d.send(rank, wire::make_header(MessageType::kHello, rank, run_id, 0, 16, 0, 2));
  };
  // Another run's worker 1 (same world and model, the id alone differs): refused with the
  // reason, logged, and nothing else; the shard neither fails nor counts it as joined.
  auto out = hello(1, 0x1111);
  REQUIRE(out.size() == 1);
  CHECK(error_text(out[0]) ==
        "worker 1: of another run (run id 0000000000001111, this shard serves run "
        "1234abcd5678ef00)");
  CHECK(log.has("refused HELLO from 7731: worker 1: of another run"));
  CHECK(!state.failure());
  // This run's workers then join as if nothing had happened, worker 1 included.
  CHECK(hello(0, o.run_id).size() == 1);
  CHECK(hello(1, o.run_id).size() == 1);
  // A stranger's heartbeats under rank 1 do not keep this run's silent worker 1 alive.
  for (auto at : {t0 + 300ms, t0 + 600ms, t0 + 900ms, t0 + 1200ms}) {
    d.now = at;
    CHECK(d.send(0, wire::make_header(MessageType::kHeartbeat, 0, o.run_id, 0, 0, 0)).empty());
    CHECK(d.send(1, wire::make_header(MessageType::kHeartbeat, 1, 0x1111, 0, 0, 0)).empty());
  }
  CHECK(log.has("HEARTBEAT from 1 step 4369 keys [0, 0) payload 0 B aux 0: of another run"));
  state.on_tick(t0 + 1300ms);
  REQUIRE(state.failure());
  CHECK(state.failure()->rank == 1);
}

TEST_CASE("ps shard: misaligned chunk ranges and duplicate chunks are refused, the shard goes on") {
  Log log;
  const std::uint64_t chunk = ParamStore::kChunkFloats, model = 2 * chunk + 100;  // 3 chunks
  ShardState state(options_for(2, model, Mode::kSync, log), Clock::now());
  Driver d{state, model};
  d.start(2, 1.f);
  auto misaligned = [&](std::uint64_t begin, std::uint64_t end) {
    CAPTURE(begin);
    CAPTURE(end);
    const std::size_t before = log.size();
    CHECK(d.keys(MessageType::kPushPull, 0, 0, 1.f, KeyRange{begin, end}).empty());
    CHECK(log.size() == before + 1);
  };
  misaligned(1, chunk + 1);          // not on a chunk boundary
  misaligned(0, chunk - 1);          // a chunk cut short
  misaligned(0, 2 * chunk);          // two chunks in one push
  misaligned(chunk, model);          // from a boundary to the end: more than chunk 1
  misaligned(2 * chunk, model - 1);  // the last chunk cut short
  misaligned(0, model);              // the whole range: the old, unchunked push
  misaligned(model, model);          // an empty range at the end is no chunk
  CHECK(log.has("shard 0: rejected message from 7730: PUSHPULL from 0 step 0 keys [1, " +
                std::to_string(chunk + 1) + ")"));
  CHECK(log.has("keys are not a chunk of this shard's range [0, " + std::to_string(model) + ")"));
  CHECK(state.rejected() == 7);
  // A chunk pushed twice in one step: an ERROR to that worker, before and after the chunk was
  // averaged and answered; nothing else changes.
  CHECK(d.push_chunk(0, 0, 0, 1.f).empty());
  auto twice = d.push_chunk(0, 0, 0, 5.f);
  REQUIRE(twice.size() == 1);
  CHECK(error_text(twice[0]) == "worker 0 pushed chunk 0 of step 0 twice");
  CHECK(d.push_chunk(1, 0, 0, 3.f).size() == 2);  // chunk 0 complete: average of 1 and 3
  twice = d.push_chunk(1, 0, 0, 3.f);
  REQUIRE(twice.size() == 1);
  CHECK(error_text(twice[0]) == "worker 1 pushed chunk 0 of step 0 twice");
  CHECK(log.has("shard 0: worker 1 pushed chunk 0 of step 0 twice"));
  // The shard keeps serving: the step completes with the gradients first pushed.
  for (std::size_t c = 1; c < 3; ++c) {
    CHECK(d.push_chunk(0, 0, c, 1.f).empty());
    CHECK(d.push_chunk(1, 0, c, 3.f).size() == 2);
  }
  CHECK(state.version() == 1);
  CHECK(std::ranges::all_of(state.params(), [](float p) { return std::abs(p - 0.8f) < 1e-6f; }));
  CHECK(d.push(0, 1, 1.f).empty());
  CHECK(d.push(1, 1, 3.f).size() == 6);
  CHECK(!state.failure());
}

TEST_CASE("ps shard: garbage is logged once per message and never answered") {
  Log log;
  ShardState state(options_for(1, 8, Mode::kSync, log), Clock::now());
  Driver d{state, 8};
  d.start(1, 0.f);
  auto garbage = [&](std::vector<Buffer> frames, const std::string& peer = "w0") {
    const std::size_t before = log.size();
    CHECK(state.on_message(peer, frames, Clock::now()).empty());
    CHECK(log.size() == before + 1);
  };
  const auto push = wire::make_header(MessageType::kPushPull, 0, 0, 0, 8, 32);
  const Buffer good = header_frame(push), eight = floats_frame(8, 1.f);
  auto patched = [&](std::size_t at, std::uint8_t value) {
    std::vector<std::byte> copy(good.bytes.begin(), good.bytes.end());
    copy[at] = std::byte{value};
    return Buffer::copy_of(copy);
  };
  garbage({Buffer::copy_of(good.bytes.first(20))});  // truncated header
  garbage({patched(0, 'X'), eight});                 // magic
  garbage({patched(4, 9), eight});                   // version
  garbage({patched(47, 0x40), eight});               // payload_bytes far over the limit
  garbage({good, floats_frame(7, 1.f)});             // payload smaller than announced
  garbage({good});                                   // payload missing
  garbage({good, eight, eight});                     // three frames
  garbage({header_frame(wire::make_header(MessageType::kPushPull, 0, 0, 1, 8, 28)),
           floats_frame(7, 1.f)});     // not this shard's range
  garbage({good, eight}, "stranger");  // never said HELLO
  garbage({header_frame(wire::make_header(MessageType::kPushPull, 5, 0, 0, 8, 32)),
           eight});  // not the rank it said HELLO as
  garbage({header_frame(wire::make_header(MessageType::kReply, 0, 0, 0, 8, 32)), eight});
  garbage({header_frame(wire::make_header(MessageType::kHeartbeat, 7, 0, 0, 0, 0))});
  std::mt19937 random(7);
  for (int i = 0; i < 20; ++i) {
    std::vector<std::byte> noise(random() % 100);
    for (auto& b : noise) b = std::byte(random() & 0xFF);
    garbage({Buffer::copy_of(noise), Buffer::copy_of(noise)}, "noise");
  }
  CHECK(log.has("shard 0: rejected message from 7730: magic"));
  CHECK(log.has("keys are not a chunk of this shard's range [0, 8) (chunks of " +
                std::to_string(wire::kChunkKeys) + " keys"));
  CHECK(log.has("shard 0: rejected message from 7374"));
  CHECK((state.params()[0] == 0.f && state.version() == 0));
  CHECK(d.push(0, 0, 1.f).size() == 1);  // and it still works
}

TEST_CASE("ps shard: a silent worker ends a sync run, async may drop it and go on") {
  Log log;
  const auto t0 = Clock::now();
  ShardState sync(options_for(2, 4, Mode::kSync, log), t0);
  Driver d{sync, 4, t0};
  d.start(2, 0.f);
  d.now = t0 + 400ms;
  d.push(0, 0, 1.f);
  CHECK(sync.on_tick(t0 + 450ms).empty());
  auto out = sync.on_tick(t0 + 600ms);  // worker 1: last seen at t0, timeout 500 ms
  REQUIRE(out.size() == 2);
  CHECK(error_text(out[0]) == "worker 1 (last seen 0.6 s ago) stopped sending: ending the run");
  CHECK((sync.failure() && sync.failure()->rank == 1 && sync.failure()->timeout));

  PsShardOptions o = options_for(2, 4, Mode::kAsync, log);
  o.continue_without_dead_workers = true;
  ShardState async(o, t0);
  Driver a{async, 4, t0};
  a.start(2, 0.f);
  a.now = t0 + 400ms;
  a.push(0, 0, 1.f);
  CHECK((async.on_tick(t0 + 600ms).empty() && !async.failure()));
  CHECK(log.has("worker 1 (last seen 0.6 s ago) stopped sending: dropped"));
  CHECK(a.push(0, 1, 1.f).size() == 1);
  a.send(0, wire::make_header(MessageType::kBye, 0, 0, 0, 0, 0));
  CHECK(async.finished());

  ShardState lonely(options_for(2, 4, Mode::kSync, log), t0);
  Driver{lonely, 4, t0}.hello(0, 2, 4);
  lonely.on_tick(t0 + 600ms);
  CHECK((lonely.failure() &&
         lonely.failure()->problem == "worker(s) 1 did not say HELLO within 0.5 s"));
}

// Async workers finish on their own: one that falls silent after the others said BYE is dropped
// and the run is done (they trained it to the end); a silent one whose only peers were dropped
// ends it.
TEST_CASE("ps shard: async drops a worker silent after the others finished, not the last trainer") {
  Log log;
  const auto t0 = Clock::now();
  PsShardOptions o = options_for(3, 4, Mode::kAsync, log);
  o.continue_without_dead_workers = true;

  ShardState done(o, t0);
  Driver d{done, 4, t0};
  d.start(3, 0.f);
  d.now = t0 + 100ms;
  d.push(0, 0, 1.f);
  d.push(1, 0, 1.f);
  d.send(0, wire::make_header(MessageType::kBye, 0, 0, 0, 0, 0));
  d.send(1, wire::make_header(MessageType::kBye, 1, 0, 0, 0, 0));
  CHECK(!done.finished());  // worker 2 still connected, silent since t0
  CHECK((done.on_tick(t0 + 600ms).empty() && !done.failure()));
  CHECK(log.has("worker 2 (last seen 0.6 s ago) stopped sending: dropped"));
  CHECK(done.finished());

  ShardState alone(o, t0);
  Driver a{alone, 4, t0};
  a.start(3, 0.f);
  a.now = t0 + 400ms;
  a.push(0, 0, 1.f);
  CHECK(alone.on_tick(t0 + 600ms).empty());  // workers 1 and 2 dropped: worker 0 trains on
  CHECK(!alone.failure());
  alone.on_tick(t0 + 1000ms);  // now worker 0 too, with nobody left to train or done
  REQUIRE(alone.failure());
  CHECK(alone.failure()->rank == 0);
}

// A worker whose training thread is stuck still heartbeats: the shard names it once the others
// waited on it for the timeout (500 ms here), instead of letting each of them time out alone.
TEST_CASE("ps shard: a worker alive but not pushing is named once the others waited too long") {
  Log log;
  const auto t0 = Clock::now();
  auto heartbeat = [](Driver& d, int rank, Clock::time_point at) {
    d.now = at;
    CHECK(d.send(rank, wire::make_header(MessageType::kHeartbeat, rank, 0, 0, 0, 0)).empty());
  };

  SUBCASE("sync: the step's missing push, timed from when the others began to wait") {
    ShardState state(options_for(2, 4, Mode::kSync, log), t0);
    Driver d{state, 4, t0};
    d.start(2, 0.f);
    d.now = t0 + 100ms;
    CHECK(d.push(0, 0, 1.f).empty());  // step 0: worker 0 first, then it waits 350 ms
    d.now = t0 + 450ms;
    CHECK(d.push(1, 0, 1.f).size() == 2);
    d.now = t0 + 460ms;
    CHECK(d.push(1, 1, 1.f).empty());  // step 1: worker 1 waits for worker 0 from here
    heartbeat(d, 0, t0 + 700ms);
    heartbeat(d, 1, t0 + 700ms);
    // Worker 0's last push is 600 ms old, but it spent 350 ms of that waiting itself: worker 1
    // has waited 240 ms only. Not yet.
    CHECK(state.on_tick(t0 + 700ms).empty());
    heartbeat(d, 0, t0 + 950ms);
    heartbeat(d, 1, t0 + 950ms);
    const auto out = state.on_tick(t0 + 1000ms);  // worker 1 has waited 540 ms
    REQUIRE(out.size() == 2);                     // both workers hear why
    CHECK(error_text(out[1]) ==
          "step 1 waits for worker(s) 0, alive but with no push for over 0.5 s: ending the run");
    REQUIRE(state.failure());
    CHECK((state.failure()->rank == 0 && state.failure()->timeout));
  }
  SUBCASE("sync: a worker silent for half the timeout is left to the silence check") {
    ShardState state(options_for(2, 4, Mode::kSync, log), t0);
    Driver d{state, 4, t0};
    d.start(2, 0.f);
    d.now = t0 + 100ms;
    CHECK(d.push(0, 0, 1.f).empty());
    heartbeat(d, 0, t0 + 550ms);
    heartbeat(d, 1, t0 + 300ms);                 // then nothing: it may have died
    CHECK(state.on_tick(t0 + 650ms).empty());    // waited 550 ms, but worker 1 silent 350 ms
    const auto out = state.on_tick(t0 + 850ms);  // silent 550 ms: the silence check's case
    REQUIRE(out.size() == 2);
    CHECK(error_text(out[0]) == "worker 1 (last seen 0.55 s ago) stopped sending: ending the run");
  }
  SUBCASE("rank 0's INIT, unless it may still be queued on an emulated link") {
    ShardState state(options_for(2, 4, Mode::kSync, log), t0);
    Driver d{state, 4, t0};
    REQUIRE(d.hello(0, 2, 4).size() == 1);
    REQUIRE(d.hello(1, 2, 4).size() == 1);
    d.now = t0 + 100ms;
    CHECK(d.pull(1).empty());  // held until INIT
    heartbeat(d, 0, t0 + 550ms);
    heartbeat(d, 1, t0 + 550ms);
    std::vector<Outgoing> out;
    state.on_tick(
        t0 + 700ms, [&](Outgoing&& o) { out.push_back(std::move(o)); }, true);
    CHECK((out.empty() && !state.failure()));
    out = state.on_tick(t0 + 700ms);
    REQUIRE(out.size() == 2);
    CHECK(error_text(out[0]) ==
          "worker 0 did not send the initial parameters (INIT) within 0.5 s of the first "
          "request waiting for them: ending the run");
    CHECK((state.failure() && state.failure()->rank == 0));
  }
  SUBCASE("rank 0's INIT is due from its HELLO, however long the others waited before it") {
    ShardState state(options_for(2, 4, Mode::kSync, log), t0);
    Driver d{state, 4, t0};
    REQUIRE(d.hello(1, 2, 4).size() == 1);
    d.now = t0 + 100ms;
    CHECK(d.pull(1).empty());  // held until INIT
    heartbeat(d, 1, t0 + 400ms);
    d.now = t0 + 450ms;
    REQUIRE(d.hello(0, 2, 4).size() == 1);  // a slow start: its INIT is on its way
    heartbeat(d, 1, t0 + 700ms);
    CHECK(state.on_tick(t0 + 700ms).empty());  // worker 1 waited 600 ms, rank 0 is here 250 ms
    heartbeat(d, 0, t0 + 900ms);
    heartbeat(d, 1, t0 + 900ms);
    const auto out = state.on_tick(t0 + 1000ms);  // rank 0: 550 ms since its HELLO
    REQUIRE(out.size() == 2);
    CHECK(error_text(out[0]) ==
          "worker 0 did not send the initial parameters (INIT) within 0.5 s of the first "
          "request waiting for them: ending the run");
  }
  SUBCASE("ssp: the slowest worker a held reply waits for") {
    ShardState state(options_for(2, 4, Mode::kSsp, log, 0), t0);
    Driver d{state, 4, t0};
    d.start(2, 0.f);
    d.now = t0 + 100ms;
    CHECK(d.push(0, 0, 1.f).empty());  // staleness 0: held until worker 1 pushes step 0
    heartbeat(d, 0, t0 + 550ms);
    heartbeat(d, 1, t0 + 550ms);
    CHECK(state.on_tick(t0 + 580ms).empty());  // held for 480 ms only
    const auto out = state.on_tick(t0 + 650ms);
    REQUIRE(out.size() == 2);
    CHECK(error_text(out[0]) ==
          "worker 0 waits at step 1 (staleness bound 0) for worker(s) 1, alive but with no push "
          "for over 0.5 s: ending the run");
    CHECK((state.failure() && state.failure()->rank == 1));
  }
}
