// Checks of allreduce_half, reduce_scatter_half and allgather_words (allreduce/communicator.h)
// that every backend's tests share (tests/unit/test_half_allreduce.cpp in threads,
// tests/mpi/test_mpi_half.cpp under mpirun): each runs on every rank of one world and compares
// with values known in closed form.
//
//   check_half_exact(comm, 4097);                  // fp16 and bf16, sum and avg: 4 collectives
//   check_half_reduce_scatter_exact(comm, 1001);   // the same as blocks, and against
//   allreduce_half check_words_exact(comm, 4097);                 // words allgather with NaN
//   patterns: 1 collective
//
// 16-bit data: rank r holds 8 (r + 1) ((i % 13) - 6) at element i, an integer whose every
// partial sum over up to 6 ranks (|x| <= 8 * 21 * 6 = 1008, a multiple of 8) fp16 and bf16 both
// hold exactly, so the sum is exact in any order and under any rounding rule; the average is that
// sum divided by N and rounded once. A reduce-scatter's input is that data over N blocks: block r
// holds global elements r * block + i.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "allreduce/communicator.h"
#include "common/compression/half_codec.h"
#include "common/error.h"

namespace gradsync::testing {

inline std::uint16_t to_half(HalfType type, float value) {
  return type == HalfType::kFp16 ? compression::fp16_from_float(value)
                                 : compression::bf16_from_float(value);
}

inline float from_half(HalfType type, std::uint16_t bits) {
  return type == HalfType::kFp16 ? compression::float_from_fp16(bits)
                                 : compression::float_from_bf16(bits);
}

inline float half_value(int rank, std::size_t i) {
  return float(8 * (rank + 1) * (int(i % 13) - 6));
}

inline std::vector<std::uint16_t> half_rank_data(HalfType type, int rank, std::size_t length) {
  std::vector<std::uint16_t> data(length);
  for (std::size_t i = 0; i < length; ++i) data[i] = to_half(type, half_value(rank, i));
  return data;
}

// The exact sum over n ranks: 8 n(n+1)/2 ((i % 13) - 6), as 16 bits; with `average`, that sum
// divided by n in fp32 and rounded once.
inline std::uint16_t half_expected(HalfType type, int n, std::size_t i, bool average) {
  const float sum = float(8 * n * (n + 1) / 2 * (int(i % 13) - 6));
  return to_half(type, average ? sum / float(n) : sum);
}

// Per rank, 0.1 (r + 1) / (i + 3) as 16 bits: sums that round differently in different orders.
inline std::vector<std::uint16_t> half_noisy_data(HalfType type, int rank, std::size_t length) {
  std::vector<std::uint16_t> data(length);
  for (std::size_t i = 0; i < length; ++i) {
    data[i] = to_half(type, 0.1f * float(rank + 1) / float(i + 3));
  }
  return data;
}

// Elements whose bits differ from expected(i); the first one is reported.
template <typename Word, typename Expected>
std::size_t wrong_bits(const std::vector<Word>& got, Expected expected) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expected(i)) {
      if (wrong == 0) {
        MESSAGE("element " << i << ": bits 0x" << std::hex << std::uint64_t(got[i]) << " != 0x"
                           << std::uint64_t(expected(i)) << std::dec);
      }
      ++wrong;
    }
  }
  return wrong;
}

// fp16 and bf16, sum and avg, over `length` values: 4 collectives, each exact bit for bit.
inline void check_half_exact(Communicator& comm, std::size_t length) {
  const int n = comm.size(), r = comm.rank();
  for (const HalfType type : {HalfType::kFp16, HalfType::kBf16}) {
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      const bool average = op == ReduceOp::kAvg;
      std::vector<std::uint16_t> data = half_rank_data(type, r, length);
      comm.allreduce_half(data, type, op);
      CHECK_MESSAGE(
          wrong_bits(data, [&](std::size_t i) { return half_expected(type, n, i, average); }) == 0,
          half_type_name(type) << (average ? " avg" : " sum") << ": rank " << r << " of " << n
                               << ", length " << length);
    }
  }
}

// fp16 sums beyond the largest finite value (65504; from 65520 on, round to nearest even goes
// up) are inf, of the sum's sign, and kAvg divides that inf (it stays inf): the caller divides
// before the sum to avoid it. bf16 has fp32's range: such sums are finite. 4 collectives.
inline void check_half_overflow(Communicator& comm) {
  const int n = comm.size();
  // 40000 and -40000 are exact in fp16 (multiples of 32 below 65504).
  const std::vector<std::uint16_t> start = {compression::fp16_from_float(40000.0f),
                                            compression::fp16_from_float(-40000.0f),
                                            compression::fp16_from_float(1.0f)};
  for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    std::vector<std::uint16_t> data = start;
    comm.allreduce_half(data, HalfType::kFp16, op);
    if (n == 1) {
      CHECK(data == start);
      continue;
    }
    CHECK(data[0] == 0x7C00);  // +inf
    CHECK(data[1] == 0xFC00);  // -inf
    const float ones = op == ReduceOp::kAvg ? 1.0f : float(n);
    CHECK(data[2] == compression::fp16_from_float(ones));
  }
  for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    // 49152 = 3 * 2^14: every multiple up to 6 of it has at most 4 significant bits.
    std::vector<std::uint16_t> data = {compression::bf16_from_float(49152.0f)};
    comm.allreduce_half(data, HalfType::kBf16, op);
    CHECK(data[0] == compression::bf16_from_float(op == ReduceOp::kAvg ? 49152.0f : 49152.0f * n));
  }
}

// True if `out` is block `rank` of `all` (blocks of out.size()), bit for bit.
inline bool is_half_block_of(const std::vector<std::uint16_t>& out,
                             const std::vector<std::uint16_t>& all, int rank) {
  const std::size_t m = out.size();
  const auto begin = all.begin() + std::ptrdiff_t(std::size_t(rank) * m);
  return std::equal(out.begin(), out.end(), begin, begin + std::ptrdiff_t(m));
}

// reduce_scatter_half of half_rank_data over N blocks of `block` values, fp16 and bf16, sum and
// avg: each rank's block holds the exact sums (avg: divided by N, rounded once) at its global
// elements, bit for bit the matching block of allreduce_half of the same input, and the input is
// left as it was. 8 collectives (4 reduce-scatters, 4 allreduces).
inline void check_half_reduce_scatter_exact(Communicator& comm, std::size_t block) {
  const int n = comm.size(), r = comm.rank();
  for (const HalfType type : {HalfType::kFp16, HalfType::kBf16}) {
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      const bool average = op == ReduceOp::kAvg;
      const std::vector<std::uint16_t> in = half_rank_data(type, r, block * std::size_t(n));
      std::vector<std::uint16_t> out(block, 0xFFFF);  // a NaN: what an unwritten value reads
      comm.reduce_scatter_half(in, out, type, op);
      CHECK_MESSAGE(wrong_bits(out,
                               [&](std::size_t i) {
                                 return half_expected(type, n, std::size_t(r) * block + i, average);
                               }) == 0,
                    "reduce-scatter " << half_type_name(type) << (average ? " avg" : " sum")
                                      << ": rank " << r << " of " << n << ", block " << block);
      CHECK(in == half_rank_data(type, r, in.size()));
      std::vector<std::uint16_t> all = in;
      comm.allreduce_half(all, type, op);
      CHECK_MESSAGE(is_half_block_of(out, all, r),
                    "reduce-scatter " << half_type_name(type) << (average ? " avg" : " sum")
                                      << " differs from the allreduce_half's block " << r);
    }
  }
}

// Issued async around an allreduce_half, the reduce-scatters complete in issue order with the
// blocking calls' results. 3 collectives.
inline void check_half_reduce_scatter_async(Communicator& comm, std::size_t block) {
  const int n = comm.size(), r = comm.rank();
  const std::vector<std::uint16_t> fp16 =
      half_rank_data(HalfType::kFp16, r, block * std::size_t(n));
  const std::vector<std::uint16_t> bf16 =
      half_rank_data(HalfType::kBf16, r, block * std::size_t(n));
  std::vector<std::uint16_t> first(block), second(block), between = fp16;
  std::vector<std::shared_ptr<Work>> works;
  works.push_back(comm.reduce_scatter_half_async(fp16, first, HalfType::kFp16, ReduceOp::kSum));
  works.push_back(comm.allreduce_half_async(between, HalfType::kFp16, ReduceOp::kAvg));
  works.push_back(comm.reduce_scatter_half_async(bf16, second, HalfType::kBf16, ReduceOp::kAvg));
  works.back()->wait(comm.timeout());
  for (const auto& w : works) CHECK(w->completed());
  const std::size_t at = std::size_t(r) * block;
  CHECK(wrong_bits(first, [&](std::size_t i) {
          return half_expected(HalfType::kFp16, n, at + i, false);
        }) == 0);
  CHECK(wrong_bits(second, [&](std::size_t i) {
          return half_expected(HalfType::kBf16, n, at + i, true);
        }) == 0);
  CHECK(wrong_bits(between,
                   [&](std::size_t i) { return half_expected(HalfType::kFp16, n, i, true); }) == 0);
}

// Sums that round (half_noisy_data): block r is the allreduce_half's block r bit for bit, for
// backends that add in the same order for both (any backend at 2 ranks, where a sum is one
// commutative addition; shm and the hierarchical communicator at any size). 4 collectives.
inline void check_half_reduce_scatter_matches_allreduce(Communicator& comm, std::size_t block) {
  const int n = comm.size(), r = comm.rank();
  for (const HalfType type : {HalfType::kFp16, HalfType::kBf16}) {
    const std::vector<std::uint16_t> in = half_noisy_data(type, r, block * std::size_t(n));
    std::vector<std::uint16_t> out(block), all = in;
    comm.reduce_scatter_half(in, out, type, ReduceOp::kAvg);
    comm.allreduce_half(all, type, ReduceOp::kAvg);
    CHECK_MESSAGE(is_half_block_of(out, all, r), half_type_name(type)
                                                     << ": rank " << r << " of " << n);
  }
}

// The byte counters of a reduce_scatter_half are half those of a float reduce-scatter of as many
// elements: `length` a multiple of the world size, and, for shm, of its chunk. 2 collectives.
inline void check_half_reduce_scatter_counts(Communicator& comm, std::size_t length) {
  const std::size_t block = length / std::size_t(comm.size());
  const std::vector<float> floats(length, 1.0f);
  std::vector<float> float_out(block);
  const CommCounters before = comm.counters();
  comm.reduce_scatter(floats, float_out, ReduceOp::kSum);
  const CommCounters between = comm.counters();
  const std::vector<std::uint16_t> halves(length, compression::bf16_from_float(1.0f));
  std::vector<std::uint16_t> half_out(block);
  comm.reduce_scatter_half(halves, half_out, HalfType::kBf16, ReduceOp::kSum);
  const CommCounters after = comm.counters();
  const std::uint64_t float_sent = between.bytes_sent - before.bytes_sent;
  const std::uint64_t float_received = between.bytes_received - before.bytes_received;
  CHECK(2 * (after.bytes_sent - between.bytes_sent) == float_sent);
  CHECK(2 * (after.bytes_received - between.bytes_received) == float_received);
  CHECK(after.collectives == between.collectives + 1);
  if (comm.size() > 1) CHECK(float_sent > 0);
}

// in.size() != size() * out.size() throws at the call, as reduce_scatter's check does
// (allreduce/collective_checks.h), and issues nothing: the call after it still pairs with the
// other ranks'. 1 collective.
inline void check_half_reduce_scatter_refuses_sizes(Communicator& comm) {
  const int n = comm.size();
  std::vector<std::uint16_t> in(std::size_t(n) * 4 + 1), out(4);
  std::string message;
  try {
    comm.reduce_scatter_half_async(in, out, HalfType::kBf16, ReduceOp::kSum);
    FAIL_CHECK("a reduce_scatter_half with in.size() != size() * out.size() must be refused");
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK_MESSAGE(message.find("reduce_scatter_half: in.size() must be size() * out.size(), but in "
                             "has " +
                             std::to_string(in.size()) + " bf16 values, out 4, over " +
                             std::to_string(n) + " ranks") != std::string::npos,
                message);
  in.pop_back();
  comm.reduce_scatter_half(in, out, HalfType::kBf16, ReduceOp::kSum);
  CHECK(out == std::vector<std::uint16_t>(4, 0));
}

// The words rank r contributes: special float patterns (signalling and quiet NaNs with
// payloads, infinities, -0.0, subnormals) among words that name the rank and the index.
inline std::uint32_t word_of(int rank, std::size_t i) {
  static constexpr std::uint32_t kSpecial[] = {0x7F800001u, 0xFFBFFFFFu, 0x7FC00000u, 0xFFC12345u,
                                               0x80000000u, 0x7F800000u, 0xFF800000u, 0x00000001u,
                                               0x807FFFFFu, 0x7FA5A5A5u};
  if (i % 3 == 1) return kSpecial[(i / 3 + std::size_t(rank)) % std::size(kSpecial)];
  return std::uint32_t(rank) << 24 ^ std::uint32_t(i) * 2654435761u;
}

// allgather_words over `length` words a rank: every word arrives bit for bit. 1 collective.
inline void check_words_exact(Communicator& comm, std::size_t length) {
  const int n = comm.size(), r = comm.rank();
  std::vector<std::uint32_t> in(length);
  for (std::size_t i = 0; i < length; ++i) in[i] = word_of(r, i);
  std::vector<std::uint32_t> out(length * std::size_t(n), 0xDEADBEEFu);
  comm.allgather_words(in, out);
  CHECK_MESSAGE(
      wrong_bits(out, [&](std::size_t j) { return word_of(int(j / length), j % length); }) == 0,
      "words: rank " << r << " of " << n << ", length " << length);
}

// The same patterns through the float allgather: bit for bit too (what allgather_words relies
// on). 1 collective.
inline void check_float_allgather_bits(Communicator& comm, std::size_t length) {
  const int n = comm.size(), r = comm.rank();
  std::vector<float> in(length);
  for (std::size_t i = 0; i < length; ++i) in[i] = std::bit_cast<float>(word_of(r, i));
  std::vector<float> out(length * std::size_t(n), 0.0f);
  comm.allgather(in, out);
  std::vector<std::uint32_t> bits(out.size());
  for (std::size_t j = 0; j < out.size(); ++j) bits[j] = std::bit_cast<std::uint32_t>(out[j]);
  CHECK_MESSAGE(
      wrong_bits(bits, [&](std::size_t j) { return word_of(int(j / length), j % length); }) == 0,
      "float allgather bits: rank " << r << " of " << n << ", length " << length);
}

// The byte counters of an allreduce_half are half those of a float allreduce of as many
// elements: `length` must be a multiple of the world size (so that no backend's ring formula
// rounds) and, for shm, of its chunk. 2 collectives.
inline void check_half_counts_two_bytes(Communicator& comm, std::size_t length) {
  std::vector<float> floats(length, 1.0f);
  const CommCounters before = comm.counters();
  comm.allreduce(floats, ReduceOp::kSum);
  const CommCounters between = comm.counters();
  std::vector<std::uint16_t> halves(length, compression::fp16_from_float(1.0f));
  comm.allreduce_half(halves, HalfType::kFp16, ReduceOp::kSum);
  const CommCounters after = comm.counters();
  const std::uint64_t float_sent = between.bytes_sent - before.bytes_sent;
  const std::uint64_t float_received = between.bytes_received - before.bytes_received;
  CHECK(2 * (after.bytes_sent - between.bytes_sent) == float_sent);
  CHECK(2 * (after.bytes_received - between.bytes_received) == float_received);
  CHECK(after.collectives == between.collectives + 1);
  if (comm.size() > 1) CHECK(float_sent > 0);
}

}  // namespace gradsync::testing
