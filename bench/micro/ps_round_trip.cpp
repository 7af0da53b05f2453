// push_pull round trips against raw ZeroMQ, on loopback, as Google Benchmark rows: one shard
// (K = 1), one worker (N = 1), momentum SGD on the shard, versus DEALER/ROUTER echoes of the
// same payload (ps_loopback.h): as one message, and in the ps's own chunks; and versus the
// same bytes streamed one way (raw loopback throughput). Bytes = the payload out and back, so
// bytes_per_second is the GB/s of a round trip. The rows run one after the other, so a machine
// whose speed drifts moves their ratios. `gradsync bench ps` alternates its sides round by round
// instead; its `vs chunked` is the figure to quote.
//   build/bin/gradsync_ps_bench --benchmark_min_time=2
#include <benchmark/benchmark.h>

#include "bench/ps_loopback.h"
#include "common/malloc_policy.h"

namespace {

void BM_PsPushPull(benchmark::State& state) {
  gradsync::PsLoopback ps(static_cast<std::uint64_t>(state.range(0)), 1);
  ps.round_trips(3);  // warm-up
  for (auto _ : state) ps.round_trips(1);
  if (ps.check() != 0) state.SkipWithError("parameters differ from a local replay of the steps");
  ps.finish();
  state.SetBytesProcessed(state.iterations() * 2 * state.range(0) *
                          static_cast<std::int64_t>(sizeof(float)));
}

void raw_round_trips(benchmark::State& state, gradsync::ZmqRawLoopback::Layout layout) {
  gradsync::ZmqRawLoopback raw(static_cast<std::uint64_t>(state.range(0)), layout, 1);
  raw.round_trips(3);
  for (auto _ : state) raw.round_trips(1);
  state.SetBytesProcessed(state.iterations() * 2 * state.range(0) *
                          static_cast<std::int64_t>(sizeof(float)));
}

void BM_ZmqEcho(benchmark::State& state) {
  raw_round_trips(state, gradsync::ZmqRawLoopback::kOneMessage);
}

void BM_ZmqEchoChunked(benchmark::State& state) {
  raw_round_trips(state, gradsync::ZmqRawLoopback::kAsPs);
}

void BM_ZmqStream(benchmark::State& state) {
  raw_round_trips(state, gradsync::ZmqRawLoopback::kStream);
}

// 1M and 16M floats (4 MiB and 64 MiB), in wall-clock time: the work is on other threads.
BENCHMARK(BM_PsPushPull)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ZmqEcho)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ZmqEchoChunked)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ZmqStream)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

// Allocation as in gradsync itself (malloc_policy.h), so these rows match `gradsync bench ps`.
int main(int argc, char** argv) {
  gradsync::keep_freed_memory_mapped();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
