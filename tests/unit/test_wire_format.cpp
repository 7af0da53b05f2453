// The parameter-server header frame: exact little-endian layout, round trips at the extremes of
// every field, each rejection with the field it names, and random frames that must either
// decode to something that re-encodes to the same bytes or be refused with WireError.
#include <doctest/doctest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/wire_format.h"

namespace gradsync::wire {
namespace {

using Frame = std::array<std::byte, kHeaderBytes>;

constexpr std::uint64_t kU64Max = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint32_t kU32Max = std::numeric_limits<std::uint32_t>::max();

Frame encode(const Header& header) {
  Frame frame{};
  encode_header(header, frame);
  return frame;
}

// Checks that decoding `frame` throws WireError, and exactly WireError, with a message that
// contains `expected`.
#define CHECK_REJECTED(frame, expected)                                                        \
  CHECK_THROWS_WITH_AS(decode_header(frame), doctest::Contains(std::string(expected).c_str()), \
                       WireError)

void check_same(const Header& got, const Header& want) {
  CHECK(got.magic == want.magic);
  CHECK(got.version == want.version);
  CHECK(got.type == want.type);
  CHECK(got.sender == want.sender);
  CHECK(got.aux == want.aux);
  CHECK(got.step == want.step);
  CHECK(got.key_begin == want.key_begin);
  CHECK(got.key_end == want.key_end);
  CHECK(got.payload_bytes == want.payload_bytes);
}

// A REPLY whose every multi-byte field has distinct bytes, so a swapped or misplaced byte
// shows up in the byte-exact comparison below (a REPLY's aux, its staleness, takes any value).
Header distinct_bytes_header() {
  return make_header(MessageType::kReply, /*sender=*/0x0A0B0C0D,
                     /*step=*/0x1122334455667788, /*key_begin=*/0x0102030405060708,
                     /*key_end=*/0x0102030405060808, /*payload_bytes=*/0x400,
                     /*aux=*/0xA1B2C3D4);
}

}  // namespace

TEST_CASE("wire format: make_header fills every field and keeps this build's magic and version") {
  const Header header = make_header(MessageType::kReply, 3, 12, 100, 356, 1024, 7);
  CHECK(header.magic == kMagic);
  CHECK(header.version == kWireVersion);
  CHECK(header.type == MessageType::kReply);
  CHECK(header.sender == 3);
  CHECK(header.step == 12);
  CHECK(header.key_begin == 100);
  CHECK(header.key_end == 356);
  CHECK(header.payload_bytes == 1024);
  CHECK(header.aux == 7);
  CHECK(make_header(MessageType::kPull, 1, 2, 3, 4, 0).aux == 0);  // aux defaults to 0
}

TEST_CASE("wire format: type names and to_string") {
  CHECK(std::string(type_name(MessageType::kHello)) == "HELLO");
  CHECK(std::string(type_name(MessageType::kHelloAck)) == "HELLO_ACK");
  CHECK(std::string(type_name(MessageType::kPushPull)) == "PUSHPULL");
  CHECK(std::string(type_name(MessageType::kPull)) == "PULL");
  CHECK(std::string(type_name(MessageType::kReply)) == "REPLY");
  CHECK(std::string(type_name(MessageType::kError)) == "ERROR");
  CHECK(std::string(type_name(MessageType::kHeartbeat)) == "HEARTBEAT");
  CHECK(std::string(type_name(MessageType::kBye)) == "BYE");
  CHECK(std::string(type_name(MessageType::kInit)) == "INIT");
  CHECK(std::string(type_name(static_cast<MessageType>(10))) == "UNKNOWN");

  CHECK(make_header(MessageType::kPushPull, 3, 12, 0, 1024, 4096).to_string() ==
        "PUSHPULL from 3 step 12 keys [0, 1024) payload 4096 B aux 0");
  CHECK(make_header(MessageType::kReply, 1, 5, 10, 20, 40, 2).to_string() ==
        "REPLY from 1 step 5 keys [10, 20) payload 40 B aux 2");
  Header unknown;
  unknown.type = static_cast<MessageType>(10);
  CHECK(unknown.to_string() == "UNKNOWN(10) from 0 step 0 keys [0, 0) payload 0 B aux 0");
}

TEST_CASE("wire format: byte-exact little-endian layout at the documented offsets") {
  // Written out by hand from the table in wire_format.h, least significant byte first.
  const std::array<std::uint8_t, kHeaderBytes> expected = {
      0x47, 0x53, 0x50, 0x53,                          //  0 magic "GSPS"
      0x04, 0x00,                                      //  4 version 4
      0x05, 0x00,                                      //  6 type REPLY
      0x0D, 0x0C, 0x0B, 0x0A,                          //  8 sender 0x0A0B0C0D
      0xD4, 0xC3, 0xB2, 0xA1,                          // 12 aux 0xA1B2C3D4
      0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,  // 16 step 0x1122334455667788
      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // 24 key_begin 0x0102030405060708
      0x08, 0x08, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // 32 key_end 0x0102030405060808
      0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // 40 payload_bytes 1024 (256 keys)
  };
  const Header header = distinct_bytes_header();
  const Frame encoded = encode(header);
  for (std::size_t i = 0; i < kHeaderBytes; ++i) {
    CAPTURE(i);
    CHECK(static_cast<std::uint8_t>(encoded[i]) == expected[i]);
  }

  // And the hand-written bytes decode to the same header.
  Frame hand{};
  for (std::size_t i = 0; i < kHeaderBytes; ++i) hand[i] = static_cast<std::byte>(expected[i]);
  check_same(decode_header(hand), header);
}

TEST_CASE("wire format: every type round-trips with extreme values") {
  // Each entry is valid for its type and pushes as many fields as the type allows to the edge:
  // u32/u64 maxima, ranges ending at u64 max, and payloads at kMaxPayloadBytes.
  const std::uint64_t max_float_keys = kMaxPayloadBytes / 4;  // 2^31 keys fill 8 GiB
  const std::vector<Header> headers = {
      // HELLO: the model size rides in key_end.
      make_header(MessageType::kHello, kU32Max, kU64Max, 0, kU64Max, 0, kU32Max),
      make_header(MessageType::kHello, 0, 0, 0, 0, 0, 0),
      make_header(MessageType::kHelloAck, kU32Max, kU64Max, kU64Max - 1, kU64Max, 0, kU32Max),
      make_header(MessageType::kHelloAck, 0, 0, kU64Max, kU64Max, 0),
      make_header(MessageType::kPushPull, kU32Max, kU64Max, kU64Max - max_float_keys, kU64Max,
                  kMaxPayloadBytes),
      make_header(MessageType::kPushPull, 0, 0, 5, 5, 0),  // empty range, empty payload
      // Encoded pushes (aux): fp16 and bf16 at 2 bytes a key, top-k from 1 entry to 1 per key.
      make_header(MessageType::kPushPull, kU32Max, kU64Max, kU64Max - 2 * max_float_keys, kU64Max,
                  kMaxPayloadBytes, 1),
      make_header(MessageType::kPushPull, 0, 0, 5, 5, 0, 2),  // an empty range in bf16
      make_header(MessageType::kPushPull, kU32Max, kU64Max, kU64Max - max_float_keys, kU64Max, 8,
                  3),
      make_header(MessageType::kPushPull, 0, 0, 0, kMaxPayloadBytes / 8, kMaxPayloadBytes, 3),
      make_header(MessageType::kPull, kU32Max, kU64Max, 0, std::uint64_t{1} << 40, 0, kU32Max),
      make_header(MessageType::kPull, 0, 0, 0, kU64Max, 0),
      make_header(MessageType::kReply, kU32Max, kU64Max, 0, max_float_keys, kMaxPayloadBytes,
                  kU32Max),
      make_header(MessageType::kReply, 0, 0, kU64Max - 1, kU64Max, 4),
      make_header(MessageType::kError, kU32Max, kU64Max, 0, kU64Max, 4096, kU32Max),
      make_header(MessageType::kError, 0, 0, kU64Max, kU64Max, 1),
      make_header(MessageType::kHeartbeat, kU32Max, kU64Max, 0, kU64Max, 0, kU32Max),
      make_header(MessageType::kBye, kU32Max, kU64Max, kU64Max, kU64Max, 0, kU32Max),
      make_header(MessageType::kInit, kU32Max, kU64Max, kU64Max - max_float_keys, kU64Max,
                  kMaxPayloadBytes, kU32Max),
      make_header(MessageType::kInit, 0, 0, 0, 1, 4),
  };
  for (const Header& header : headers) {
    CAPTURE(header.to_string());
    const Frame frame = encode(header);
    const Header decoded = decode_header(frame);
    check_same(decoded, header);
    CHECK(encode(decoded) == frame);
  }
}

TEST_CASE("wire format: each invalid field is rejected with a message naming it") {
  const Header valid = make_header(MessageType::kPushPull, 3, 12, 0, 1024, 4096);

  SUBCASE("magic") {
    Header header = valid;
    header.magic = 0xDEADBEEF;
    CHECK_REJECTED(encode(header), "magic: 0xDEADBEEF, expected 0x53505347 (GSPS)");
  }
  SUBCASE("magic in the other byte order") {
    // A big-endian writer would put "SPSG" on the wire; it must not slip through.
    Header header = valid;
    header.magic = 0x47535053;
    CHECK_REJECTED(encode(header), "magic: 0x47535053");
  }
  SUBCASE("version") {
    Header header = valid;
    header.version = 7;
    CHECK_REJECTED(encode(header), "version: 7, this build speaks 4");
  }
  SUBCASE("unknown types") {
    for (std::uint16_t raw : {std::uint16_t{0}, std::uint16_t{10}, std::uint16_t{0xFFFF}}) {
      CAPTURE(raw);
      Header header = valid;
      header.type = static_cast<MessageType>(raw);
      CHECK_REJECTED(encode(header), "type: " + std::to_string(raw) + " is not a known");
    }
  }
  SUBCASE("key_begin after key_end") {
    CHECK_REJECTED(encode(make_header(MessageType::kPull, 0, 0, 10, 5, 0)),
                   "key range: key_begin 10 > key_end 5");
    CHECK_REJECTED(encode(make_header(MessageType::kPull, 0, 0, kU64Max, 0, 0)),
                   "key_begin 18446744073709551615 > key_end 0");
  }
  SUBCASE("payload over the maximum") {
    CHECK_REJECTED(encode(make_header(MessageType::kPull, 0, 0, 0, 1, kMaxPayloadBytes + 1)),
                   "payload_bytes: 8589934593, more than the maximum 8589934592");
    // Even when the range would account for it.
    const std::uint64_t keys = kMaxPayloadBytes / 4 + 1;
    CHECK_REJECTED(encode(make_header(MessageType::kPushPull, 0, 0, 0, keys, 4 * keys)),
                   "more than the maximum 8589934592");
  }
  SUBCASE("PUSHPULL, REPLY and INIT payload must be 4 bytes per key") {
    CHECK_REJECTED(encode(make_header(MessageType::kPushPull, 0, 0, 0, 1024, 4092)),
                   "payload_bytes: 4092 for PUSHPULL keys [0, 1024), expected 4096");
    // 4097 / 4 truncates to 1024: the remainder must be caught, not rounded away.
    CHECK_REJECTED(encode(make_header(MessageType::kReply, 0, 0, 0, 1024, 4097)),
                   "payload_bytes: 4097 for REPLY keys [0, 1024), expected 4096");
    CHECK_REJECTED(encode(make_header(MessageType::kReply, 0, 0, 7, 8, 0)),
                   "payload_bytes: 0 for REPLY keys [7, 8), expected 4");
    CHECK_REJECTED(encode(make_header(MessageType::kInit, 0, 0, 0, 10, 4)),
                   "payload_bytes: 4 for INIT keys [0, 10), expected 40");
  }
  SUBCASE("a range so wide that 4 * keys wraps around") {
    // 4 * 2^62 is 0 and 4 * (2^62 + 1) is 4 modulo 2^64: a naive product would accept these.
    const std::uint64_t two62 = std::uint64_t{1} << 62;
    CHECK_REJECTED(encode(make_header(MessageType::kPushPull, 0, 0, 0, two62, 0)),
                   "payload_bytes: 0 for PUSHPULL keys [0, 4611686018427387904)");
    CHECK_REJECTED(encode(make_header(MessageType::kReply, 0, 0, 0, two62 + 1, 4)),
                   "more than the maximum");
    CHECK_REJECTED(encode(make_header(MessageType::kPushPull, 0, 0, 0, kU64Max, 0)),
                   "expected 4 x 18446744073709551615 keys");
  }
  SUBCASE("types without a payload must carry 0 bytes") {
    for (MessageType type : {MessageType::kHello, MessageType::kHelloAck, MessageType::kPull,
                             MessageType::kHeartbeat, MessageType::kBye}) {
      CAPTURE(type_name(type));
      CHECK_REJECTED(encode(make_header(type, 0, 0, 0, 1024, 4)),
                     std::string("payload_bytes: 4 for ") + type_name(type) + ", expected 0");
    }
  }
  SUBCASE("ERROR carries 1..4096 bytes of text") {
    CHECK_REJECTED(encode(make_header(MessageType::kError, 0, 0, 0, 0, 0)),
                   "payload_bytes: 0 for ERROR, expected 1..4096");
    CHECK_REJECTED(encode(make_header(MessageType::kError, 0, 0, 0, 0, 4097)),
                   "payload_bytes: 4097 for ERROR, expected 1..4096");
  }
}

TEST_CASE("wire format: a PUSHPULL's encoding sets its payload size, each refusal says why") {
  // Every encoding of the same 1024-key chunk, and what its payload must be.
  CHECK(make_header(MessageType::kPushPull, 3, 12, 0, 1024, 4096).encoding() ==
        PushEncoding::kFp32);
  const std::vector<std::pair<PushEncoding, std::uint64_t>> valid = {
      {PushEncoding::kFp32, 4096}, {PushEncoding::kFp16, 2048}, {PushEncoding::kBf16, 2048},
      {PushEncoding::kTopK, 8},    {PushEncoding::kTopK, 800},  {PushEncoding::kTopK, 8192}};
  for (const auto& [encoding, bytes] : valid) {
    CAPTURE(encoding_name(encoding));
    CAPTURE(bytes);
    const Header header = make_header(MessageType::kPushPull, 3, 12, 1024, 2048, bytes,
                                      static_cast<std::uint32_t>(encoding));
    const Frame frame = encode(header);
    const Header decoded = decode_header(frame);
    check_same(decoded, header);
    CHECK(decoded.encoding() == encoding);
    CHECK(encode(decoded) == frame);
  }
  CHECK(std::string(encoding_name(PushEncoding::kFp32)) == "fp32");
  CHECK(std::string(encoding_name(PushEncoding::kFp16)) == "fp16");
  CHECK(std::string(encoding_name(PushEncoding::kBf16)) == "bf16");
  CHECK(std::string(encoding_name(PushEncoding::kTopK)) == "topk");
  CHECK(std::string(encoding_name(static_cast<PushEncoding>(4))) == "UNKNOWN");
  // Logs name an encoded push's encoding; a plain one reads as before.
  CHECK(make_header(MessageType::kPushPull, 3, 12, 0, 1024, 2048, 1).to_string() ==
        "PUSHPULL from 3 step 12 keys [0, 1024) payload 2048 B aux 1 (fp16)");
  CHECK(make_header(MessageType::kPushPull, 3, 12, 0, 1024, 4096).to_string() ==
        "PUSHPULL from 3 step 12 keys [0, 1024) payload 4096 B aux 0");

  auto push = [](std::uint64_t keys, std::uint64_t bytes, std::uint32_t aux) {
    return encode(make_header(MessageType::kPushPull, 0, 0, 0, keys, bytes, aux));
  };
  SUBCASE("an unknown encoding") {
    CHECK_REJECTED(push(1024, 4096, 4),
                   "aux: 4 for PUSHPULL is not a push encoding (0 fp32, 1 fp16, 2 bf16, 3 topk)");
    CHECK_REJECTED(push(1024, 4096, kU32Max), "aux: 4294967295 for PUSHPULL");
  }
  SUBCASE("fp16 and bf16: 2 bytes per key") {
    CHECK_REJECTED(push(1024, 4096, 1),
                   "payload_bytes: 4096 for PUSHPULL fp16 keys [0, 1024), expected 2048 "
                   "(2 x 1024 keys)");
    CHECK_REJECTED(push(1024, 2047, 2), "payload_bytes: 2047 for PUSHPULL bf16 keys [0, 1024)");
    CHECK_REJECTED(push(1024, 2049, 1), "expected 2048");  // the remainder is not rounded away
    CHECK_REJECTED(push(1, 0, 2), "payload_bytes: 0 for PUSHPULL bf16 keys [0, 1), expected 2");
    // 2 * 2^63 wraps to 0: the product is never formed.
    CHECK_REJECTED(push(std::uint64_t{1} << 63, 0, 1), "expected 2 x 9223372036854775808 keys");
  }
  SUBCASE("topk: 8 bytes per entry, 0 < entries <= keys") {
    const std::string rule =
        ", expected 8 x k entries (a uint32 index and a float each) with 0 < k <= 1024 keys";
    CHECK_REJECTED(push(1024, 12, 3), "payload_bytes: 12 for PUSHPULL topk keys [0, 1024)" + rule);
    CHECK_REJECTED(push(1024, 0, 3), "payload_bytes: 0 for PUSHPULL topk keys [0, 1024)" + rule);
    CHECK_REJECTED(push(1024, 8200, 3), "payload_bytes: 8200 for PUSHPULL topk");  // 1025 entries
    CHECK_REJECTED(push(0, 0, 3), "with 0 < k <= 0 keys");  // an empty range goes as fp32
    CHECK_REJECTED(push(1024, 4096 + 4, 3), "payload_bytes: 4100");
  }
  SUBCASE("other types keep aux free: a REPLY's staleness may be anything") {
    CHECK(decode_header(encode(make_header(MessageType::kReply, 0, 0, 0, 1, 4, kU32Max))).aux ==
          kU32Max);
  }
}

TEST_CASE("wire format: frames of any other size are rejected") {
  // A valid header followed by one stray byte, so only the length is wrong.
  std::array<std::byte, kHeaderBytes + 1> buffer{};
  encode_header(make_header(MessageType::kPull, 0, 0, 0, 1, 0),
                std::span<std::byte, kHeaderBytes>(buffer.data(), kHeaderBytes));
  for (std::size_t size = 0; size <= kHeaderBytes + 1; ++size) {
    if (size == kHeaderBytes) continue;
    CAPTURE(size);
    // Exact message: nothing else in a truncated frame can be trusted enough to report.
    CHECK_THROWS_WITH_AS(decode_header(std::span<const std::byte>(buffer.data(), size)),
                         ("header: " + std::to_string(size) + " bytes, expected 48").c_str(),
                         WireError);
  }
  CHECK(decode_header(std::span<const std::byte>(buffer.data(), kHeaderBytes)).type ==
        MessageType::kPull);
}

TEST_CASE("wire format: random frames decode losslessly or throw WireError, nothing else") {
  // Pure noise almost always fails at the magic, so three in four frames get a valid magic and
  // version, a type near the valid ones, and often a small range with a matching payload; that
  // way every later check and the accepting path are exercised too.
  std::mt19937_64 rng(20240611);
  int decoded = 0;
  int rejected = 0;
  int other_exceptions = 0;
  int lossy = 0;
  Frame frame{};
  for (int i = 0; i < 100000; ++i) {
    for (std::size_t offset = 0; offset < kHeaderBytes; offset += 8) {
      const std::uint64_t word = rng();
      for (std::size_t b = 0; b < 8; ++b)
        frame[offset + b] = static_cast<std::byte>(word >> (8 * b));
    }
    if (i % 4 != 0) {
      Header header = make_header(static_cast<MessageType>(rng() % 11), 0, 0, 0, 0, 0);
      header.sender = static_cast<std::uint32_t>(rng());
      // Often a small aux: a PUSHPULL's encoding (0..3), or just past the last one.
      header.aux = static_cast<std::uint32_t>(rng() % 2 == 0 ? rng() % 5 : rng());
      header.step = rng();
      header.key_begin = rng() % 3 == 0 ? rng() : rng() % 1000;
      header.key_end = header.key_begin + rng() % 300;  // may wrap: begin > end is then tested
      switch (rng() % 6) {
        case 0:
          header.payload_bytes = 4 * (header.key_end - header.key_begin);
          break;
        case 4:  // fp16 and bf16 pushes
          header.payload_bytes = 2 * (header.key_end - header.key_begin);
          break;
        case 5:  // top-k pushes, sometimes with more entries than keys
          header.payload_bytes = 8 * (rng() % (header.key_end - header.key_begin + 2));
          break;
        case 1:
          header.payload_bytes = 0;
          break;
        case 2:
          header.payload_bytes = 1 + rng() % 5000;
          break;
        default:
          header.payload_bytes = rng();
          break;
      }
      frame = encode(header);
    }
    try {
      const Header header = decode_header(frame);
      ++decoded;
      if (encode(header) != frame) ++lossy;
    } catch (const WireError&) {
      ++rejected;
    } catch (...) {
      ++other_exceptions;
    }
  }
  CHECK(other_exceptions == 0);
  CHECK(lossy == 0);
  CHECK(decoded > 10000);  // the accepting path really ran
  CHECK(rejected > 25000);
}

}  // namespace gradsync::wire
