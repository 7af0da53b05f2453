// PsClient against real shards on threads of the test, over loopback: sync for K shards and N
// workers against the closed form, async and ssp, handshake refusals, CURVE,
// key files, several tickets. (Round-trip speed: `gradsync bench ps`.)
#include <doctest/doctest.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <zmq.hpp>

#include "common/compression/top_k_codec.h"
#include "common/wire_format.h"
#include "server/ps_shard.h"
#include "strategies/ps/ps_client.h"
#include "tests/support/run_ranks.h"
#include "tests/support/shard_options.h"

using namespace gradsync;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Mode = PsShardOptions::Mode;
using gradsync::testing::run_ranks;

namespace {

// K shards, each serving on its own thread until its workers said BYE or the test ends.
struct Shards {
  std::mutex mutex;
  std::string log;  // every shard's lines
  std::vector<std::unique_ptr<PsShard>> shards;
  std::vector<std::thread> threads;

  Shards(int k, PsShardOptions o) {
    o.shards = k;
    o.log = [this](const std::string& line) {
      std::scoped_lock lock(mutex);
      log += line + "\n";
    };
    for (o.shard = 0; o.shard < k; ++o.shard) shards.push_back(std::make_unique<PsShard>(o));
    for (auto& s : shards) {
      threads.emplace_back([&s, this] {
        try {
          s->serve();
        } catch (const std::exception& e) {
          std::scoped_lock lock(mutex);
          log += std::string("serve() threw: ") + e.what() + "\n";
        }
      });
    }
  }
  ~Shards() {
    for (auto& s : shards) s->stop();
    for (auto& t : threads) t.join();
  }
  bool logged(const std::string& text) {
    std::scoped_lock lock(mutex);
    return log.find(text) != std::string::npos;
  }
  PsClientOptions client(int rank, int world, std::uint64_t model) const {
    PsClientOptions o{rank, world, model, {}, 4s, 200ms, {}, {}};
    for (const auto& s : shards) o.endpoints.push_back(s->endpoint());
    return o;
  }
};

// Real shards on threads: a timeout that a loaded machine does not reach by accident.
PsShardOptions shard_options(int world, std::uint64_t model, Mode mode, int staleness = 0) {
  return gradsync::testing::test_shard_options(world, model, mode, staleness, 4s);
}

// A worker's parameters after the start: p[i] = 0.001 i, from rank 0's INIT or a PULL.
std::vector<float> start(PsClient& client, int rank, std::uint64_t model) {
  std::vector<float> p(model);
  for (std::size_t i = 0; i < model; ++i) p[i] = rank == 0 ? 0.001f * i : -1.f;
  client.wait(rank == 0 ? client.init(p) : client.pull(p));
  return p;
}

}  // namespace

TEST_CASE("ps client: sync with K shards and N workers matches the closed form on every worker") {
  const int steps = 5;
  // 1001 is odd (shards differ by one element); 786437 gives each of two shards several chunks.
  for (std::uint64_t model : {1001, 786437}) {
    for (int k : {1, 2}) {
      for (int n : {1, 2, 4}) {
        CAPTURE(model);
        CAPTURE(k);
        CAPTURE(n);
        Shards shards(k, shard_options(n, model, Mode::kSync));
        std::vector<std::vector<float>> result(n);
        run_ranks(n, [&](int r) {
          PsClient client(shards.client(r, n, model));
          CHECK(client.ranges() == balanced_ranges(model, k));
          std::vector<float> params = start(client, r, model), grads(model, float(r + 1));
          for (int t = 0; t < steps; ++t) {
            const PushPullStats stats = client.wait(client.push_pull(t, grads, params));
            CHECK(stats.max_staleness == 0);
            // One header per chunk of each shard's range: a push_pull is chunked.
            std::uint64_t messages = 0;
            for (const KeyRange& r : balanced_ranges(model, k)) messages += chunk_ranges(r).size();
            CHECK(stats.bytes_sent == messages * 48 + model * 4);
            CHECK(stats.bytes_received >= stats.bytes_sent);  // one header per chunk
          }
          result[r] = params;
        });
        // Every worker holds the same bytes: p0 - steps * lr * mean(1..n).
        for (int r = 1; r < n; ++r) CHECK(result[r] == result[0]);
        // Every element, not a sample: a chunk or shard boundary off by one shows up anywhere.
        const double mean = (n + 1) / 2.0;
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < model; ++i) {
          const double expected = 0.001 * i - steps * 0.1 * mean;
          wrong += std::abs(result[0][i] - expected) > 1e-5 * std::max(1.0, std::abs(expected));
        }
        CHECK(wrong == 0);
        CHECK(!shards.logged("serve() threw"));
      }
    }
  }
}

TEST_CASE("ps client: compressed pushes send the bytes they encode, replies stay fp32") {
  // Two shards of several chunks each, two sync workers with constant gradients r + 1 (exact in
  // fp16 and bf16, and top-k at ratio 1 sends every entry): the closed form holds exactly as for
  // fp32. Step 0 is before comm.compression_start_step and pushes fp32; from step 1 the pushes
  // are fp16 / bf16 (2 bytes a key: half) or top-k (8 bytes an entry), while the replies, the
  // parameters, are the same bytes as ever.
  const std::uint64_t model = 786437;
  const int n = 2, steps = 3;
  std::uint64_t headers = 0;  // one per chunk, each way
  for (const KeyRange& r : balanced_ranges(model, 2)) headers += chunk_ranges(r).size() * 48;
  struct Case {
    PushCompression compression;
    std::uint64_t push_bytes;  // payloads of one compressed push_pull
  };
  const std::vector<Case> cases = {
      {{"fp16", 0.01, 1}, 2 * model},
      {{"bf16", 0.01, 1}, 2 * model},
      {{"topk", 1.0, 1}, 8 * model},
  };
  for (const Case& c : cases) {
    CAPTURE(c.compression.method);
    Shards shards(2, shard_options(n, model, Mode::kSync));
    std::vector<std::vector<float>> result(n);
    run_ranks(n, [&](int r) {
      PsClientOptions options = shards.client(r, n, model);
      options.compression = c.compression;
      PsClient client(options);
      std::vector<float> params = start(client, r, model), grads(model, float(r + 1));
      for (int t = 0; t < steps; ++t) {
        const PushPullStats stats = client.wait(client.push_pull(t, grads, params));
        CHECK(stats.bytes_sent == headers + (t == 0 ? 4 * model : c.push_bytes));
        CHECK(stats.bytes_received == headers + 4 * model);  // pulls unchanged
      }
      result[r] = params;
    });
    CHECK(result[1] == result[0]);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < model; ++i) {
      const double expected = 0.001 * i - steps * 0.1 * 1.5;
      wrong += std::abs(result[0][i] - expected) > 1e-5 * std::max(1.0, std::abs(expected));
    }
    CHECK(wrong == 0);
    CHECK(!shards.logged("serve() threw"));
  }
  // Top-k at 1%: k = ceil(0.01 * keys) entries per chunk, 8 bytes each.
  Shards shards(2, shard_options(1, model, Mode::kSync));
  PsClientOptions options = shards.client(0, 1, model);
  options.compression = {"topk", 0.01, 0};
  PsClient client(options);
  std::vector<float> params = start(client, 0, model), grads(model);
  for (std::size_t i = 0; i < model; ++i) grads[i] = std::sin(float(i));
  std::uint64_t entries = 0;
  for (const KeyRange& r : balanced_ranges(model, 2)) {
    for (const KeyRange& chunk : chunk_ranges(r)) {
      entries += compression::TopKCodec::k_for(chunk.size(), 0.01);
    }
  }
  const PushPullStats stats = client.wait(client.push_pull(0, grads, params));
  CHECK(stats.bytes_sent == headers + 8 * entries);
  CHECK(stats.bytes_sent < (headers + 4 * model) / 40);
  CHECK(stats.bytes_received == headers + 4 * model);
}

TEST_CASE("ps client: async applies every push as its own step and reports the fast one's lag") {
  const std::uint64_t model = 64;
  Shards shards(2, shard_options(2, model, Mode::kAsync));
  std::atomic<int> finished{0};
  std::atomic<std::uint32_t> fast_staleness{0};
  std::vector<float> final_params;
  run_ranks(2, [&](int r) {
    PsClient client(shards.client(r, 2, model));
    std::vector<float> params = start(client, r, model), grads(model, 1.f);
    for (int t = 0; t < 10; ++t) {
      const auto stats = client.wait(client.push_pull(t, grads, params));
      if (r == 0) fast_staleness = std::max<std::uint32_t>(fast_staleness, stats.max_staleness);
      if (r == 1) std::this_thread::sleep_for(10ms);
    }
    ++finished;
    while (finished < 2) std::this_thread::sleep_for(1ms);
    if (r == 0) client.wait(client.pull(params));
    if (r == 0) final_params = params;
  });
  // No averaging in async: twenty pushes of gradient 1, p0 - 20 * lr.
  for (std::size_t i = 0; i < model; ++i) {
    CHECK(final_params[i] == doctest::Approx(0.001 * i - 2.0).epsilon(1e-5));
  }
  CHECK(fast_staleness >= 1);  // it ran ahead of the sleeping worker
}

TEST_CASE("ps client: ssp s=1 holds the fast worker, staleness never above 1") {
  const int s = 1, steps = 20;
  const auto nap = 15ms;
  Shards shards(2, shard_options(2, 64, Mode::kSsp, s));
  std::atomic<int> slow_sent{0}, violations{0};
  std::atomic<std::uint32_t> worst{0};
  Clock::duration fast_time{};
  run_ranks(2, [&](int r) {
    PsClient client(shards.client(r, 2, 64));
    std::vector<float> params = start(client, r, 64), grads(64, 1.f);
    const auto t0 = Clock::now();
    for (int t = 0; t < steps; ++t) {
      if (r == 1) ++slow_sent;
      const auto stats = client.wait(client.push_pull(t, grads, params));
      worst = std::max<std::uint32_t>(worst, stats.max_staleness);
      // About to compute step t + 1: at most s ahead of the slow worker's pushes so far.
      if (r == 0 && t + 1 > slow_sent + s) ++violations;
      if (r == 1) std::this_thread::sleep_for(nap);
    }
    if (r == 0) fast_time = Clock::now() - t0;
  });
  CHECK(worst <= s);
  CHECK(violations == 0);
  // Held: the fast worker cannot finish before the slow one is s + 1 steps from its end.
  CHECK(fast_time >= (steps - s - 2) * nap);
}

TEST_CASE("ps client: a shard's refusal reaches the constructor with its reason") {
  Shards shards(1, shard_options(2, 100, Mode::kSync));
  auto refusal = [&](int rank, int world, std::uint64_t model) -> std::string {
    try {
      PsClient client(shards.client(rank, world, model));
    } catch (const PeerError& e) {
      return e.what();
    }
    return "no error";
  };
  // The shard is named as one, with its endpoint: "rank 0" would read as a worker.
  const std::string model_refused = refusal(1, 2, 99);
  CHECK(model_refused.starts_with("shard 0 (tcp://127.0.0.1:"));
  CHECK(
      model_refused.ends_with(") during the HELLO handshake: worker 1: model has 99 "
                              "parameters, this shard serves a model of 100"));
  CHECK(refusal(1, 3, 100).find("worker 1: world size 3, this shard serves world size 2") !=
        std::string::npos);
  CHECK(refusal(2, 3, 100).find("worker 2: rank out of range") != std::string::npos);
  PsClient first(shards.client(0, 2, 100));
  CHECK(refusal(0, 2, 100).find("worker 0: rank already connected (from 127.0.0.1)") !=
        std::string::npos);
  // And the client's own checks.
  std::vector<float> p(100);
  CHECK_THROWS_WITH_AS(first.init(std::span<float>(p).first(10)),
                       doctest::Contains("buffers of 10 floats for a model of 100"), Error);
  PsClientOptions nobody{0, 1, 4, {"tcp://127.0.0.1:1"}, 300ms, 0ms, {}, {}};
  CHECK_THROWS_WITH_AS(PsClient{nobody},
                       doctest::Contains(") during the HELLO handshake: no answer within 0.3 s"),
                       TimeoutError);
}

TEST_CASE("ps client: CURVE workers train, clients without the key are refused in time") {
  if (!zmq_has("curve")) {
    MESSAGE("libzmq without CURVE: skipped");
    return;
  }
  const CurveKeys keys = generate_curve_keys();
  PsShardOptions o = shard_options(2, 32, Mode::kSync);
  o.curve = keys;
  Shards shards(1, o);
  // A plain client: it cannot even agree on the security mechanism.
  std::string plain_error;
  std::thread plain([&] {
    PsClientOptions c = shards.client(0, 2, 32);
    c.timeout = 1s;
    try {
      PsClient client(c);
    } catch (const std::exception& e) {
      plain_error = e.what();
    }
  });
  // A CURVE client with another key pair (and the shard's public key): ZAP refuses it.
  bool stranger_answered = true;
  std::thread stranger([&] {
    zmq::context_t context;
    zmq::socket_t socket(context, zmq::socket_type::dealer);
    const CurveKeys own = generate_curve_keys();
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::curve_serverkey, keys.public_key);
    socket.set(zmq::sockopt::curve_publickey, own.public_key);
    socket.set(zmq::sockopt::curve_secretkey, own.secret_key);
    socket.connect(shards.shards[0]->endpoint());
    std::array<std::byte, wire::kHeaderBytes> hello;
    wire::encode_header(wire::make_header(wire::MessageType::kHello, 1, 0, 0, 32, 0, 2), hello);
    socket.send(zmq::buffer(hello), zmq::send_flags::none);
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    stranger_answered = zmq::poll(&item, 1, 1s) > 0;
  });
  std::vector<std::vector<float>> result(2);
  run_ranks(2, [&](int r) {
    PsClientOptions c = shards.client(r, 2, 32);
    c.curve = keys;
    PsClient client(c);
    std::vector<float> params = start(client, r, 32), grads(32, float(r + 1));
    for (int t = 0; t < 10; ++t) client.wait(client.push_pull(t, grads, params));
    result[r] = params;
  });
  plain.join();
  stranger.join();
  CHECK(result[0] == result[1]);
  CHECK(result[0][31] == doctest::Approx(0.031 - 10 * 0.1 * 1.5).epsilon(1e-5));
  CHECK(plain_error.find(") during the HELLO handshake: no answer within 1 s: is it running? "
                         "wrong or missing CURVE key?") != std::string::npos);
  CHECK(!stranger_answered);
  // Which failure ZeroMQ reports for the plain client depends on timing (mechanism mismatch,
  // or the peer gone mid-handshake), so only the line itself is checked.
  CHECK(shards.logged("shard 0: refused a connection during the handshake: "));
  CHECK(shards.logged("shard 0: refused a CURVE client at 127.0.0.1: its public key "));
}

TEST_CASE("ps client: several tickets may be outstanding, answered in order") {
  Shards shards(2, shard_options(1, 10, Mode::kAsync));
  PsClient client(shards.client(0, 1, 10));
  std::vector<float> params(10, 1.f), grads(10, 1.f), a(10), b(10);
  const auto init = client.init(params);
  const auto first = client.push_pull(0, grads, a);
  const auto second = client.push_pull(1, grads, b);
  client.wait(second);  // completes init and first on the way
  client.wait(first);
  client.wait(init);
  CHECK((a[3] == doctest::Approx(0.9) && b[3] == doctest::Approx(0.8)));
  CHECK_THROWS_WITH_AS(client.wait(first), doctest::Contains("already waited for"), Error);
}

namespace {

// Two sync workers on one shard whose timeout is 500 ms: worker 1 trains `steps` steps with the
// client options `worker1` makes, then stops training until rank 0 is done; worker 0 (its
// client's timeout `peer_timeout`) trains until it fails. Returns worker 0's error, checking
// that it came in bounded time.
std::string peer_error(Shards& shards, std::chrono::milliseconds peer_timeout,
                       const std::function<void(PsClientOptions&)>& worker1, int steps) {
  std::atomic<bool> release{false};
  auto idle = std::async(std::launch::async, [&] {
    PsClientOptions c = shards.client(1, 2, 64);
    worker1(c);
    try {
      PsClient client(c);
      std::vector<float> params = start(client, 1, 64), grads(64, 1.f);
      for (int t = 0; t < steps; ++t) client.wait(client.push_pull(t, grads, params));
      while (!release) std::this_thread::sleep_for(10ms);
    } catch (const PeerError&) {
      // The shard's ERROR, at its next call: the destructor leaves all the same.
    }
  });
  std::string error;
  const auto t0 = Clock::now();
  try {
    PsClientOptions c = shards.client(0, 2, 64);
    c.timeout = peer_timeout;
    PsClient client(c);
    std::vector<float> params = start(client, 0, 64), grads(64, 1.f);
    for (int t = 0; t < 100; ++t) client.wait(client.push_pull(t, grads, params));
  } catch (const PeerError& e) {
    error = e.what();
  }
  release = true;
  idle.get();
  CHECK(Clock::now() - t0 < 10s);  // the timeouts given, far from a hang
  CHECK(error.starts_with("shard 0 (tcp://127.0.0.1:"));
  return error;
}

PsShardOptions impatient_shard() {
  PsShardOptions o = shard_options(2, 64, Mode::kSync);
  o.timeout = 500ms;
  return o;
}

}  // namespace

TEST_CASE("ps client: a sync worker that goes silent ends the run, its peer hears its name") {
  Shards shards(1, impatient_shard());
  // No heartbeats: after its third step it looks exactly like a worker that died.
  const std::string error = peer_error(
      shards, 4s, [](PsClientOptions& c) { c.heartbeat = 0ms; }, 3);
  CHECK(error.find(") during push_pull step 3: worker 1 (last seen 0.") != std::string::npos);
  CHECK(error.find("stopped sending: ending the run") != std::string::npos);
  for (int i = 0; i < 100 && !shards.logged("serve() threw"); ++i) {
    std::this_thread::sleep_for(10ms);
  }
  CHECK(shards.logged("serve() threw: rank 1 (127.0.0.1) during shard 0 step 3: worker 1"));
}

TEST_CASE(
    "ps client: a worker stuck but heartbeating is named to its peer before its own timeout") {
  // Shard and peer time the same 500 ms: the shard's verdict must arrive within the 1 s the
  // client waits beyond it, or the peer could only say "no reply from shard 0".
  Shards shards(1, impatient_shard());
  const std::string error = peer_error(
      shards, 500ms,
      [](PsClientOptions& c) {
        c.timeout = 500ms;
        c.heartbeat = 50ms;  // its heartbeat thread goes on; its training does not
      },
      1);
  CHECK(
      error.ends_with(") during push_pull step 1: step 1 waits for worker(s) 1, alive but with "
                      "no push for over 0.5 s: ending the run"));
}
