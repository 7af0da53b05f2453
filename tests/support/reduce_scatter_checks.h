// The reduce-scatter checks TcpRing and GlooCommunicator share (test_tcp_ring.cpp,
// test_gloo_communicator.cpp): run on every rank of one world, they compare each rank's block
// with the closed form of ring_ranks.h and, bit for bit, with the same communicator's allreduce.
// Integer-valued data: every sum is exact in any order, so the blocks must agree to the bit.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "allreduce/communicator.h"
#include "common/error.h"
#include "tests/support/ring_ranks.h"

namespace gradsync::testing {

// Block lengths worth trying for n ranks: none, one, one more than the ranks, and ~4 MB of
// input in all (1000003 / n floats per block, so that n blocks are about a million floats).
inline std::vector<std::size_t> reduce_scatter_blocks(int n) {
  return {0, 1, std::size_t(n + 1), std::size_t(1000003 / n)};
}

// True if out equals all[rank * out.size(), ...) bit for bit.
inline bool is_block_of(const std::vector<float>& out, const std::vector<float>& all, int rank) {
  return out.empty() || std::memcmp(out.data(), all.data() + std::size_t(rank) * out.size(),
                                    out.size() * sizeof(float)) == 0;
}

// Reduce-scatter of rank_data(r, n * block): rank r's block holds the sums at global elements
// r * block + i; avg is that over n. Both equal the matching block of the allreduce bitwise,
// and the input is left as it was. A sum and an avg issued back to back (async) around an
// allreduce complete in issue order. Issues 4 reduce-scatters and 3 allreduces of the input.
inline void check_reduce_scatter(Communicator& comm, std::size_t block) {
  const int n = comm.size(), r = comm.rank();
  CAPTURE(block);
  const std::vector<float> in = rank_data(r, block * std::size_t(n));
  const auto sum_at = [&](std::size_t i) { return expected_sum(n, std::size_t(r) * block + i); };

  std::vector<float> sum(block, -1.0f), avg(block, -1.0f);
  comm.reduce_scatter(in, sum, ReduceOp::kSum);
  CHECK_MESSAGE(wrong_elements(sum, sum_at) == 0, "sum: rank " << r);
  comm.reduce_scatter(in, avg, ReduceOp::kAvg);
  CHECK_MESSAGE(wrong_elements(avg, [&](std::size_t i) { return sum_at(i) / float(n); }) == 0,
                "avg: rank " << r);
  CHECK(in == rank_data(r, in.size()));

  std::vector<float> all_sum = in, all_avg = in;
  comm.allreduce(all_sum, ReduceOp::kSum);
  comm.allreduce(all_avg, ReduceOp::kAvg);
  CHECK_MESSAGE(is_block_of(sum, all_sum, r), "sum differs from the allreduce's block");
  CHECK_MESSAGE(is_block_of(avg, all_avg, r), "avg differs from the allreduce's block");

  // Async, interleaved with an allreduce: issue order is completion order.
  std::vector<float> first(block, -1.0f), second(block, -1.0f), between = in;
  std::vector<std::shared_ptr<Work>> works;
  works.push_back(comm.reduce_scatter_async(in, first, ReduceOp::kSum));
  works.push_back(comm.allreduce_async(between, ReduceOp::kSum));
  works.push_back(comm.reduce_scatter_async(in, second, ReduceOp::kAvg));
  works.back()->wait(comm.timeout());
  for (const auto& w : works) CHECK(w->completed());
  CHECK(first == sum);
  CHECK(second == avg);
  CHECK(between == all_sum);
}

// in.size() != size() * out.size() throws at the call, saying so with the sizes, and issues
// nothing: the collective after it still pairs with the other ranks'.
inline void check_reduce_scatter_refuses_sizes(Communicator& comm) {
  const int n = comm.size();
  std::vector<float> in(std::size_t(n) * 4 + 1), out(4);
  try {
    comm.reduce_scatter_async(in, out, ReduceOp::kSum);
    FAIL_CHECK("a reduce-scatter with in.size() != size() * out.size() must be refused");
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK(message.find("reduce_scatter: in.size() must be size() * out.size(), but in has " +
                       std::to_string(in.size()) + " floats, out 4, over " + std::to_string(n) +
                       " ranks") != std::string::npos);
  }
  in.pop_back();
  comm.reduce_scatter(in, out, ReduceOp::kSum);  // the right sizes: every rank's next call
}

}  // namespace gradsync::testing
