// The out-of-place allreduce checks every CPU backend's tests share (test_tcp_ring.cpp,
// test_gloo_communicator.cpp, tests/mpi/test_mpi_communicator.cpp): run on every rank of one
// world, allreduce_into must give the closed-form sums of ring_ranks.h, leave its input as it
// was, and match the same communicator's in-place allreduce bit for bit, on non-integer data
// too (the same sums in the same order); a one-rank world copies.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "allreduce/communicator.h"
#include "common/error.h"
#include "tests/support/ring_ranks.h"

namespace gradsync::testing {

// Lengths worth trying for n ranks: none, one, one more than the ranks, and ~4 MB that no n > 1
// divides.
inline std::vector<std::size_t> allreduce_into_lengths(int n) {
  return {0, 1, std::size_t(n + 1), 1000003};
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Issues 4 out-of-place and 2 in-place allreduces of `length` floats.
inline void check_allreduce_into(Communicator& comm, std::size_t length) {
  const int n = comm.size(), r = comm.rank();
  CAPTURE(length);
  const std::vector<float> in = rank_data(r, length);
  std::vector<float> sum(length, -1.0f), avg(length, -1.0f);
  comm.allreduce_into(in, sum, ReduceOp::kSum);
  CHECK_MESSAGE(wrong_elements(sum, [&](std::size_t i) { return expected_sum(n, i); }) == 0,
                "sum: rank " << r);
  comm.allreduce_into(in, avg, ReduceOp::kAvg);
  CHECK_MESSAGE(
      wrong_elements(avg, [&](std::size_t i) { return expected_sum(n, i) / float(n); }) == 0,
      "avg: rank " << r);
  CHECK(in == rank_data(r, length));

  // Non-integers, whose rounding follows the order of the sums: bitwise the in-place result.
  std::vector<float> noisy(length);
  for (std::size_t i = 0; i < length; ++i) noisy[i] = 0.1f * float(r + 1) / float(i % 1013 + 3);
  const std::vector<float> noisy_in = noisy;
  std::vector<float> out_sum(length), out_avg(length), in_place_avg = noisy;
  comm.allreduce_into(noisy_in, out_sum, ReduceOp::kSum);
  comm.allreduce_into(noisy_in, out_avg, ReduceOp::kAvg);
  comm.allreduce(noisy, ReduceOp::kSum);
  comm.allreduce(in_place_avg, ReduceOp::kAvg);
  CHECK_MESSAGE(same_bits(out_sum, noisy), "out-of-place sum differs from in place: rank " << r);
  CHECK_MESSAGE(same_bits(out_avg, in_place_avg), "out-of-place avg differs: rank " << r);
}

// Buffers that break the contract throw at the call, before anything is queued.
inline void check_allreduce_into_refusals(Communicator& comm) {
  std::vector<float> a(8), b(7);
  CHECK_THROWS_WITH_AS(comm.allreduce_into_async(a, b, ReduceOp::kSum),
                       doctest::Contains("allreduce_into: in has 8 floats, out 7"), Error);
  const std::span<const float> front(a.data(), 6);
  const std::span<float> back(a.data() + 2, 6);
  CHECK_THROWS_WITH_AS(comm.allreduce_into_async(front, back, ReduceOp::kSum),
                       doctest::Contains("in and out overlap"), Error);
}

}  // namespace gradsync::testing
