// The shard with encoded pushes (comm.compression on ps), ShardState driven directly: fp16,
// bf16 and top-k pushes decoded into the chunk's fp32 gradient before the consistency rules
// apply them, checked against the same shard fed the decoded gradients as plain fp32 pushes;
// a top-k index outside its chunk refused with an ERROR naming the worker.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/compression/half_codec.h"
#include "common/compression/top_k_codec.h"
#include "server/push_decoder.h"
#include "server/shard_state.h"
#include "tests/support/shard_driver.h"

using namespace gradsync;
using namespace gradsync::testing;
using namespace std::chrono_literals;
using wire::PushEncoding;

namespace {

// Two chunks, the second short: encodings per chunk, and a chunk that does not start at key 0.
constexpr std::uint64_t kModel = ParamStore::kChunkFloats + 1000;

// Worker r's gradient: values of both signs over several orders of magnitude (what fp16 rounds
// differently from fp32), the same for a given (rank, step).
std::vector<float> gradient(int rank, std::uint64_t step, std::uint64_t n = kModel) {
  std::mt19937 rng(static_cast<std::uint32_t>(1000 * rank + step));
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> exponent(-12, 2);
  std::vector<float> g(n);
  for (float& v : g) v = normal(rng) * std::ldexp(1.f, exponent(rng));
  return g;
}

Buffer bytes_of(std::span<const std::byte> bytes) { return Buffer::copy_of(bytes); }

// One PUSHPULL of `chunk` (keys of the whole model) carrying `payload` in `encoding`.
std::vector<Outgoing> push_encoded(Driver& d, int rank, std::uint64_t step, KeyRange chunk,
                                   PushEncoding encoding, const Buffer& payload) {
  const auto h = wire::make_header(MessageType::kPushPull, rank, step, chunk.begin, chunk.end,
                                   payload.size(), static_cast<std::uint32_t>(encoding));
  return d.send(rank, h, payload);
}

std::vector<Outgoing> push_fp32(Driver& d, int rank, std::uint64_t step, KeyRange chunk,
                                std::span<const float> g) {
  const std::span<const float> part = g.subspan(chunk.begin, chunk.size());
  return push_encoded(d, rank, step, chunk, PushEncoding::kFp32, bytes_of(std::as_bytes(part)));
}

// The chunk of `g` in 16 bits; `rounded` gets the values the shard will decode.
Buffer half_payload(PushEncoding encoding, std::span<const float> g, KeyRange chunk,
                    std::vector<float>& rounded) {
  const std::span<const float> part = g.subspan(chunk.begin, chunk.size());
  std::vector<std::uint16_t> halves(part.size());
  std::vector<float> back(part.size());
  if (encoding == PushEncoding::kFp16) {
    compression::encode_fp16(part, halves);
    compression::decode_fp16(halves, back);
  } else {
    compression::encode_bf16(part, halves);
    compression::decode_bf16(halves, back);
  }
  std::copy(back.begin(), back.end(), rounded.begin() + static_cast<std::ptrdiff_t>(chunk.begin));
  return bytes_of(std::as_bytes(std::span<const std::uint16_t>(halves)));
}

// k indices (relative to the chunk) then k values, as PushEncoder lays them out.
Buffer top_k_payload(const compression::SparseGradient& sparse) {
  std::vector<std::byte> bytes(8 * sparse.indices.size());
  std::memcpy(bytes.data(), sparse.indices.data(), 4 * sparse.indices.size());
  std::memcpy(bytes.data() + 4 * sparse.indices.size(), sparse.values.data(),
              4 * sparse.values.size());
  return bytes_of(bytes);
}

}  // namespace

TEST_CASE("ps shard: fp16, bf16 and top-k pushes apply as their decoded fp32 gradients") {
  // Three workers push every step, each in its own encoding (a shard takes any mix, per push):
  // worker 0 fp16, worker 1 bf16, worker 2 top-k 10% with error feedback. A second shard gets
  // exactly what the first decodes, as fp32 pushes: the parameters must be bit for bit the same
  // (decoding is exact, and the sum and average are the fp32 path's). A third shard gets the
  // unrounded fp32 gradients of workers 0 and 1: fp16 and bf16 stay within their precision.
  for (const Mode mode : {Mode::kSync, Mode::kAsync}) {
    CAPTURE(static_cast<int>(mode));
    Log log;
    ShardState encoded(options_for(3, kModel, mode, log), Clock::now());
    ShardState decoded(options_for(3, kModel, mode, log), Clock::now());
    Driver e{encoded, kModel}, p{decoded, kModel};
    e.start(3, 0.5f);
    p.start(3, 0.5f);
    std::vector<compression::TopKCodec> top_k;
    for (const KeyRange& c : chunk_ranges(encoded.range())) top_k.emplace_back(c.size());
    for (std::uint64_t step = 0; step < 4; ++step) {
      std::vector<std::vector<float>> sent(3, std::vector<float>(kModel, 0.f));
      for (std::size_t c = 0; c < top_k.size(); ++c) {
        const KeyRange chunk = chunk_ranges(encoded.range())[c];
        for (int r = 0; r < 3; ++r) {
          const std::vector<float> g = gradient(r, step);
          Buffer payload;
          PushEncoding encoding = PushEncoding::kTopK;
          if (r < 2) {
            encoding = r == 0 ? PushEncoding::kFp16 : PushEncoding::kBf16;
            payload = half_payload(encoding, g, chunk, sent[r]);
          } else {
            const auto part = std::span<const float>(g).subspan(chunk.begin, chunk.size());
            const compression::SparseGradient sparse = top_k[c].select(part, 0.1);
            CHECK(sparse.indices.size() == compression::TopKCodec::k_for(chunk.size(), 0.1));
            payload = top_k_payload(sparse);
            compression::scatter_add(sparse, std::span<float>(sent[r]).subspan(chunk.begin));
          }
          const auto out_e = push_encoded(e, r, step, chunk, encoding, payload);
          const auto out_p = push_fp32(p, r, step, chunk, sent[r]);
          CHECK(out_e.size() == out_p.size());
          for (const Outgoing& o : out_e) CHECK(o.header.type == MessageType::kReply);
        }
      }
    }
    CHECK(encoded.version() == decoded.version());
    CHECK(std::equal(encoded.params().begin(), encoded.params().end(), decoded.params().begin()));
    CHECK(log.size() == 0);
  }
}

TEST_CASE("ps shard: an fp16 push follows the fp32 one within fp16's precision") {
  // Sync, two workers, one step with lr 0.1 from 0: params = -0.1 * mean. fp16 rounds each
  // value to within a relative 2^-11 (half an ulp of its 11-bit significand) where it is normal
  // (>= 2^-14), and to within 2^-25 absolute (half the smallest subnormal) below that; the mean
  // of two such values, times 0.1, is then off by at most 0.1 * (e0 + e1) / 2, plus the few fp32
  // roundings both sides make in the sum, the average and the update.
  Log log;
  ShardState half(options_for(2, kModel, Mode::kSync, log), Clock::now());
  ShardState full(options_for(2, kModel, Mode::kSync, log), Clock::now());
  Driver h{half, kModel}, f{full, kModel};
  h.start(2, 0.f);
  f.start(2, 0.f);
  std::vector<float> unused(kModel);
  for (const KeyRange& chunk : chunk_ranges(half.range())) {
    for (int r = 0; r < 2; ++r) {
      const std::vector<float> g = gradient(r, 0);
      push_encoded(h, r, 0, chunk, PushEncoding::kFp16,
                   half_payload(PushEncoding::kFp16, g, chunk, unused));
      push_fp32(f, r, 0, chunk, g);
    }
  }
  const std::vector<float> g0 = gradient(0, 0), g1 = gradient(1, 0);
  std::size_t wrong = 0;
  auto rounding = [](float g) {
    return std::max(std::abs(double(g)) * std::ldexp(1.0, -11), std::ldexp(1.0, -25));
  };
  for (std::size_t i = 0; i < kModel; ++i) {
    const double fp32 = 4 * std::ldexp(1.0, -24) * std::abs(double(full.params()[i]));
    const double bound = 0.1 * 0.5 * (rounding(g0[i]) + rounding(g1[i])) + fp32;
    wrong += std::abs(double(half.params()[i]) - double(full.params()[i])) > bound;
  }
  CHECK(wrong == 0);
  CHECK(half.params()[0] != full.params()[0]);  // it did round (this value is not an fp16 one)
}

TEST_CASE("ps shard: top-k at ratio 1 gives exactly the fp32 push's update") {
  // Every entry sent, in fp32, residual zero: the decoded chunk is the gradient itself.
  Log log;
  ShardState sparse(options_for(2, kModel, Mode::kSync, log), Clock::now());
  ShardState dense(options_for(2, kModel, Mode::kSync, log), Clock::now());
  Driver s{sparse, kModel}, d{dense, kModel};
  s.start(2, 1.f);
  d.start(2, 1.f);
  for (std::uint64_t step = 0; step < 3; ++step) {
    for (const KeyRange& chunk : chunk_ranges(sparse.range())) {
      for (int r = 0; r < 2; ++r) {
        const std::vector<float> g = gradient(r, step);
        const auto part = std::span<const float>(g).subspan(chunk.begin, chunk.size());
        compression::TopKCodec codec(chunk.size());
        const Buffer payload = top_k_payload(codec.select(part, 1.0));
        CHECK(payload.size() == 8 * chunk.size());
        push_encoded(s, r, step, chunk, PushEncoding::kTopK, payload);
        push_fp32(d, r, step, chunk, g);
      }
    }
  }
  CHECK(std::equal(sparse.params().begin(), sparse.params().end(), dense.params().begin()));
}

TEST_CASE("ps shard: a top-k index outside its chunk is refused with an ERROR naming the worker") {
  Log log;
  ShardState state(options_for(2, kModel, Mode::kSync, log), Clock::now());
  Driver d{state, kModel};
  d.start(2, 1.f);
  const KeyRange second = chunk_ranges(state.range()).at(1);  // 1000 keys from kChunkFloats
  compression::SparseGradient bad;
  bad.indices = {3, 1000};  // 1000 is one past the chunk's last key
  bad.values = {1.f, 1.f};
  auto out = push_encoded(d, 1, 0, second, PushEncoding::kTopK, top_k_payload(bad));
  REQUIRE(out.size() == 1);
  const std::string expected =
      "worker 1 pushed chunk 1 of step 0 as topk: top-k index 1000 is outside the chunk's 1000 "
      "keys [131072, 132072)";
  CHECK(error_text(out[0]) == expected);
  CHECK(log.has("shard 0: " + expected));
  // Nothing was applied nor counted: the same worker may push that chunk properly, and the step
  // completes with the others' pushes as usual.
  bad.indices = {3, 999};
  CHECK(push_encoded(d, 1, 0, second, PushEncoding::kTopK, top_k_payload(bad)).empty());
  d.push_chunk(1, 0, 0, 0.f);
  d.push_chunk(0, 0, 0, 0.f);
  out = d.push_chunk(0, 0, 1, 0.f);
  REQUIRE(out.size() == 2);
  CHECK(state.version() == 1);
  // lr 0.1, mean of (worker 0: 0, worker 1: 1 at keys 3 and 999 of the chunk).
  CHECK(state.params()[second.begin + 3] == doctest::Approx(1.f - 0.1f * 0.5f));
  CHECK(state.params()[second.begin + 999] == doctest::Approx(1.f - 0.1f * 0.5f));
  CHECK(state.params()[second.begin + 4] == 1.f);
  // A payload size that cannot be its encoding's is decode_header's: logged, never answered.
  const auto h = wire::make_header(MessageType::kPushPull, 0, 1, second.begin, second.end,
                                   4 * second.size(), static_cast<std::uint32_t>(2));
  CHECK(d.send(0, h, floats_frame(second.size(), 0.f)).empty());
  CHECK(
      log.has("rejected message from 7730: payload_bytes: 4000 for PUSHPULL bf16 keys "
              "[131072, 132072), expected 2000 (2 x 1000 keys)"));
  CHECK(state.rejected() == 1);
}

TEST_CASE("ps shard: decode_push widens 16-bit values and scatters top-k entries") {
  const std::vector<float> values = {1.f, -2.5f, 0.f, 65504.f};
  std::vector<std::uint16_t> halves(values.size());
  compression::encode_fp16(values, halves);
  auto header = wire::make_header(MessageType::kPushPull, 0, 0, 8, 12, 8, 1);
  Buffer grad =
      decode_push(header, Buffer::copy_of(std::as_bytes(std::span<const std::uint16_t>(halves))));
  REQUIRE(grad.size() == 16);
  CHECK(
      std::equal(values.begin(), values.end(), reinterpret_cast<const float*>(grad.bytes.data())));
  // fp32 goes through untouched, the same bytes.
  const Buffer plain = Buffer::copy_of(std::as_bytes(std::span<const float>(values)));
  header = wire::make_header(MessageType::kPushPull, 0, 0, 8, 12, 16, 0);
  CHECK(decode_push(header, plain).bytes.data() == plain.bytes.data());
  // Top-k: unlisted keys are zero.
  compression::SparseGradient sparse{{1, 3}, {7.f, -1.f}};
  header = wire::make_header(MessageType::kPushPull, 0, 0, 8, 12, 16, 3);
  grad = decode_push(header, top_k_payload(sparse));
  const auto* f = reinterpret_cast<const float*>(grad.bytes.data());
  CHECK((f[0] == 0.f && f[1] == 7.f && f[2] == 0.f && f[3] == -1.f));
}
