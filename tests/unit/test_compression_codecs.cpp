// The gradient codecs of common/compression/: fp16 and bf16 against their IEEE definition (every
// 16-bit pattern, the rounding boundaries, the fast path bit for bit against the scalar one),
// top-k's choice and its error-feedback invariant, and the bytes each puts on the wire.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/compression/half_codec.h"
#include "common/compression/top_k_codec.h"
#include "common/error.h"
#include "common/random.h"

namespace gradsync::compression {
namespace {

using Floats = std::vector<float>;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Floats random_floats(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  SplitMix64 rng(seed);
  Floats v(n);
  for (float& x : v) x = static_cast<float>(rng.normal() * scale);
  return v;
}

// The value of an fp16 pattern from its definition, in double.
double fp16_value(std::uint16_t h) {
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const double magnitude = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

float from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }

TEST_CASE("compression fp16: every pattern decodes to its IEEE value and re-encodes to itself") {
  for (std::uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const float value = float_from_fp16(half);
    if (((h >> 10) & 0x1F) == 0x1F) {
      CHECK(((h & 0x3FF) ? std::isnan(value) : std::isinf(value)));
      CHECK(std::signbit(value) == bool(h & 0x8000));
      if (h & 0x3FF)
        CHECK((fp16_from_float(value) | 0x200) == (h | 0x200));  // made quiet
      else
        CHECK(fp16_from_float(value) == h);
      continue;
    }
    CHECK(double(value) == fp16_value(half));
    CHECK(fp16_from_float(value) == h);
  }
}

TEST_CASE("compression fp16: round to nearest even at each boundary; overflow and specials") {
  // Ties (1 + 2^-11, 1 + 3 * 2^-11; 2^-25 and 3 * 2^-25 in the subnormals) go to the even
  // mantissa; 65520 is the tie between 65504 and 65536, so it and above are inf; just below
  // 2^-14 rounds up to the smallest normal; a signalling NaN becomes a quiet one, never inf.
  struct Case {
    float x;
    std::uint16_t h;
  };
  // clang-format off
  const Case cases[] = {
      {1.0f, 0x3C00}, {1.0f + 0x1p-11f, 0x3C00}, {1.0f + 3 * 0x1p-11f, 0x3C02},
      {std::nextafter(1.0f + 0x1p-11f, 2.0f), 0x3C01},
      {65504.0f, 0x7BFF}, {std::nextafter(65520.0f, 0.0f), 0x7BFF}, {65520.0f, 0x7C00},
      {-1e9f, 0xFC00}, {0x1p-24f, 0x0001}, {0x1p-25f, 0x0000},
      {std::nextafter(0x1p-25f, 1.0f), 0x0001}, {3 * 0x1p-25f, 0x0002},
      {std::nextafter(0x1p-14f, 0.0f), 0x0400}, {-0.0f, 0x8000}, {1e-30f, 0x0000},
      {kInf, 0x7C00}, {-kInf, 0xFC00}, {from_bits(0x7F800001), 0x7E00}, {from_bits(0xFFC00000), 0xFE00}};
  // clang-format on
  for (const auto& c : cases) {
    CAPTURE(c.x);
    CHECK(fp16_from_float(c.x) == c.h);
  }
}

TEST_CASE("compression fp16: random floats round to the nearest fp16, within 2^-11") {
  SplitMix64 rng(11);
  for (int i = 0; i < 200000; ++i) {
    // Magnitudes from 2^-27 to 2^16: subnormals, normals and the overflow edge.
    const float x =
        static_cast<float>((rng.uniform() * 2 - 1) * std::ldexp(1.0, int(rng.below(44)) - 27));
    const std::uint16_t h = fp16_from_float(x);
    const int magnitude = h & 0x7FFF;
    REQUIRE(bool(h & 0x8000) == std::signbit(x));
    if (magnitude == 0x7C00) {
      CHECK(std::fabs(x) >= 65520.0f);
      continue;
    }
    if (magnitude == 0x7BFF) CHECK(std::fabs(x) < 65520.0f);
    const double error = std::fabs(fp16_value(h) - x);
    // No neighbour of the same sign is nearer; at a tie the chosen mantissa is even.
    for (const int step : {-1, 1}) {
      if (magnitude + step < 0 || magnitude + step >= 0x7C00) continue;
      const auto other = static_cast<std::uint16_t>((h & 0x8000) | (magnitude + step));
      const double other_error = std::fabs(fp16_value(other) - x);
      CHECK(error <= other_error);
      if (error == other_error) CHECK((h & 1) == 0);
    }
    if (std::fabs(x) >= 0x1p-14f) CHECK(error <= std::fabs(double(x)) * 0x1p-11);
  }
}

TEST_CASE("compression fp16/bf16: span functions match the scalar reference bit for bit") {
  MESSAGE("fp16 spans on " << std::string(fp16_uses_f16c() ? "F16C" : "the scalar loop"));
  // Normal values, every bit pattern (NaN payloads, subnormals, overflow) and chosen edges; a
  // length that is not a multiple of 8, so the tail is checked too.
  Floats src = random_floats(20003, 5, 1000.0);
  SplitMix64 rng(6);
  for (std::size_t i = 0; i < 10000; ++i)
    src[i] = from_bits(static_cast<std::uint32_t>(rng.next()));
  const std::uint32_t edges[] = {0x0,        0x80000000, 0x7F800000, 0xFF800000,
                                 0x7F800001, 0xFFBFFFFF, 0x477FF000, 0x477FEFFF,
                                 0x33000000, 0x33C00000, 0x00000001};
  for (std::size_t i = 0; i < std::size(edges); ++i) src[10000 + i] = from_bits(edges[i]);
  std::vector<std::uint16_t> wire(src.size());
  Floats back(src.size());
  for (const float divisor : {1.0f, 3.0f, 4.0f}) {
    encode_fp16(src, wire, divisor);
    for (std::size_t i = 0; i < src.size(); ++i)
      REQUIRE(wire[i] == fp16_from_float(src[i] / divisor));
    encode_bf16(src, wire, divisor);
    for (std::size_t i = 0; i < src.size(); ++i)
      REQUIRE(wire[i] == bf16_from_float(src[i] / divisor));
  }
  std::vector<std::uint16_t> every(65536);
  for (std::size_t i = 0; i < every.size(); ++i) every[i] = static_cast<std::uint16_t>(i);
  Floats decoded(every.size());
  decode_fp16(every, decoded);
  for (std::size_t i = 0; i < every.size(); ++i) {
    REQUIRE(std::bit_cast<std::uint32_t>(decoded[i]) ==
            std::bit_cast<std::uint32_t>(float_from_fp16(every[i])));
  }
  decode_bf16(every, decoded);
  for (std::size_t i = 0; i < every.size(); ++i)
    REQUIRE(std::bit_cast<std::uint32_t>(decoded[i]) == i << 16);
  CHECK_THROWS_AS(encode_fp16(src, std::span(wire).first(10)), Error);
  CHECK_THROWS_AS(decode_bf16(wire, std::span(back).first(10)), Error);
}

TEST_CASE("compression bf16: rounding, specials, exact patterns and 2^-8 relative error") {
  CHECK(bf16_from_float(1.0f) == 0x3F80);
  CHECK(bf16_from_float(1.0f + 0x1p-8f) == 0x3F80);      // tie: to even
  CHECK(bf16_from_float(1.0f + 3 * 0x1p-8f) == 0x3F82);  // tie: to even, up
  CHECK(bf16_from_float(from_bits(0x7F7F7FFF)) == 0x7F7F);
  CHECK(bf16_from_float(std::numeric_limits<float>::max()) == 0x7F80);  // rounds up to inf
  CHECK(bf16_from_float(-kInf) == 0xFF80);
  CHECK(bf16_from_float(from_bits(0x7F800001)) == 0x7FC0);  // NaN whose rounding would be inf
  CHECK(bf16_from_float(from_bits(0xFFFFFFFF)) == 0xFFFF);  // would wrap the sign
  CHECK(bf16_from_float(from_bits(0x00018000)) == 0x0002);  // subnormal tie, to even
  for (std::uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float value = float_from_bf16(static_cast<std::uint16_t>(h));
    if (!std::isnan(value)) CHECK(bf16_from_float(value) == h);
  }
  for (const float x : random_floats(100000, 7, 1e3)) {
    CHECK(std::fabs(float_from_bf16(bf16_from_float(x)) - x) <= std::fabs(x) * 0x1p-8f);
  }
}

TEST_CASE("compression fp16: dividing by N before encoding keeps a sum finite") {
  // Four ranks holding 60000 each: the fp16 sum of the raw values overflows, the average's not.
  const Floats grad(9, 60000.0f), big(9, 120000.0f);
  std::vector<std::uint16_t> wire(9);
  encode_fp16(grad, wire);
  CHECK(float_from_fp16(wire[8]) == 60000.0f);     // 60000 itself fits...
  CHECK(fp16_from_float(4 * 60000.0f) == 0x7C00);  // ...four ranks' sum of it does not
  encode_fp16(grad, wire, 4.0f);
  CHECK(float_from_fp16(wire[3]) == 15000.0f);
  CHECK(float_from_fp16(wire[8]) == 15000.0f);
  encode_fp16(big, wire, 4.0f);  // above 65504 alone, but its share of the average fits
  CHECK(float_from_fp16(wire[0]) == 30000.0f);
  CHECK(float_from_fp16(wire[8]) == 30000.0f);
  CHECK(half_wire_bytes(1000) == 2000);
}

TEST_CASE("compression top-k: k, the choice with ties by index, NaN first, ratio 1 exact") {
  CHECK(TopKCodec::k_for(100, 0.07) == 7);  // 7.000000000000001 in doubles
  CHECK(TopKCodec::k_for(100, 0.01) == 1);
  CHECK(TopKCodec::k_for(10, 0.001) == 1);
  CHECK(TopKCodec::k_for(3, 0.5) == 2);
  CHECK(TopKCodec::k_for(0, 0.5) == 0);
  CHECK_THROWS_AS(TopKCodec::k_for(10, 0.0), Error);
  CHECK_THROWS_AS(TopKCodec::k_for(10, 1.5), Error);
  CHECK(TopKCodec::wire_bytes(7) == 56);

  TopKCodec codec(6);
  const SparseGradient sent = codec.select(Floats{1, -5, 3, 5, -3, 0.5f}, 0.5);
  CHECK(sent.indices == std::vector<std::uint32_t>{1, 2, 3});  // |3| at 2 and 4: the lower
  CHECK(sent.values == Floats{-5, 3, 5});
  CHECK(std::vector(codec.residual().begin(), codec.residual().end()) ==
        Floats{1, 0, 0, 0, -3, 0.5f});

  Floats flat(1000);  // every magnitude equal: the lowest indices, whatever nth_element does
  for (std::size_t i = 0; i < flat.size(); ++i) flat[i] = i % 2 ? 1.0f : -1.0f;
  TopKCodec ties(flat.size());
  const SparseGradient first = ties.select(flat, 0.1);
  for (std::uint32_t i = 0; i < 100; ++i) CHECK(first.indices[i] == i);

  TopKCodec late(4);  // a tie at the k-th magnitude comes before a larger value
  CHECK(late.select(Floats{3, -3, 5, 3}, 0.5).indices == std::vector<std::uint32_t>{0, 2});

  // Against a full sort by (magnitude descending, index ascending), over values with many ties.
  SplitMix64 rng(4);
  for (const double ratio : {0.01, 0.1, 0.37, 0.9}) {
    Floats grad(200);
    for (float& g : grad) g = float(int(rng.below(7)) - 3);
    std::vector<std::uint32_t> order(grad.size());
    for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::ranges::sort(order, [&](std::uint32_t a, std::uint32_t b) {
      return std::fabs(grad[a]) > std::fabs(grad[b]) ||
             (std::fabs(grad[a]) == std::fabs(grad[b]) && a < b);
    });
    order.resize(TopKCodec::k_for(grad.size(), ratio));
    std::ranges::sort(order);
    CHECK(TopKCodec(grad.size()).select(grad, ratio).indices == order);
  }

  TopKCodec with_nan(3);
  CHECK(with_nan.select(Floats{1, kNaN, 2}, 0.3).indices == std::vector<std::uint32_t>{1});

  const Floats grad = random_floats(777, 3);
  TopKCodec all(grad.size());
  const SparseGradient everything = all.select(grad, 1.0);
  REQUIRE(everything.indices.size() == grad.size());
  for (std::size_t i = 0; i < grad.size(); ++i) {
    CHECK(everything.indices[i] == i);
    CHECK(everything.values[i] == grad[i]);
    CHECK(all.residual()[i] == 0.0f);
  }
  CHECK_THROWS_AS(all.select(Floats(3), 1.0), Error);
}

TEST_CASE("compression top-k: sent plus residual is the running sum of gradients") {
  for (const bool integers : {true, false}) {
    CAPTURE(integers);
    const std::size_t n = 500;
    TopKCodec codec(n);
    std::vector<double> sent(n, 0.0), sum(n, 0.0), magnitude(n, 0.0);
    SplitMix64 rng(integers ? 1 : 2);
    for (int step = 0; step < 8; ++step) {
      Floats grad(n);
      for (float& g : grad) g = integers ? float(int(rng.below(101)) - 50) : float(rng.normal());
      for (std::size_t i = 0; i < n; ++i) sum[i] += grad[i], magnitude[i] += std::fabs(grad[i]);
      const SparseGradient out = codec.select(grad, 0.1);
      CHECK(out.indices.size() == 50);
      for (std::size_t i = 0; i < out.indices.size(); ++i) sent[out.indices[i]] += out.values[i];
      for (std::size_t i = 0; i < n; ++i) {
        const double total = sent[i] + codec.residual()[i];
        if (integers)
          REQUIRE(total == sum[i]);
        else
          REQUIRE(std::fabs(total - sum[i]) <= 1e-6 * (1 + magnitude[i]));
      }
    }
  }
}

TEST_CASE("compression top-k: scatter_add from several ranks, packed, and refused garbage") {
  const std::size_t n = 300;
  std::vector<Floats> grads;
  Floats dense(n, 0.0f), packed_dense(n, 0.0f), expected(n, 0.0f);
  for (int rank = 0; rank < 3; ++rank) {
    grads.push_back(random_floats(n, 40 + rank));
    for (std::size_t i = 0; i < n; ++i) expected[i] += grads.back()[i];
    TopKCodec codec(n);  // ratio 1: the sum equals `none` up to summation order
    const SparseGradient sparse = codec.select(grads.back(), 1.0);
    scatter_add(sparse, dense);
    Floats packed(2 * sparse.indices.size());
    pack(sparse, packed);
    scatter_add_packed(packed, packed_dense);
  }
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(std::fabs(dense[i] - expected[i]) <= 1e-6f * (1 + std::fabs(expected[i])));
    CHECK(packed_dense[i] == dense[i]);
  }
  const Floats before = dense;
  const std::vector<std::uint32_t> bad = {0, 300};
  CHECK_THROWS_WITH_AS(scatter_add(bad, Floats{1, 2}, dense), doctest::Contains("index 300"),
                       Error);
  CHECK(dense == before);  // nothing written
  CHECK_THROWS_AS(scatter_add(bad, Floats{1}, dense), Error);
  CHECK_THROWS_AS(scatter_add_packed(Floats(3), dense), Error);
}

}  // namespace
}  // namespace gradsync::compression
