// A live PsShard on a thread, fed garbage by a raw DEALER while two real workers train: it logs
// and drops every bad message and the workers end exactly where the closed form says.
// (A live silent worker: test_ps_client.cpp.)
#include <doctest/doctest.h>

#include <future>
#include <random>
#include <thread>
#include <zmq.hpp>

#include "server/ps_shard.h"
#include "server/shard_state.h"
#include "strategies/ps/ps_client.h"
#include "tests/support/shard_driver.h"

using namespace gradsync;
using namespace gradsync::testing;
using namespace std::chrono_literals;

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
  for (const char* reason : {"rejected message from 00", "header: 20 bytes, expected 48",
                             "more than the maximum", "magic: 0x12345678", "version: 77",
                             "keys are not a chunk of this shard's range [0, 1000)"}) {
    CHECK_MESSAGE(log.has(reason), reason);
  }
  CHECK(log.size() >= 15);
  // Both workers hold the closed form: p0 - steps * lr * mean(1, 2).
  CHECK(result[0] == result[1]);
  for (std::size_t i = 0; i < 1000; i += 111) {
    CHECK(result[0][i] == doctest::Approx(0.001 * i - steps * 0.1 * 1.5).epsilon(1e-5));
  }
}
