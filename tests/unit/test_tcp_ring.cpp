// TcpRing: N ranks as N threads of this process over loopback, found through an InMemoryStore
// (and once through a real TcpStore). Expected values are known in closed form: rank r holds
// r + 1 + i % 7 at element i, so the sum over ranks is n(n+1)/2 + n (i % 7), exactly
// representable, and any summation order must reproduce it bit for bit.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "allreduce/in_memory_store.h"
#include "allreduce/tcp/socket.h"
#include "allreduce/tcp/tcp_ring.h"
#include "allreduce/tcp/tcp_store.h"
#include "common/error.h"
#include "tests/support/reduce_scatter_checks.h"
#include "tests/support/ring_ranks.h"

using namespace gradsync::testing;
using namespace std::chrono_literals;
using gradsync::Communicator;
using gradsync::ReduceOp;

TEST_CASE("tcp ring: allreduce sum is exact for world sizes 1..7 and awkward lengths") {
  for (int n = 1; n <= 7; ++n) {
    CAPTURE(n);
    // Empty, one element (one non-empty segment), fewer and more elements than ranks, and
    // ~4 MB per rank that no n > 1 divides.
    const std::vector<std::size_t> lengths = {0,    1,      std::size_t(n - 1), std::size_t(n + 1),
                                              1000, 1000003};
    gradsync::InMemoryStore store;
    std::vector<std::uint64_t> sent(std::size_t(n), 0), received(std::size_t(n), 0);
    run_ranks(n, [&](int r) {
      auto comm = gradsync::make_tcp_ring(store, r, n, ring_options());
      CHECK(comm->rank() == r);
      CHECK(comm->size() == n);
      for (std::size_t length : lengths) {
        std::vector<float> data = rank_data(r, length);
        comm->allreduce(data, ReduceOp::kSum);
        CHECK_MESSAGE(wrong_elements(data, [&](std::size_t i) { return expected_sum(n, i); }) == 0,
                      "rank " << r << " length " << length);
      }
      const auto counters = comm->counters();
      CHECK(counters.collectives == lengths.size());
      sent[std::size_t(r)] = counters.bytes_sent;
      received[std::size_t(r)] = counters.bytes_received;
    });
    // Each of the 2(n-1) steps moves every segment once over some link: 2(n-1) buffers in all.
    // (Per rank, sent and received differ by the odd elements of the longer segments.)
    std::uint64_t total_sent = 0, total_received = 0, floats = 0;
    for (auto s : sent) total_sent += s;
    for (auto s : received) total_received += s;
    for (auto length : lengths) floats += length;
    CHECK(total_sent == 2 * std::uint64_t(n - 1) * floats * sizeof(float));
    CHECK(total_received == total_sent);
  }
}

TEST_CASE("tcp ring: allreduce avg is exact and bit-identical on every rank") {
  for (int n : {2, 3, 4, 5}) {
    CAPTURE(n);
    gradsync::InMemoryStore store;
    std::vector<std::vector<float>> results(static_cast<std::size_t>(n));
    run_ranks(n, [&](int r) {
      auto comm = gradsync::make_tcp_ring(store, r, n, ring_options());
      // Integers averaged: (n+1)/2 + i % 7, a multiple of 1/2 and so exact.
      std::vector<float> data = rank_data(r, 10007);
      comm->allreduce(data, ReduceOp::kAvg);
      CHECK(wrong_elements(data, [&](std::size_t i) { return expected_sum(n, i) / float(n); }) ==
            0);
      // Non-integers: the sum's rounding depends on the order, but every rank must agree.
      std::vector<float> noisy(4099);
      for (std::size_t i = 0; i < noisy.size(); ++i) noisy[i] = 0.1f * float(r + 1) / float(i + 3);
      comm->allreduce(noisy, ReduceOp::kAvg);
      results[std::size_t(r)] = noisy;
    });
    for (int r = 1; r < n; ++r) CHECK(results[std::size_t(r)] == results[0]);
  }
}

TEST_CASE("tcp ring: broadcast from every root") {
  for (int n : {1, 2, 3, 5}) {
    CAPTURE(n);
    gradsync::InMemoryStore store;
    run_ranks(n, [&](int r) {
      auto comm = gradsync::make_tcp_ring(store, r, n, ring_options());
      for (int root = 0; root < n; ++root) {
        for (std::size_t length : {std::size_t(1), std::size_t(100003)}) {
          std::vector<float> data(length, -1.0f);
          if (r == root) {
            for (std::size_t i = 0; i < length; ++i) data[i] = float(root * 1000 + int(i % 1000));
          }
          comm->broadcast(data, root);
          CHECK_MESSAGE(
              wrong_elements(
                  data, [&](std::size_t i) { return float(root * 1000 + int(i % 1000)); }) == 0,
              "rank " << r << " root " << root << " length " << length);
        }
      }
    });
  }
}

TEST_CASE("tcp ring: allgather places rank r's input at out[r * in.size()]") {
  for (int n : {1, 2, 3, 4}) {
    CAPTURE(n);
    gradsync::InMemoryStore store;
    run_ranks(n, [&](int r) {
      auto comm = gradsync::make_tcp_ring(store, r, n, ring_options());
      for (std::size_t m : {std::size_t(0), std::size_t(1), std::size_t(257), std::size_t(65537)}) {
        std::vector<float> in(m);
        for (std::size_t i = 0; i < m; ++i) in[i] = float(r * 100000 + int(i));
        std::vector<float> out(m * std::size_t(n), -1.0f);
        comm->allgather(in, out);
        CHECK_MESSAGE(
            wrong_elements(
                out, [&](std::size_t j) { return float(int(j / m) * 100000 + int(j % m)); }) == 0,
            "rank " << r << " m " << m);
      }
    });
  }
}

TEST_CASE("tcp ring: no rank leaves a barrier before every rank has entered it") {
  const int n = 4;
  gradsync::InMemoryStore store;
  std::atomic<int> entered{0};
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_tcp_ring(store, r, n, ring_options());
    for (int round = 1; round <= 3; ++round) {
      // Stagger the arrivals, so that an early leaver would see a count short of n * round.
      std::this_thread::sleep_for(std::chrono::milliseconds(15 * ((r + round) % n)));
      entered += 1;
      comm->barrier();
      CHECK(entered.load() >= n * round);
      comm->barrier();  // nobody enters the next round before everyone has checked
    }
  });
}

TEST_CASE(
    "tcp ring: async collectives issued back-to-back complete in order with the right values") {
  const int n = 3;
  gradsync::InMemoryStore store;
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_tcp_ring(store, r, n, ring_options());
    const int count = 40;
    std::vector<std::vector<float>> buffers;
    std::vector<std::shared_ptr<gradsync::Work>> works;
    for (int k = 0; k < count; ++k) buffers.push_back(rank_data(r, std::size_t(1 + 997 * k)));
    std::vector<float> gathered(std::size_t(n) * 5);
    std::vector<float> mine(5, float(r));
    for (int k = 0; k < count; ++k) {
      works.push_back(
          comm->allreduce_async(buffers[std::size_t(k)], k % 2 ? ReduceOp::kAvg : ReduceOp::kSum));
      if (k == count / 2) works.push_back(comm->allgather_async(mine, gathered));
    }
    // Waiting for the last one first: once it is done, every earlier one must be done too.
    works.back()->wait(10s);
    for (const auto& w : works) CHECK(w->completed());
    for (const auto& w : works) w->wait(1s);
    for (int k = 0; k < count; ++k) {
      const float divisor = k % 2 ? float(n) : 1.0f;
      CHECK(wrong_elements(buffers[std::size_t(k)],
                           [&](std::size_t i) { return expected_sum(n, i) / divisor; }) == 0);
    }
    CHECK(wrong_elements(gathered, [](std::size_t j) { return float(j / 5); }) == 0);
    CHECK(comm->counters().collectives == std::uint64_t(count + 1));
  });
}

TEST_CASE("tcp ring: a 64-byte chunk, far smaller than a segment, still gives exact results") {
  const int n = 3;
  gradsync::InMemoryStore store;
  run_ranks(n, [&](int r) {
    auto options = ring_options();
    options.chunk_bytes = 64;
    auto comm = gradsync::make_tcp_ring(store, r, n, options);
    std::vector<float> data = rank_data(r, 10007);
    comm->allreduce(data, ReduceOp::kSum);
    CHECK(wrong_elements(data, [&](std::size_t i) { return expected_sum(n, i); }) == 0);
    data = rank_data(r, 10007);
    comm->allreduce(data, ReduceOp::kAvg);
    CHECK(wrong_elements(data, [&](std::size_t i) { return expected_sum(n, i) / float(n); }) == 0);
    std::vector<float> b(3001, r == 1 ? 7.0f : 0.0f);
    comm->broadcast(b, 1);
    CHECK(wrong_elements(b, [](std::size_t) { return 7.0f; }) == 0);
  });
}

TEST_CASE("tcp ring: ranks form a ring through a real TcpStore") {
  int port = 0;
  {
    auto probe = gradsync::tcp::listen_on("127.0.0.1", 0);
    port = gradsync::tcp::local_port(probe);
  }
  const int n = 3;
  run_ranks(n, [&](int r) {
    gradsync::TcpStoreOptions store_options;
    store_options.port = port;
    store_options.is_server = r == 0;
    store_options.timeout = 10s;
    auto store = gradsync::make_tcp_store(store_options);
    auto comm = gradsync::make_tcp_ring(*store, r, n, ring_options());
    std::vector<float> data = rank_data(r, 100001);
    comm->allreduce(data, ReduceOp::kSum);
    CHECK(wrong_elements(data, [&](std::size_t i) { return expected_sum(n, i); }) == 0);
    comm.reset();
    // Rank 0's store server must outlive the others' last request: each says it is done with
    // its last set (acknowledged, so no request of theirs is left in flight), and rank 0 waits.
    if (r != 0) {
      store->set("done/" + std::to_string(r), "1");
    } else {
      store->wait({"done/1", "done/2"}, 10s);
    }
  });
}

TEST_CASE("tcp ring: world size 1 and zero elements are no-ops that still count") {
  gradsync::InMemoryStore store;
  auto solo = gradsync::make_tcp_ring(store, 0, 1, ring_options());
  std::vector<float> data = {1, 2, 3};
  solo->allreduce(data, ReduceOp::kAvg);
  solo->broadcast(data, 0);
  std::vector<float> out(3);
  solo->allgather(data, out);
  solo->barrier();
  CHECK(data == std::vector<float>{1, 2, 3});
  CHECK(out == data);
  CHECK(solo->counters().collectives == 4);
  CHECK(solo->counters().bytes_sent == 0);

  // Two ranks, zero-length collectives between real ones: sequence numbers stay in step.
  run_ranks(2, [&](int r) {
    auto comm = gradsync::make_tcp_ring(store, r, 2, ring_options());
    std::vector<float> empty;
    std::vector<float> one = {float(r + 1)};
    comm->allreduce(empty, ReduceOp::kSum);
    comm->allreduce(one, ReduceOp::kSum);
    comm->broadcast(empty, 1);
    comm->allreduce(one, ReduceOp::kSum);
    CHECK(one[0] == 6.0f);
    CHECK(comm->counters().collectives == 4);
    CHECK(comm->counters().bytes_sent == 2 * sizeof(float));
  });
}

TEST_CASE("tcp ring: reduce-scatter gives rank r block r's exact sum, the allreduce's bits") {
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    gradsync::InMemoryStore store;
    run_ranks(n, [&](int r) {
      auto comm = gradsync::make_tcp_ring(store, r, n, ring_options());
      std::uint64_t sent = 0;
      for (std::size_t block : reduce_scatter_blocks(n)) {
        check_reduce_scatter(*comm, block);
        // Per rank: 4 reduce-scatters send N-1 blocks each, 3 allreduces 2(N-1) blocks each.
        sent += 10 * std::uint64_t(n - 1) * block * sizeof(float);
      }
      check_reduce_scatter_refuses_sizes(*comm);
      sent += std::uint64_t(n - 1) * 4 * sizeof(float);
      const auto counters = comm->counters();
      CHECK(counters.collectives == 7 * reduce_scatter_blocks(n).size() + 1);
      CHECK(counters.bytes_sent == sent);
      CHECK(counters.bytes_received == sent);
    });
  }
}

TEST_CASE("tcp ring: reduce-scatter of non-integers agrees across ranks' blocks and with 2 ranks") {
  // Each block is summed around the ring from another rank than the allreduce's segment, so
  // for N >= 3 the last bits may differ from the allreduce's; with 2 ranks a sum has two
  // addends, the same in either order.
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    gradsync::InMemoryStore store;
    std::vector<std::size_t> differ(std::size_t(n), 0);
    const std::size_t block = 10007;
    run_ranks(n, [&](int r) {
      auto comm = gradsync::make_tcp_ring(store, r, n, ring_options());
      std::vector<float> in(block * std::size_t(n));
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = 0.1f * float(r + 1) / float(i + 3);
      std::vector<float> out(block), all = in;
      comm->reduce_scatter(in, out, ReduceOp::kAvg);
      comm->allreduce(all, ReduceOp::kAvg);
      for (std::size_t i = 0; i < block; ++i) {
        differ[std::size_t(r)] += out[i] != all[std::size_t(r) * block + i] ? 1 : 0;
      }
    });
    std::size_t total = 0;
    for (auto d : differ) total += d;
    MESSAGE(n << " ranks: " << total << " of " << block * std::size_t(n)
              << " reduce-scatter averages differ from the allreduce's in the last bits");
    if (n == 2) CHECK(total == 0);
  }
}

TEST_CASE("tcp ring: at two ranks every element is a + b on both ranks, in place or not") {
  // Two addends: the same bits in either order, so both ranks, in place and out of place, must
  // hold exactly a + b. Non-integers, so that an element forwarded before or after the wrong
  // addition would show; 64-byte chunks so that many chunks of both steps interleave.
  for (const std::size_t chunk : {std::size_t(64), std::size_t(1) << 20}) {
    CAPTURE(chunk);
    for (const std::size_t length : {std::size_t(1), std::size_t(1000003)}) {
      CAPTURE(length);
      const auto value = [](int r, std::size_t i) { return 0.1f * float(r + 1) / float(i + 3); };
      gradsync::InMemoryStore store;
      std::vector<std::size_t> wrong(2, 0);
      run_ranks(2, [&](int r) {
        auto options = ring_options();
        options.chunk_bytes = chunk;
        auto comm = gradsync::make_tcp_ring(store, r, 2, options);
        std::vector<float> in(length), out(length);
        for (std::size_t i = 0; i < length; ++i) in[i] = value(r, i);
        comm->allreduce_into(in, out, ReduceOp::kSum);
        std::vector<float> in_place = in;
        comm->allreduce(in_place, ReduceOp::kSum);
        std::vector<float> average = in;
        comm->allreduce(average, ReduceOp::kAvg);
        for (std::size_t i = 0; i < length; ++i) {
          const float sum = value(0, i) + value(1, i);
          wrong[std::size_t(r)] += (out[i] != sum) + (in_place[i] != sum) +
                                   (average[i] != sum / 2.0f) + (in[i] != value(r, i));
        }
        CHECK(comm->counters().bytes_sent == 3 * length * sizeof(float));
      });
      CHECK(wrong[0] == 0);
      CHECK(wrong[1] == 0);
    }
  }
}
