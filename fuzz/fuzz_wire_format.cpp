// libFuzzer target: the parameter-server header decoder (common/wire_format.h).
//
// The input is one header frame as it would arrive from the network. decode_header() must
// either throw WireError or return a header that keeps every promise of wire_format.h; an
// accepted frame must also re-encode to exactly the bytes received (the layout is the contract,
// so decode and encode are inverses on valid frames). to_string() of an accepted header is
// exercised too, since the shard logs it.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "common/wire_format.h"
#include "fuzz/fuzz_support.h"

namespace {

using gradsync::wire::Header;
using gradsync::wire::MessageType;

void check_accepted(const Header& header, std::span<const std::byte> frame) {
  namespace wire = gradsync::wire;
  GRADSYNC_FUZZ_REQUIRE(frame.size() == wire::kHeaderBytes, header.to_string());
  GRADSYNC_FUZZ_REQUIRE(header.magic == wire::kMagic, header.to_string());
  GRADSYNC_FUZZ_REQUIRE(header.version == wire::kWireVersion, header.to_string());
  GRADSYNC_FUZZ_REQUIRE(header.key_begin <= header.key_end, header.to_string());
  GRADSYNC_FUZZ_REQUIRE(header.payload_bytes <= wire::kMaxPayloadBytes, header.to_string());
  const std::uint64_t keys = header.key_end - header.key_begin;
  switch (header.type) {
    case MessageType::kPushPull:
      // Its encoding (aux) sets the payload's size: 4 or 2 bytes a key, or k top-k entries.
      switch (header.encoding()) {
        case wire::PushEncoding::kFp32:
          GRADSYNC_FUZZ_REQUIRE(header.payload_bytes % 4 == 0 && header.payload_bytes / 4 == keys,
                                header.to_string());
          break;
        case wire::PushEncoding::kFp16:
        case wire::PushEncoding::kBf16:
          GRADSYNC_FUZZ_REQUIRE(header.payload_bytes % 2 == 0 && header.payload_bytes / 2 == keys,
                                header.to_string());
          break;
        case wire::PushEncoding::kTopK:
          GRADSYNC_FUZZ_REQUIRE(header.payload_bytes % 8 == 0 && header.payload_bytes > 0 &&
                                    header.payload_bytes / 8 <= keys,
                                header.to_string());
          break;
        default:
          GRADSYNC_FUZZ_REQUIRE(false, "accepted an unknown push encoding: " + header.to_string());
      }
      break;
    case MessageType::kReply:
    case MessageType::kInit:
      // Compared as a quotient: a product could wrap for a range wider than 2^62 keys.
      GRADSYNC_FUZZ_REQUIRE(header.payload_bytes % 4 == 0 && header.payload_bytes / 4 == keys,
                            header.to_string());
      break;
    case MessageType::kError:
      GRADSYNC_FUZZ_REQUIRE(header.payload_bytes >= 1 && header.payload_bytes <= 4096,
                            header.to_string());
      break;
    case MessageType::kHello:
    case MessageType::kHelloAck:
    case MessageType::kPull:
    case MessageType::kHeartbeat:
    case MessageType::kBye:
      GRADSYNC_FUZZ_REQUIRE(header.payload_bytes == 0, header.to_string());
      break;
    default:
      GRADSYNC_FUZZ_REQUIRE(false, "accepted an unknown type: " + header.to_string());
  }

  std::array<std::byte, wire::kHeaderBytes> encoded{};
  wire::encode_header(header, encoded);
  GRADSYNC_FUZZ_REQUIRE(std::memcmp(encoded.data(), frame.data(), encoded.size()) == 0,
                        "re-encoding changed the frame: " + header.to_string());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> frame(reinterpret_cast<const std::byte*>(data), size);
  gradsync::fuzz::expect_only_gradsync_errors<gradsync::wire::WireError>([&] {
    const Header header = gradsync::wire::decode_header(frame);
    check_accepted(header, frame);
  });
  return 0;
}
