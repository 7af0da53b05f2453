#include "common/compression/top_k_codec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "common/error.h"

namespace gradsync::compression {
namespace {

constexpr std::uint32_t kPackableIndexEnd = 0x7F800000u;

// The magnitude select() ranks an entry by: a NaN counts as the largest, so it is sent.
float magnitude(float v) {
  return std::isnan(v) ? std::numeric_limits<float>::infinity() : std::fabs(v);
}

}  // namespace

TopKCodec::TopKCodec(std::size_t elements) : residual_(elements, 0.0f) {
  GRADSYNC_CHECK(elements <= std::numeric_limits<std::uint32_t>::max(),
                 "top-k bucket of " + std::to_string(elements) +
                     " values: indices are uint32, at most 2^32 - 1 values per bucket");
}

std::size_t TopKCodec::k_for(std::size_t elements, double ratio) {
  GRADSYNC_CHECK(ratio > 0.0 && ratio <= 1.0,
                 "top-k ratio " + std::to_string(ratio) + " is not in (0, 1]");
  if (elements == 0) return 0;
  const double exact = ratio * static_cast<double>(elements);
  const double k = std::ceil(exact - exact * 1e-12);
  return std::clamp<std::size_t>(static_cast<std::size_t>(k), 1, elements);
}

void TopKCodec::select(std::span<const float> grad, double ratio, SparseGradient& out) {
  GRADSYNC_CHECK(grad.size() == residual_.size(), "top-k select: " + std::to_string(grad.size()) +
                                                      " values for a bucket of " +
                                                      std::to_string(residual_.size()));
  const std::size_t n = residual_.size();
  const std::size_t k = k_for(n, ratio);
  // Error feedback: what was not sent before competes again, added to this step's gradient.
  float* acc = residual_.data();
  for (std::size_t i = 0; i < n; ++i) acc[i] += grad[i];

  out.indices.resize(k);
  out.values.resize(k);
  if (k == n) {
    // Everything goes: no selection to make, and the residual becomes zero.
    for (std::size_t i = 0; i < n; ++i) out.indices[i] = static_cast<std::uint32_t>(i);
    std::copy(residual_.begin(), residual_.end(), out.values.begin());
    std::fill(residual_.begin(), residual_.end(), 0.0f);
    return;
  }
  // The k-th largest magnitude t, from a copy (nth_element reorders it) of the candidates
  // (below). The k chosen are then every entry above t and, of those equal to t, the lowest
  // indices: one forward pass, which also lists them in ascending order.
  const std::size_t candidates = gather_candidates(acc, n, k);
  const auto kth = scratch_.begin() + static_cast<std::ptrdiff_t>(k - 1);
  std::nth_element(scratch_.begin(), kth, scratch_.begin() + std::ptrdiff_t(candidates),
                   std::greater<float>());
  const float threshold = *kth;
  // Those before the k-th are >= t: the ones equal to t among them, with t itself, are the ties
  // that make it in.
  std::size_t ties = 1 + static_cast<std::size_t>(std::count(scratch_.begin(), kth, threshold));
  std::size_t taken = 0;
  for (std::size_t i = 0; i < n && taken < k; ++i) {
    const float m = magnitude(acc[i]);
    if (m > threshold || (m == threshold && ties > 0)) {
      if (m == threshold) --ties;
      out.indices[taken] = static_cast<std::uint32_t>(i);
      out.values[taken] = acc[i];
      acc[i] = 0.0f;  // sent: nothing of it stays behind
      ++taken;
    }
  }
}

std::size_t TopKCodec::gather_candidates(const float* acc, std::size_t n, std::size_t k) {
  scratch_.resize(n);
  // A bound b from a strided sample: the magnitude about 2k/n of the way down it, so that some
  // 2k entries reach it. If at least k do, the k largest all do (each is >= the k-th largest >=
  // b), and t is the k-th largest of those alone: an nth_element over ~2k values instead of n
  // (at 1% of a 270k-value bucket, most of select()'s time went there). Fewer than k: b was
  // too high for these values, and every entry is a candidate, as without the sample.
  if (n >= kSampledFrom && k * 8 <= n) {
    const std::size_t stride = n / kSamples;
    sample_.clear();
    for (std::size_t i = 0; i < n; i += stride) sample_.push_back(magnitude(acc[i]));
    const std::size_t rank = std::min(sample_.size() - 1, 2 * k * sample_.size() / n);
    const auto at = sample_.begin() + static_cast<std::ptrdiff_t>(rank);
    std::nth_element(sample_.begin(), at, sample_.end(), std::greater<float>());
    const float bound = *at;
    std::size_t count = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float m = magnitude(acc[i]);
      scratch_[count] = m;
      count += m >= bound ? 1 : 0;
    }
    if (count >= k) return count;
  }
  for (std::size_t i = 0; i < n; ++i) scratch_[i] = magnitude(acc[i]);
  return n;
}

SparseGradient TopKCodec::select(std::span<const float> grad, double ratio) {
  SparseGradient out;
  select(grad, ratio, out);
  return out;
}

void TopKCodec::reset() { std::fill(residual_.begin(), residual_.end(), 0.0f); }

void scatter_add(std::span<const std::uint32_t> indices, std::span<const float> values,
                 std::span<float> dense) {
  if (indices.size() != values.size()) {
    throw Error("sparse gradient: " + std::to_string(indices.size()) + " indices but " +
                std::to_string(values.size()) + " values");
  }
  // Check first, write after: a bad list leaves `dense` untouched.
  for (const std::uint32_t index : indices) {
    if (index >= dense.size()) {
      throw Error("sparse gradient: index " + std::to_string(index) + " outside a buffer of " +
                  std::to_string(dense.size()) + " values");
    }
  }
  for (std::size_t i = 0; i < indices.size(); ++i) dense[indices[i]] += values[i];
}

void pack(const SparseGradient& sparse, std::span<float> out) {
  const std::size_t k = sparse.indices.size();
  GRADSYNC_CHECK(sparse.values.size() == k && out.size() == 2 * k,
                 "pack: " + std::to_string(k) + " entries need " + std::to_string(2 * k) +
                     " floats, given " + std::to_string(out.size()));
  for (std::size_t i = 0; i < k; ++i) {
    // Below 0x7F800000 an index's bits are a finite float, never a NaN that a copy through
    // floating-point registers could make quiet (change).
    GRADSYNC_CHECK(sparse.indices[i] < kPackableIndexEnd,
                   "pack: index " + std::to_string(sparse.indices[i]) + " is too large to pack");
    out[i] = std::bit_cast<float>(sparse.indices[i]);
  }
  std::copy(sparse.values.begin(), sparse.values.end(),
            out.begin() + static_cast<std::ptrdiff_t>(k));
}

void scatter_add_packed(std::span<const float> packed, std::span<float> dense) {
  if (packed.size() % 2 != 0) {
    throw Error("packed sparse gradient of " + std::to_string(packed.size()) +
                " floats: not k indices and k values");
  }
  const std::size_t k = packed.size() / 2;
  for (std::size_t i = 0; i < k; ++i) {
    const std::uint32_t index = std::bit_cast<std::uint32_t>(packed[i]);
    if (index >= dense.size()) {
      throw Error("packed sparse gradient: index " + std::to_string(index) +
                  " outside a buffer of " + std::to_string(dense.size()) + " values");
    }
  }
  for (std::size_t i = 0; i < k; ++i)
    dense[std::bit_cast<std::uint32_t>(packed[i])] += packed[k + i];
}

void pack_words(const SparseGradient& sparse, std::span<std::uint32_t> out) {
  const std::size_t k = sparse.indices.size();
  GRADSYNC_CHECK(sparse.values.size() == k && out.size() == 2 * k,
                 "pack_words: " + std::to_string(k) + " entries need " + std::to_string(2 * k) +
                     " words, given " + std::to_string(out.size()));
  std::copy(sparse.indices.begin(), sparse.indices.end(), out.begin());
  std::transform(sparse.values.begin(), sparse.values.end(),
                 out.begin() + static_cast<std::ptrdiff_t>(k),
                 [](float v) { return std::bit_cast<std::uint32_t>(v); });
}

void unpack_words(std::span<const std::uint32_t> words, SparseGradient& out) {
  if (words.size() % 2 != 0) {
    throw Error("sparse gradient of " + std::to_string(words.size()) +
                " words: not k indices and k values");
  }
  const std::size_t k = words.size() / 2;
  out.indices.assign(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(k));
  out.values.resize(k);
  std::transform(words.begin() + static_cast<std::ptrdiff_t>(k), words.end(), out.values.begin(),
                 [](std::uint32_t bits) { return std::bit_cast<float>(bits); });
}

}  // namespace gradsync::compression
