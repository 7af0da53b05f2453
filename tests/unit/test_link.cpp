// Link: the pacers that cap a process's sends and receives at
// network.link_gbps, and the ring moving data through it at that rate, not faster.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "allreduce/in_memory_store.h"
#include "allreduce/tcp/tcp_ring.h"
#include "common/link.h"

namespace {

using gradsync::Pacer;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TEST_CASE("link pacer: rate 0 is unlimited") {
  Pacer unlimited(0);
  CHECK(unlimited.take(1u << 30) == 1u << 30);
  CHECK(unlimited.wait_for(1u << 30) == 0ns);
  const auto start = Clock::now();
  unlimited.acquire(1u << 30);
  CHECK(seconds_since(start) < 1.0);  // a 1 GiB wait at any real rate would be far longer
}

TEST_CASE("link pacer: take grants at most the burst, refund gives it back") {
  Pacer bucket(1e6);  // 1 MB/s: the burst is its floor, 256 KiB
  const std::size_t first = bucket.take(1u << 20);
  CHECK(first == 256u * 1024);
  CHECK(bucket.take(1u << 20) == 0);  // empty until credit accrues
  CHECK(bucket.wait_for(1u << 20) > 0ns);
  bucket.refund(first);
  CHECK(bucket.take(1u << 20) == first);
}

TEST_CASE("link pacer: streams and whole messages share one clock per direction") {
  // A message queued on the link keeps a stream waiting behind it: one link, whichever way a
  // transport moves its bytes (two separate accounts would let the stream burst at once).
  Pacer link(1e6);  // 1 MB/s: 100 KB take 100 ms; the burst is 256 KiB
  link.schedule(100'000);
  CHECK(link.take(1000) == 0);
  CHECK(link.wait_for(1000) > 50ms);
}

TEST_CASE("link pacer: acquire and take pace bytes at the rate") {
  constexpr double kRate = 50e6;  // 50 MB/s
  const std::size_t bytes = 5'000'000;
  {
    Pacer bucket(kRate);
    const auto start = Clock::now();
    for (std::size_t sent = 0; sent < bytes; sent += 500'000) bucket.acquire(500'000);
    const double expected = (bytes - 256.0 * 1024) / kRate;  // the first burst is free
    CHECK(seconds_since(start) >= expected * 0.98);
    CHECK(seconds_since(start) < expected * 2 + 0.5);  // loose: a loaded machine oversleeps
  }
  {
    Pacer bucket(kRate);
    const auto start = Clock::now();
    std::size_t moved = 0;
    while (moved < bytes) {
      const std::size_t got = bucket.take(bytes - moved);
      if (got == 0) std::this_thread::sleep_for(bucket.wait_for(bytes - moved));
      moved += got;
    }
    const double expected = (bytes - 256.0 * 1024) / kRate;
    CHECK(seconds_since(start) >= expected * 0.98);
    CHECK(seconds_since(start) < expected * 2 + 0.5);
  }
}

TEST_CASE("ring over emulated links: exact sums, at about the links' rate") {
  constexpr int kRanks = 2;
  constexpr double kGbps = 0.4;  // 50 MB/s per direction per process
  const std::size_t count = 1'000'000;  // 4 MB: each rank sends and receives 4 MB
  gradsync::InMemoryStore store;
  std::vector<std::vector<float>> data(kRanks, std::vector<float>(count));
  std::vector<double> took(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      for (std::size_t i = 0; i < count; ++i) data[r][i] = float(r + 1 + i % 5);
      gradsync::TcpRingOptions options;
      options.timeout = 20s;
      options.link = gradsync::make_link(kGbps);
      auto ring = gradsync::make_tcp_ring(store, r, kRanks, options);
      const auto start = Clock::now();
      ring->allreduce(data[r], gradsync::ReduceOp::kSum);
      took[r] = seconds_since(start);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) wrong += data[r][i] != float(3 + 2 * (i % 5));
    CHECK(wrong == 0);
  }
  // 2(N-1)/N * 4 MB = 4 MB each way at 50 MB/s: 80 ms, less the burst the link starts with.
  const double model = 4e6 / (kGbps * 1e9 / 8);
  for (int r = 0; r < kRanks; ++r) {
    CHECK(took[r] >= model * 0.9);
    CHECK(took[r] < model * 2.5 + 0.5);  // slack for a loaded machine
  }
}
