// Top-k sparsification with error feedback (Deep Gradient Compression, Lin et al. 2018): per
// bucket, send only the k largest-magnitude entries of (gradient + residual) as (index, value)
// pairs, and keep everything not sent as the residual, added to the next step's gradient. No
// gradient mass is ever dropped, only delayed:
//
//   sum of everything sent so far + residual() == sum of every gradient given to select()
//
// (exactly, up to the float rounding of each step's gradient + residual).
//
//   TopKCodec codec(bucket.size());                 // one per bucket, per rank; residual zero
//   SparseGradient sent;
//   codec.select(bucket, 0.01, sent);                // k = 1% of the bucket, ascending indices
//   ... all-gather every rank's `sent` (each has the same k), or push it to a shard ...
//   zero(dense); for each rank r: scatter_add(indices_r, values_r, dense);   then divide by N
//
// Which entries: k = max(1, ceil(ratio * n)) (0 for an empty bucket), the k largest |value|,
// ties broken by the lower index, so the choice is a function of the values alone, never of the
// standard library's nth_element. A NaN counts as the largest magnitude: it is sent (and shows
// up downstream) rather than hidden in the residual. The result lists indices in ascending
// order, values beside them.
//
// Wire layout: k indices (uint32) and k values (float32), k * 8 bytes (wire_bytes). pack() puts
// both into one float buffer (indices bit-copied), for communicators that move floats only: such
// a buffer may be copied (all-gather, send) but never reduced. It takes indices below 0x7F800000,
// whose bits are finite floats (no NaN a float copy could alter). pack_words() puts them into
// 2k 32-bit words instead (the values bit-copied), for allgather_words and the ps push wire, and
// unpack_words() takes them apart again.
//
// Thread safety: a TopKCodec is one bucket's state on one rank; not for concurrent use. The free
// functions are pure. scatter_add checks every index against the dense buffer (a shard decodes
// what a worker sent: an index out of range is refused with gradsync::Error, never written).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace gradsync::compression {

struct SparseGradient {
  std::vector<std::uint32_t> indices;  // ascending, distinct
  std::vector<float> values;           // values[i] belongs to indices[i]
};

class TopKCodec {
 public:
  // A bucket of `elements` values (at most 2^32 - 1, the largest uint32 index + 1).
  explicit TopKCodec(std::size_t elements);

  // How many entries select() sends from `elements` at `ratio` in (0, 1]. A product within a
  // relative 1e-12 of an integer counts as that integer: 0.07 * 100 is 7.000000000000001 in
  // doubles, and must send 7, not 8.
  static std::size_t k_for(std::size_t elements, double ratio);

  // Bytes on the wire for k entries: k uint32 indices + k float values.
  static constexpr std::uint64_t wire_bytes(std::size_t k) {
    return static_cast<std::uint64_t>(k) * (sizeof(std::uint32_t) + sizeof(float));
  }

  // Adds `grad` (size() values) to the residual, moves the k largest entries into `out`
  // (replacing its contents; its capacity is reused) and keeps the rest as the new residual.
  void select(std::span<const float> grad, double ratio, SparseGradient& out);
  SparseGradient select(std::span<const float> grad, double ratio);

  std::size_t size() const { return residual_.size(); }
  std::span<const float> residual() const { return residual_; }
  // Forgets the residual (a new run, or after a checkpoint restore that does not keep it).
  void reset();

 private:
  // Buckets of at least kSampledFrom values narrow the selection with a sample of about
  // kSamples of them (top_k_codec.cpp says how; the choice is the same either way).
  static constexpr std::size_t kSampledFrom = 1 << 15;
  static constexpr std::size_t kSamples = 4096;

  // Puts into scratch_ the magnitudes of every entry that may be among the k largest (all n, or
  // those reaching a sampled bound) and returns how many.
  std::size_t gather_candidates(const float* acc, std::size_t n, std::size_t k);

  std::vector<float> residual_;
  std::vector<float> scratch_;  // magnitudes for the selection, kept to avoid reallocations
  std::vector<float> sample_;
};

// dense[indices[i]] += values[i] for every i. Checks sizes match and every index < dense.size().
void scatter_add(std::span<const std::uint32_t> indices, std::span<const float> values,
                 std::span<float> dense);
inline void scatter_add(const SparseGradient& sparse, std::span<float> dense) {
  scatter_add(sparse.indices, sparse.values, dense);
}

// One rank's list as 2k floats: k indices (their bits) then k values; and back, adding.
void pack(const SparseGradient& sparse, std::span<float> out);
void scatter_add_packed(std::span<const float> packed, std::span<float> dense);

// The same as 2k words: k indices, then the k values' bits. out.size() must be 2k (checked).
void pack_words(const SparseGradient& sparse, std::span<std::uint32_t> out);
// And back into `out` (replacing its contents; its capacity is reused). An odd count of words is
// a gradsync::Error; the indices are not checked here (scatter_add checks them).
void unpack_words(std::span<const std::uint32_t> words, SparseGradient& out);

}  // namespace gradsync::compression
