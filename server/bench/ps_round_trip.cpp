// push_pull round trips against raw ZeroMQ, on loopback: one shard (K = 1), one worker (N = 1),
// momentum SGD on the shard, versus a DEALER/ROUTER echo of the same payload (no optimizer, no
// copy into place). Bytes = the payload out and back, so bytes_per_second is the GB/s of a
// round trip; the ratio of the two rows is the parameter server's efficiency over raw ZeroMQ.
//   build/bin/gradsync_ps_bench --benchmark_min_time=2
#include <benchmark/benchmark.h>

#include <thread>
#include <zmq.hpp>

#include "server/ps_client.h"
#include "server/ps_shard.h"

namespace {

using namespace std::chrono_literals;

void BM_PsPushPull(benchmark::State& state) {
  const auto n = static_cast<std::uint64_t>(state.range(0));
  std::vector<float> grads(n, 0.5f), params(n, 0.f);
  gradsync::PsShardOptions options;
  options.model_size = n;
  options.sgd = {0.1, 0.9, 0.0};
  gradsync::PsShard shard(options);
  std::jthread server([&] { shard.serve(); });  // returns when the client says BYE
  gradsync::PsClient client({0, 1, n, {shard.endpoint()}, 60s, 1s, {}, {}});
  client.wait(client.init(params));
  std::uint64_t step = 0;
  for (int i = 0; i < 3; ++i) client.wait(client.push_pull(step++, grads, params));  // warm-up
  for (auto _ : state) client.wait(client.push_pull(step++, grads, params));
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<std::int64_t>(n * sizeof(float)));
}

void BM_ZmqEcho(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<float> payload(n, 0.5f);
  // Two contexts, as a shard and a worker process would have: one I/O thread each.
  zmq::context_t server_context(1), client_context(1);
  zmq::socket_t router(server_context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  zmq::socket_t dealer(client_context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(router.get(zmq::sockopt::last_endpoint));
  std::jthread echo([&](std::stop_token stop) {
    zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
    while (!stop.stop_requested()) {
      if (zmq::poll(&item, 1, 50ms) == 0) continue;
      zmq::message_t id, body;
      (void)router.recv(id);
      (void)router.recv(body);
      router.send(id, zmq::send_flags::sndmore);
      router.send(body, zmq::send_flags::none);  // the received buffer itself: no copy
    }
  });
  auto once = [&] {
    zmq::message_t out(
        payload.data(), n * sizeof(float), [](void*, void*) {}, nullptr);
    dealer.send(out, zmq::send_flags::none);
    zmq::message_t back;
    (void)dealer.recv(back);
  };
  for (int i = 0; i < 3; ++i) once();
  for (auto _ : state) once();
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<std::int64_t>(n * sizeof(float)));
  echo.request_stop();
}

// 1M and 16M floats (4 MiB and 64 MiB), in wall-clock time: the work is on other threads.
BENCHMARK(BM_PsPushPull)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ZmqEcho)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
