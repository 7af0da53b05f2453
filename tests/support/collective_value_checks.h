// The value checks every CPU backend's tests share (test_gloo_communicator.cpp,
// test_shm_communicator.cpp): on every rank of one world, one round of allreduce sum and avg,
// broadcast from `root`, allgather and barrier over `length` floats, each compared with its
// closed form (ring_ranks.h: integer-valued data, exact in any summation order). Issues 5
// collectives.
#pragma once

#include <doctest/doctest.h>

#include <vector>

#include "allreduce/communicator.h"
#include "tests/support/ring_ranks.h"

namespace gradsync::testing {

inline void check_collectives_once(Communicator& comm, std::size_t length, int root) {
  const int n = comm.size(), r = comm.rank();
  std::vector<float> data = rank_data(r, length);
  comm.allreduce(data, ReduceOp::kSum);
  CHECK_MESSAGE(wrong_elements(data, [&](std::size_t i) { return expected_sum(n, i); }) == 0,
                "sum: rank " << r << " length " << length);
  data = rank_data(r, length);
  comm.allreduce(data, ReduceOp::kAvg);
  CHECK_MESSAGE(
      wrong_elements(data, [&](std::size_t i) { return expected_sum(n, i) / float(n); }) == 0,
      "avg: rank " << r << " length " << length);

  const auto pattern = [&](std::size_t i) { return float(root * 1000 + int(i % 1000)); };
  std::vector<float> b(length, -1.0f);
  if (r == root) {
    for (std::size_t i = 0; i < length; ++i) b[i] = pattern(i);
  }
  comm.broadcast(b, root);
  CHECK_MESSAGE(wrong_elements(b, pattern) == 0, "broadcast: rank " << r << " length " << length);

  std::vector<float> in(length);
  for (std::size_t i = 0; i < length; ++i) in[i] = float(r * 10 + int(i % 10));
  std::vector<float> out(length * std::size_t(n), -1.0f);
  comm.allgather(in, out);
  CHECK_MESSAGE(wrong_elements(out,
                               [&](std::size_t j) {
                                 return float(int(j / length) * 10 + int(j % length % 10));
                               }) == 0,
                "allgather: rank " << r << " length " << length);
  comm.barrier();
}

}  // namespace gradsync::testing
