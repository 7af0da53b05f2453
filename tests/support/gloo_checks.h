// Helpers the Gloo communicator's tests share (test_gloo_communicator.cpp: what the collectives
// compute; test_gloo_failures.cpp: how they fail; test_gloo_sync_pairs.cpp: both on sync pairs):
// the options, noisy data, and Gloo's averages beside TcpRing's (errors: error_checks.h).
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "allreduce/gloo/gloo_communicator.h"
#include "allreduce/in_memory_store.h"
#include "allreduce/tcp/tcp_ring.h"
#include "tests/support/error_checks.h"
#include "tests/support/ring_ranks.h"

namespace gradsync::testing {

inline gradsync::GlooOptions gloo_options(
    const std::string& algorithm = "ring",
    std::chrono::milliseconds timeout = std::chrono::seconds(20), bool check_desync = true) {
  gradsync::GlooOptions options;
  options.algorithm = algorithm;
  options.timeout = timeout;
  options.check_desync = check_desync;
  return options;
}

// Per rank, 0.1 (r + 1) / (i + 3): sums that round differently in different orders.
inline std::vector<float> noisy_data(int rank, std::size_t length) {
  std::vector<float> data(length);
  for (std::size_t i = 0; i < length; ++i) data[i] = 0.1f * float(rank + 1) / float(i + 3);
  return data;
}

// Each of n ranks averages noisy_data(r, length) through a Gloo communicator made with
// `options`, then through a TcpRing over the same Store. Returns {Gloo's results, the ring's},
// each by rank.
struct GlooAndRing {
  std::vector<std::vector<float>> gloo, ring;
};
inline GlooAndRing average_beside_ring(int n, const gradsync::GlooOptions& options,
                                       std::size_t length) {
  gradsync::InMemoryStore store;
  GlooAndRing out{std::vector<std::vector<float>>(static_cast<std::size_t>(n)),
                  std::vector<std::vector<float>>(static_cast<std::size_t>(n))};
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_gloo_communicator(store, r, n, options);
    out.gloo[std::size_t(r)] = noisy_data(r, length);
    comm->allreduce(out.gloo[std::size_t(r)], gradsync::ReduceOp::kAvg);
    auto tcp = gradsync::make_tcp_ring(store, r, n, ring_options());
    out.ring[std::size_t(r)] = noisy_data(r, length);
    tcp->allreduce(out.ring[std::size_t(r)], gradsync::ReduceOp::kAvg);
  });
  return out;
}

}  // namespace gradsync::testing
