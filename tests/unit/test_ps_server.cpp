// The parameter-server shard. ShardState driven directly, on a fake clock: handshake, sync,
// chunked replies, garbage, async, ssp, liveness. Then a live PsShard on a thread fed garbage by
// a raw DEALER while two real workers train. (A live silent worker: test_ps_client.cpp.)
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <zmq.hpp>

#include "common/checkpoint_file.h"
#include "server/ps_client.h"
#include "server/ps_shard.h"
#include "server/shard_state.h"

using namespace gradsync;
using namespace std::chrono_literals;
using wire::MessageType;
using Clock = std::chrono::steady_clock;
using Mode = PsShardOptions::Mode;

namespace {

// The shard's log lines, written from its threads, read by the test.
struct Log {
  std::mutex mutex;
  std::string text;
  std::size_t lines = 0;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::scoped_lock lock(mutex);
      text += line + "\n";
      ++lines;
    };
  }
  bool has(const std::string& needle) {
    std::scoped_lock lock(mutex);
    return text.find(needle) != std::string::npos;
  }
  std::size_t size() {
    std::scoped_lock lock(mutex);
    return lines;
  }
};

PsShardOptions options_for(int world, std::uint64_t model, Mode mode, Log& log, int s = 0) {
  PsShardOptions o;
  o.world_size = world;
  o.model_size = model;
  o.mode = mode;
  o.staleness = s;
  o.sgd = {0.1, 0.0, 0.0};
  o.timeout = 500ms;
  o.log = log.sink();
  return o;
}

Buffer header_frame(const wire::Header& h) {
  std::array<std::byte, wire::kHeaderBytes> bytes;
  wire::encode_header(h, bytes);
  return Buffer::copy_of(bytes);
}

Buffer floats_frame(std::size_t n, float value) {
  std::vector<float> v(n, value);
  return Buffer::copy_of(std::as_bytes(std::span<const float>(v)));
}

// Plays workers against one ShardState; worker r's connection is called "w<r>".
struct Driver {
  ShardState& state;
  std::uint64_t model;
  Clock::time_point now = Clock::now();

  std::vector<Outgoing> send(int rank, const wire::Header& h, std::optional<Buffer> payload = {}) {
    std::vector<Buffer> frames{header_frame(h)};
    if (payload) frames.push_back(*payload);
    const std::string peer{'w', static_cast<char>('0' + rank)};  // ranks < 10 here
    return state.on_message(peer, frames, now);
  }
  std::vector<Outgoing> hello(int rank, int world, std::uint64_t model_size) {
    return send(rank, wire::make_header(MessageType::kHello, rank, 0, 0, model_size, 0, world));
  }
  std::vector<Outgoing> keys(MessageType type, int rank, std::uint64_t step = 0, float v = 0,
                             std::optional<KeyRange> range = {}) {
    const KeyRange r = range.value_or(state.range());
    const bool floats = type != MessageType::kPull;
    const auto h = wire::make_header(type, rank, step, r.begin, r.end, floats ? 4 * r.size() : 0);
    return floats ? send(rank, h, floats_frame(r.size(), v)) : send(rank, h);
  }
  std::vector<Outgoing> init(float value) { return keys(MessageType::kInit, 0, 0, value); }
  std::vector<Outgoing> pull(int rank) { return keys(MessageType::kPull, rank); }
  // One PUSHPULL of chunk c (wire_format.h: a push carries one chunk of the shard's range).
  std::vector<Outgoing> push_chunk(int rank, std::uint64_t step, std::size_t c, float value) {
    return keys(MessageType::kPushPull, rank, step, value, chunk_ranges(state.range()).at(c));
  }
  // A whole push_pull: every chunk in order, as PsClient sends them; all the replies caused.
  std::vector<Outgoing> push(int rank, std::uint64_t step, float value) {
    std::vector<Outgoing> all;
    for (std::size_t c = 0; c < chunk_ranges(state.range()).size(); ++c) {
      for (Outgoing& out : push_chunk(rank, step, c, value)) all.push_back(std::move(out));
    }
    return all;
  }
  // Every rank says HELLO, then rank 0 sends INIT with `value` everywhere.
  void start(int world, float value) {
    for (int r = 0; r < world; ++r) REQUIRE(hello(r, world, model).size() == 1);
    REQUIRE(!init(value).empty());
  }
};

std::string error_text(const Outgoing& out) {
  REQUIRE(out.header.type == MessageType::kError);
  return {reinterpret_cast<const char*>(out.payload.bytes.data()), out.payload.size()};
}

float first_param(const Outgoing& out) {
  return *reinterpret_cast<const float*>(out.payload.bytes.data());
}

}  // namespace

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
  CHECK(error_text(d.send(3, h)[0]) ==
        "HELLO in wire version 1, this shard speaks version 2");
}

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

TEST_CASE("ps shard: sync checkpoints its range; a shard resumed from it goes on without INIT") {
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
  resumed_options.resume = PsShardOptions::Start{part.step, part.optimizer_steps, part.params,
                                                 part.momentum};
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
  for (std::size_t i = 0; i < model; i += 9973) CHECK(state.params()[i] == doctest::Approx(0.6f));
  CHECK(log.size() == 0);
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
  for (std::size_t i = 0; i < model; i += 9973) CHECK(state.params()[i] == doctest::Approx(0.8f));
  CHECK(d.push(0, 1, 1.f).empty());
  CHECK(d.push(1, 1, 3.f).size() == 6);
  CHECK(!state.failure());
}

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
  CHECK(log.has("keys are not a chunk of this shard's range [0, 8) (chunks of " + std::to_string(wire::kChunkKeys) + " keys"));
  CHECK(log.has("shard 0: rejected message from 7374"));
  CHECK((state.params()[0] == 0.f && state.version() == 0));
  CHECK(d.push(0, 0, 1.f).size() == 1);  // and it still works
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

TEST_CASE("ps shard: a live shard logs and ignores garbage while two workers train exactly") {
  Log log;
  PsShardOptions o = options_for(2, 1000, Mode::kSync, log);
  o.timeout = 3s;
  PsShard shard(o);
  const std::string endpoint = shard.endpoint();
  CHECK(endpoint.rfind("tcp://127.0.0.1:", 0) == 0);
  auto served = std::async(std::launch::async, [&] { shard.serve(); });
  // Two sync workers, gradient r + 1 everywhere, a short nap per step so the garbage lands
  // in the middle of their run.
  const int steps = 300;
  std::future<std::vector<float>> workers[2];
  for (int r = 0; r < 2; ++r) {
    workers[r] = std::async(std::launch::async, [&, r] {
      PsClient client({r, 2, 1000, {endpoint}, 3s, 100ms, {}, {}});
      std::vector<float> params(1000), grads(1000, float(r + 1));
      for (std::size_t i = 0; i < 1000; ++i) params[i] = 0.001f * i;
      client.wait(r == 0 ? client.init(params) : client.pull(params));
      for (int t = 0; t < steps; ++t) {
        client.wait(client.push_pull(t, grads, params));
        std::this_thread::sleep_for(1ms);
      }
      return params;
    });
  }
  zmq::context_t context;
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(endpoint);
  auto send = [&](wire::Header h, std::size_t header_bytes, std::size_t payload_bytes) {
    std::array<std::byte, 48> head;
    wire::encode_header(h, head);
    raw.send(zmq::buffer(head.data(), header_bytes),
             payload_bytes ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (payload_bytes) raw.send(zmq::message_t(payload_bytes), zmq::send_flags::none);
  };
  const auto push = wire::make_header(MessageType::kPushPull, 0, 0, 0, 1000, 4000);
  wire::Header oversized = push, magic = push, version = push;
  oversized.payload_bytes = std::uint64_t{1} << 40;
  magic.magic = 0x12345678;
  version.version = 77;
  send(push, 20, 4000);  // a truncated header
  for (const wire::Header& h : {oversized, magic, version}) send(h, 48, 4000);
  send(wire::make_header(MessageType::kPushPull, 1, 0, 0, 500, 2000), 48, 2000);  // wrong range
  std::mt19937 random(1);
  for (int i = 0; i < 10; ++i) {
    std::string noise(1 + random() % 64, '\0');
    for (char& c : noise) c = static_cast<char>(random());
    raw.send(zmq::buffer(noise), zmq::send_flags::none);
  }
  const std::vector<float> result[2] = {workers[0].get(), workers[1].get()};
  CHECK_NOTHROW(served.get());  // serve() returned by itself once both workers said BYE
  for (const char* reason :
       {"rejected message from 00", "header: 20 bytes, expected 48", "more than the maximum",
        "magic: 0x12345678", "version: 77", "keys are not a chunk of this shard's range [0, 1000)"}) {
    CHECK_MESSAGE(log.has(reason), reason);
  }
  CHECK(log.size() >= 15);
  // Both workers hold the closed form: p0 - steps * lr * mean(1, 2).
  CHECK(result[0] == result[1]);
  for (std::size_t i = 0; i < 1000; i += 111) {
    CHECK(result[0][i] == doctest::Approx(0.001 * i - steps * 0.1 * 1.5).epsilon(1e-5));
  }
}
