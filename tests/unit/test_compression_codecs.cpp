// The gradient codecs of common/compression/: fp16 and bf16 against their IEEE definition (every
// 16-bit pattern, the rounding boundaries, the fast path bit for bit against the scalar one),
// top-k's choice and its error-feedback invariant, PowerSGD's exactness at full rank (one rank
// and two simulated ones), its warm start and seed, and the bytes each puts on the wire.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/compression/half_codec.h"
#include "common/compression/power_sgd_codec.h"
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

// Buckets of 2^15 values and more narrow the selection with a strided sample first; the
// choice must stay the full sort's: random values, values that repeat (ties at the k-th), a
// bucket whose sampled entries are all larger than the rest (the bound too high: every entry
// is a candidate again), and a NaN.
TEST_CASE("compression top-k: large buckets choose exactly what a full sort chooses") {
  const auto by_sort = [](const Floats& grad, double ratio) {
    std::vector<std::uint32_t> order(grad.size());
    for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    const auto mag = [&](std::uint32_t i) {
      return std::isnan(grad[i]) ? std::numeric_limits<float>::infinity() : std::fabs(grad[i]);
    };
    std::ranges::stable_sort(order, [&](std::uint32_t a, std::uint32_t b) { return mag(a) > mag(b); });
    order.resize(TopKCodec::k_for(grad.size(), ratio));
    std::ranges::sort(order);
    return order;
  };
  SplitMix64 rng(11);
  const std::size_t n = 270000;
  Floats random = random_floats(n, 5);
  Floats repeats(n);
  for (float& g : repeats) g = float(int(rng.below(41)) - 20);
  Floats sampled_high(n, 0.5f);  // every 65th entry (the sample's stride) large, the rest small
  for (std::size_t i = 0; i < n; i += n / 4096) sampled_high[i] = 100.0f + float(i % 7);
  Floats with_nan = random;
  with_nan[12345] = kNaN;
  for (const Floats* grad : {&random, &repeats, &sampled_high, &with_nan}) {
    for (const double ratio : {0.001, 0.01, 0.05}) {
      CAPTURE(ratio);
      TopKCodec codec(n);
      const SparseGradient sent = codec.select(*grad, ratio);
      const std::vector<std::uint32_t> expected = by_sort(*grad, ratio);
      CHECK(sent.indices == expected);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < sent.indices.size(); ++i) {
        const float g = (*grad)[sent.indices[i]];
        wrong += std::isnan(g) ? !std::isnan(sent.values[i]) : sent.values[i] != g;
      }
      CHECK(wrong == 0);
    }
  }
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

// One PowerSGD step over simulated ranks: P and Q averaged between phases, as the all-reduce
// would. Each m in `ms` becomes the approximation.
void power_sgd_step(std::vector<PowerSgdCodec>& codecs, std::vector<Floats>& ms) {
  const auto average_into = [&](std::vector<std::span<float>> spans) {
    for (std::size_t i = 0; i < spans[0].size(); ++i) {
      double sum = 0;
      for (const auto& s : spans) sum += s[i];
      for (const auto& s : spans) s[i] = static_cast<float>(sum / double(spans.size()));
    }
  };
  std::vector<std::span<float>> ps, qs;
  for (std::size_t r = 0; r < codecs.size(); ++r) ps.push_back(codecs[r].compute_p(ms[r]));
  average_into(ps);
  for (auto& codec : codecs) codec.orthonormalize_p();
  for (std::size_t r = 0; r < codecs.size(); ++r) qs.push_back(codecs[r].compute_q(ms[r]));
  average_into(qs);
  for (std::size_t r = 0; r < codecs.size(); ++r) codecs[r].decompress(ms[r]);
}

TEST_CASE("compression PowerSGD: at rank >= min(n, m) it equals the uncompressed average") {
  struct Shape {
    std::size_t n, m, rank;
  };
  for (const Shape s :
       {Shape{5, 3, 3}, Shape{3, 5, 3}, Shape{4, 4, 4}, Shape{16, 7, 9}, Shape{6, 40, 6}}) {
    for (const int ranks : {1, 2}) {
      CAPTURE(s.n);
      CAPTURE(s.m);
      CAPTURE(ranks);
      std::vector<PowerSgdCodec> codecs(ranks, PowerSgdCodec(s.n, s.m, s.rank, 99));
      CHECK(codecs[0].rank() == std::min(s.n, s.m));
      for (int step = 0; step < 4; ++step) {  // residuals carry over between steps
        std::vector<Floats> ms;
        Floats average(s.n * s.m, 0.0f);
        for (int r = 0; r < ranks; ++r) {
          ms.push_back(random_floats(s.n * s.m, 1000 * step + r));
          for (std::size_t i = 0; i < average.size(); ++i)
            average[i] += ms.back()[i] / float(ranks);
        }
        power_sgd_step(codecs, ms);
        for (std::size_t i = 0; i < average.size(); ++i) {
          REQUIRE(std::fabs(ms[0][i] - average[i]) <= 1e-5f);
          if (ranks == 2) REQUIRE(ms[1][i] == ms[0][i]);  // every rank applies the same bits
        }
      }
    }
  }
}

TEST_CASE("compression PowerSGD: rank-1 matrix exact; error feedback keeps what is missed") {
  const Floats u = {1, -2, 3, 0.5f, 4, -1}, v = {2, 1, -3, 0.25f};
  Floats outer(u.size() * v.size());
  for (std::size_t i = 0; i < u.size(); ++i)
    for (std::size_t j = 0; j < v.size(); ++j) outer[i * v.size() + j] = u[i] * v[j];
  for (const std::size_t rank : {1, 2}) {
    std::vector<PowerSgdCodec> codecs(1, PowerSgdCodec(u.size(), v.size(), rank, 5));
    std::vector<Floats> ms = {outer};
    power_sgd_step(codecs, ms);
    for (std::size_t i = 0; i < outer.size(); ++i) CHECK(std::fabs(ms[0][i] - outer[i]) <= 1e-5f);
    if (rank == 2) {  // the second column of P depends on the first: zero, not noise
      for (std::size_t i = 0; i < u.size(); ++i) CHECK(codecs[0].p()[i * 2 + 1] == 0.0f);
    }
  }
  // Rank 1 of a random matrix: approximation + residual == the gradient it was given.
  std::vector<PowerSgdCodec> codecs(1, PowerSgdCodec(8, 6, 1, 5));
  const Floats grad = random_floats(48, 8);
  std::vector<Floats> ms = {grad};
  power_sgd_step(codecs, ms);
  double missed = 0;
  for (std::size_t i = 0; i < grad.size(); ++i) {
    CHECK(std::fabs(ms[0][i] + codecs[0].residual()[i] - grad[i]) <= 1e-6f);
    missed += std::fabs(codecs[0].residual()[i]);
  }
  CHECK(missed > 1.0);  // rank 1 cannot hold a random 8 x 6 matrix: something waits
}

TEST_CASE("compression PowerSGD: seed, warm start, zero gradients, order and bytes") {
  const PowerSgdCodec fresh(7, 5, 2, 42), other(7, 5, 2, 43);
  std::vector<PowerSgdCodec> a(1, fresh), b(1, PowerSgdCodec(7, 5, 2, 42));
  CHECK(std::ranges::equal(a[0].q(), b[0].q()));  // the same seed: the same Q, bit for bit
  CHECK(!std::ranges::equal(a[0].q(), other.q()));
  // After a step, a's next P is (gradient + residual) times the Q that step averaged, made
  // orthonormal: the warm start, not the seed's Q that a fresh codec (b) still holds.
  std::vector<Floats> ms = {random_floats(35, 1)};
  power_sgd_step(a, ms);
  Floats warm(a[0].q().begin(), a[0].q().end());
  orthonormalize_columns(warm, 5, 2);
  Floats m2 = random_floats(35, 2), fed = m2;
  for (std::size_t i = 0; i < fed.size(); ++i) fed[i] += a[0].residual()[i];
  const std::span<const float> p = a[0].compute_p(m2);
  CHECK(m2 == fed);  // error feedback, in place
  for (std::size_t i = 0; i < 7; ++i)
    for (std::size_t c = 0; c < 2; ++c) {
      double sum = 0;
      for (std::size_t j = 0; j < 5; ++j) sum += double(fed[i * 5 + j]) * warm[j * 2 + c];
      CHECK(std::fabs(p[i * 2 + c] - sum) <= 1e-5);
    }
  Floats m2_again = random_floats(35, 2);
  CHECK(!std::ranges::equal(p, b[0].compute_p(m2_again)));
  // reset: back to the seed's Q and no residual, as b is.
  a[0].reset();
  m2 = random_floats(35, 2);
  CHECK(std::ranges::equal(a[0].compute_p(m2), b[0].p()));
  // A zero gradient leaves Q zero; the next step redraws it and is exact at full rank again.
  std::vector<PowerSgdCodec> zeroed(1, PowerSgdCodec(4, 3, 3, 1));
  std::vector<Floats> zero = {Floats(12, 0.0f)};
  power_sgd_step(zeroed, zero);
  CHECK(std::ranges::all_of(zeroed[0].q(), [](float x) { return x == 0.0f; }));
  const Floats grad = random_floats(12, 9);
  std::vector<Floats> next = {grad};
  power_sgd_step(zeroed, next);
  for (std::size_t i = 0; i < grad.size(); ++i) CHECK(std::fabs(next[0][i] - grad[i]) <= 1e-5f);
  // Phases out of order, wrong sizes; the bytes on the wire.
  PowerSgdCodec c(4, 3, 2, 1);
  Floats m(12, 1.0f);
  CHECK_THROWS_AS(c.compute_q(m), Error);
  Floats short_m(11);
  CHECK_THROWS_AS(c.compute_p(short_m), Error);
  CHECK(PowerSgdCodec::wire_bytes(784, 256, 4) == (784 + 256) * 4 * 4);
  CHECK(PowerSgdCodec::wire_bytes(3, 5, 8) == (3 + 5) * 3 * 4);
  CHECK(c.wire_bytes() == (4 + 3) * 2 * 4);
}

TEST_CASE("compression PowerSGD: orthonormalize_columns keeps zero and dependent columns zero") {
  Floats a = random_floats(7 * 4, 3);
  for (std::size_t i = 0; i < 7; ++i) a[i * 4 + 1] = 0.0f, a[i * 4 + 3] = 2 * a[i * 4 + 0];
  CHECK(orthonormalize_columns(a, 7, 4) == 2);
  for (std::size_t x = 0; x < 4; ++x)
    for (std::size_t y = 0; y < 4; ++y) {
      double d = 0;
      for (std::size_t i = 0; i < 7; ++i) d += double(a[i * 4 + x]) * a[i * 4 + y];
      const bool unit = x == y && (x == 0 || x == 2);
      CHECK(std::fabs(d - (unit ? 1.0 : 0.0)) <= 1e-6);
    }
  Floats with_nan = {1, kNaN, 2, 3};
  orthonormalize_columns(with_nan, 2, 2);
  CHECK(std::isnan(with_nan[1]));
}

}  // namespace
}  // namespace gradsync::compression
