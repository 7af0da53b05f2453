// PushEncoder, a ps worker's comm.compression: what each encoding puts on the wire, the top-k
// residual kept per chunk across steps (error feedback), the fp32 warm-up, payload arrays reused
// only once nothing holds them, and the methods pushes refuse. The shard's half, decode_push,
// reads back what it writes.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <vector>

#include "common/compression/half_codec.h"
#include "common/compression/top_k_codec.h"
#include "common/error.h"
#include "server/push_decoder.h"
#include "strategies/ps/push_encoder.h"

using namespace gradsync;
using wire::PushEncoding;

namespace {

std::vector<float> ramp(std::size_t n, float scale) {
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = scale * std::sin(0.37f * float(i) + 1.f);
  return g;
}

// What the shard makes of an encoded chunk: its dense fp32 gradient. The header goes through
// the wire first, so decode_header's size rule for the encoding is checked on the way.
std::vector<float> decoded(KeyRange keys, const PushEncoder::Encoded& e) {
  std::array<std::byte, wire::kHeaderBytes> frame;
  wire::encode_header(wire::make_header(wire::MessageType::kPushPull, 0, 0, keys.begin, keys.end,
                                        e.payload.size(), static_cast<std::uint32_t>(e.encoding)),
                      frame);
  const Buffer dense = decode_push(wire::decode_header(frame), e.payload);
  const auto* f = reinterpret_cast<const float*>(dense.bytes.data());
  return {f, f + keys.size()};
}

}  // namespace

TEST_CASE("ps push encoder: none sends the caller's bytes, fp16 and bf16 two bytes a key") {
  const std::vector<float> grads = ramp(100, 3.f);
  const KeyRange chunk{10, 60};
  PushEncoder none({"none", 0.01, 0});
  const PushEncoder::Encoded plain = none.encode(5, chunk, grads);
  CHECK(plain.encoding == PushEncoding::kFp32);
  CHECK(plain.payload.bytes.data() == reinterpret_cast<const std::byte*>(grads.data() + 10));
  CHECK(plain.payload.size() == 200);
  for (const auto& [method, encoding] :
       {std::pair{"fp16", PushEncoding::kFp16}, std::pair{"bf16", PushEncoding::kBf16}}) {
    CAPTURE(method);
    PushEncoder encoder({method, 0.01, 0});
    const PushEncoder::Encoded e = encoder.encode(0, chunk, grads);
    CHECK(e.encoding == encoding);
    CHECK(e.payload.size() == 100);
    const std::vector<float> back = decoded(chunk, e);
    for (std::size_t i = 0; i < chunk.size(); ++i) {
      const float g = grads[chunk.begin + i];
      // Not divided by N: the shard sums in fp32 (push_decoder.h).
      const float expected = encoding == PushEncoding::kFp16
                                 ? compression::float_from_fp16(compression::fp16_from_float(g))
                                 : compression::float_from_bf16(compression::bf16_from_float(g));
      CHECK(back[i] == expected);
    }
  }
}

TEST_CASE("ps push encoder: top-k keeps each chunk's residual across steps") {
  // Two chunks, each with its own TopKCodec: fed the same gradients, a reference codec per chunk
  // must send the same entries, step after step, and what was sent plus what is left equals
  // the sum of the gradients (error feedback: nothing dropped, only delayed).
  const std::size_t n = 300;
  const std::vector<KeyRange> chunks = {{0, 200}, {200, 300}};
  PushEncoder encoder({"topk", 0.05, 0});
  std::vector<compression::TopKCodec> reference;
  for (const KeyRange& c : chunks) reference.emplace_back(c.size());
  std::vector<double> sent(n, 0.0), given(n, 0.0);
  for (std::uint64_t step = 0; step < 6; ++step) {
    const std::vector<float> grads = ramp(n, 1.f + float(step));
    for (std::size_t i = 0; i < n; ++i) given[i] += grads[i];
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      const KeyRange keys = chunks[c];
      const PushEncoder::Encoded e = encoder.encode(step, keys, grads);
      CHECK(e.encoding == PushEncoding::kTopK);
      const std::size_t k = compression::TopKCodec::k_for(keys.size(), 0.05);
      CHECK(e.payload.size() == 8 * k);
      const auto want =
          reference[c].select(std::span<const float>(grads).subspan(keys.begin, keys.size()), 0.05);
      const std::vector<float> back = decoded(keys, e);
      std::vector<float> expected(keys.size(), 0.f);
      compression::scatter_add(want, expected);
      CHECK(back == expected);
      for (std::size_t i = 0; i < keys.size(); ++i) sent[keys.begin + i] += back[i];
    }
  }
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    for (std::size_t i = 0; i < chunks[c].size(); ++i) {
      const std::size_t at = chunks[c].begin + i;
      CHECK(sent[at] + reference[c].residual()[i] == doctest::Approx(given[at]).epsilon(1e-5));
    }
  }
}

TEST_CASE("ps push encoder: fp32 before start_step, and payload arrays reused once released") {
  const std::vector<float> grads = ramp(64, 1.f);
  const KeyRange chunk{0, 64};
  PushEncoder encoder({"topk", 0.25, 2});
  // Steps 0 and 1 are the warm-up: fp32, and nothing enters the residual.
  for (std::uint64_t step = 0; step < 2; ++step) {
    const PushEncoder::Encoded e = encoder.encode(step, chunk, grads);
    CHECK(e.encoding == PushEncoding::kFp32);
    CHECK(e.payload.size() == 4 * 64);
  }
  compression::TopKCodec fresh(64);
  const auto first_sparse = fresh.select(grads, 0.25);
  PushEncoder::Encoded held = encoder.encode(2, chunk, grads);
  std::vector<float> expected(64, 0.f);
  compression::scatter_add(first_sparse, expected);
  CHECK(decoded(chunk, held) == expected);  // as if step 2 were the first: residual was zero
  // Still held (ZeroMQ sending it, say): the next step writes a fresh array...
  const std::byte* first = held.payload.bytes.data();
  PushEncoder::Encoded next = encoder.encode(3, chunk, grads);
  CHECK(next.payload.bytes.data() != first);
  CHECK(decoded(chunk, held) == expected);  // ...and the held bytes did not change
  // Released: reused.
  const std::byte* second = next.payload.bytes.data();
  next = {};
  CHECK(encoder.encode(4, chunk, grads).payload.bytes.data() == second);
  // An empty chunk has no top-k entry to send (k > 0 on the wire): fp32, zero bytes.
  const PushEncoder::Encoded empty = encoder.encode(5, KeyRange{64, 64}, grads);
  CHECK((empty.encoding == PushEncoding::kFp32 && empty.payload.size() == 0));
}

TEST_CASE("ps push encoder: powersgd and unknown methods are refused") {
  CHECK_THROWS_WITH_AS(PushEncoder({"powersgd", 0.01, 0}),
                       "comm.compression: powersgd needs an all-reduce of P and Q among the "
                       "workers; ps pushes take none, fp16, bf16 or topk",
                       Error);
  CHECK_THROWS_WITH_AS(PushEncoder({"zip", 0.01, 0}),
                       "comm.compression: unknown method 'zip' for ps pushes (none, fp16, bf16, "
                       "topk)",
                       Error);
  CHECK_THROWS_AS(PushEncoder({"topk", 0.0, 0}), Error);
  CHECK_THROWS_AS(PushEncoder({"topk", 1.5, 0}), Error);
}
