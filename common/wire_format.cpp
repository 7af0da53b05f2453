#include "common/wire_format.h"

#include <cstdio>

namespace gradsync::wire {
namespace {

// Byte offsets of the fields in the header frame; the table in wire_format.h is the contract.
constexpr std::size_t kMagicOffset = 0;
constexpr std::size_t kVersionOffset = 4;
constexpr std::size_t kTypeOffset = 6;
constexpr std::size_t kSenderOffset = 8;
constexpr std::size_t kAuxOffset = 12;
constexpr std::size_t kStepOffset = 16;
constexpr std::size_t kKeyBeginOffset = 24;
constexpr std::size_t kKeyEndOffset = 32;
constexpr std::size_t kPayloadBytesOffset = 40;

// An ERROR carries a human-readable reason; anything longer than this is not a reason but a
// corrupt or hostile frame, and an empty one would tell the receiver nothing.
constexpr std::uint64_t kMaxErrorTextBytes = 4096;

// Written byte by byte with shifts rather than memcpy of the value, so the layout is the same on
// big- and little-endian hosts and never depends on how the compiler pads Header.
template <typename T>
void put_le(std::span<std::byte, kHeaderBytes> out, std::size_t offset, T value) {
  const auto wide = static_cast<std::uint64_t>(value);
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    out[offset + i] = static_cast<std::byte>((wide >> (8 * i)) & 0xFF);
  }
}

template <typename T>
T get_le(std::span<const std::byte> in, std::size_t offset) {
  std::uint64_t wide = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    wide |= static_cast<std::uint64_t>(in[offset + i]) << (8 * i);
  }
  return static_cast<T>(wide);
}

// The types are numbered 1..kLastType without gaps; a new type goes at the end and moves this.
constexpr auto kLastType = static_cast<std::uint16_t>(MessageType::kInit);

bool is_known_type(std::uint16_t raw) {
  return raw >= static_cast<std::uint16_t>(MessageType::kHello) && raw <= kLastType;
}

// type_name() must return a static string, so it cannot say which unknown value it saw; logs
// and error messages want the value, hence this helper.
std::string type_label(MessageType type) {
  if (is_known_type(static_cast<std::uint16_t>(type))) return type_name(type);
  return "UNKNOWN(" + std::to_string(static_cast<std::uint16_t>(type)) + ")";
}

std::string hex32(std::uint32_t value) {
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "0x%08X", static_cast<unsigned>(value));
  return buffer;
}

[[noreturn]] void reject(const std::string& message) { throw WireError(message); }

// "PUSHPULL" or "PUSHPULL fp16": a push's encoding is named unless it is plain fp32.
std::string payload_label(const Header& header) {
  std::string label = type_label(header.type);
  if (header.type == MessageType::kPushPull && header.encoding() != PushEncoding::kFp32) {
    label += std::string(" ") + encoding_name(header.encoding());
  }
  return label;
}

// A fixed width per key: 4 bytes (fp32: REPLY, INIT, a plain PUSHPULL) or 2 (an fp16 or bf16
// PUSHPULL). The expected size is compared by division, not by computing width * keys, because
// a range wider than 2^62 keys would overflow the product and could make a bogus range look
// consistent with a small payload.
void check_fixed_payload(const Header& header, std::uint64_t width) {
  const std::uint64_t keys = header.key_end - header.key_begin;  // begin <= end checked before
  const std::uint64_t bytes = header.payload_bytes;
  if (bytes % width == 0 && bytes / width == keys) return;
  const std::string times = std::to_string(width) + " x ";
  std::string expected;
  if (keys <= kMaxPayloadBytes / width) {
    expected =
        "expected " + std::to_string(keys * width) + " (" + times + std::to_string(keys) + " keys)";
  } else {
    // No valid payload can cover this range; say so instead of printing a wrapped product.
    expected = "expected " + times + std::to_string(keys) + " keys, more than the maximum " +
               std::to_string(kMaxPayloadBytes);
  }
  reject("payload_bytes: " + std::to_string(bytes) + " for " + payload_label(header) + " keys " +
         range_text(header.key_begin, header.key_end) + ", " + expected);
}

// Top-k: k (index, value) pairs of 8 bytes, at least one (an empty range goes as fp32) and at
// most one per key (the indices are distinct keys of the range).
void check_top_k_payload(const Header& header) {
  constexpr std::uint64_t kEntryBytes = sizeof(std::uint32_t) + sizeof(float);
  const std::uint64_t keys = header.key_end - header.key_begin;
  const std::uint64_t bytes = header.payload_bytes;
  const std::uint64_t entries = bytes / kEntryBytes;
  if (bytes % kEntryBytes == 0 && entries > 0 && entries <= keys) return;
  reject("payload_bytes: " + std::to_string(bytes) + " for " + payload_label(header) + " keys " +
         range_text(header.key_begin, header.key_end) +
         ", expected 8 x k entries (a uint32 index and a float each) with 0 < k <= " +
         std::to_string(keys) + " keys");
}

void check_push_payload(const Header& header) {
  switch (header.encoding()) {
    case PushEncoding::kFp32:
      return check_fixed_payload(header, sizeof(float));
    case PushEncoding::kFp16:
    case PushEncoding::kBf16:
      return check_fixed_payload(header, sizeof(std::uint16_t));
    case PushEncoding::kTopK:
      return check_top_k_payload(header);
  }
  reject("aux: " + std::to_string(header.aux) +
         " for PUSHPULL is not a push encoding (0 fp32, 1 fp16, 2 bf16, 3 topk)");
}

void check_payload_for_type(const Header& header) {
  switch (header.type) {
    case MessageType::kPushPull:
      check_push_payload(header);
      return;
    case MessageType::kReply:
    case MessageType::kInit:
      check_fixed_payload(header, sizeof(float));
      return;
    case MessageType::kError:
      if (header.payload_bytes < 1 || header.payload_bytes > kMaxErrorTextBytes) {
        reject("payload_bytes: " + std::to_string(header.payload_bytes) +
               " for ERROR, expected 1.." + std::to_string(kMaxErrorTextBytes) + " bytes of text");
      }
      return;
    case MessageType::kHello:
    case MessageType::kHelloAck:
    case MessageType::kPull:
    case MessageType::kHeartbeat:
    case MessageType::kBye:
      if (header.payload_bytes != 0) {
        reject("payload_bytes: " + std::to_string(header.payload_bytes) + " for " +
               type_label(header.type) + ", expected 0 (this type has no payload)");
      }
      return;
  }
  // Unreachable: decode_header() rejects unknown types before calling this.
  reject("type: " + type_label(header.type) + " has no payload rule");
}

}  // namespace

std::string range_text(std::uint64_t begin, std::uint64_t end) {
  // Appended, not `"[" + ...`: GCC 12 warns falsely (-Wrestrict) on the prepend at -O3.
  std::string text = "[";
  text += std::to_string(begin);
  text += ", ";
  text += std::to_string(end);
  text += ")";
  return text;
}

const char* type_name(MessageType type) {
  switch (type) {
    case MessageType::kHello:
      return "HELLO";
    case MessageType::kHelloAck:
      return "HELLO_ACK";
    case MessageType::kPushPull:
      return "PUSHPULL";
    case MessageType::kPull:
      return "PULL";
    case MessageType::kReply:
      return "REPLY";
    case MessageType::kError:
      return "ERROR";
    case MessageType::kHeartbeat:
      return "HEARTBEAT";
    case MessageType::kBye:
      return "BYE";
    case MessageType::kInit:
      return "INIT";
  }
  // A const char* cannot carry the value; Header::to_string() prints "UNKNOWN(9)".
  return "UNKNOWN";
}

const char* encoding_name(PushEncoding encoding) {
  switch (encoding) {
    case PushEncoding::kFp32:
      return "fp32";
    case PushEncoding::kFp16:
      return "fp16";
    case PushEncoding::kBf16:
      return "bf16";
    case PushEncoding::kTopK:
      return "topk";
  }
  return "UNKNOWN";
}

std::string Header::to_string() const {
  std::string text = type_label(type) + " from " + std::to_string(sender) + " step " +
                     std::to_string(step) + " keys " + range_text(key_begin, key_end) +
                     " payload " + std::to_string(payload_bytes) + " B aux " + std::to_string(aux);
  if (type == MessageType::kPushPull && aux != 0) {
    text += std::string(" (") + encoding_name(encoding()) + ")";
  }
  return text;
}

void encode_header(const Header& header, std::span<std::byte, kHeaderBytes> out) {
  put_le(out, kMagicOffset, header.magic);
  put_le(out, kVersionOffset, header.version);
  put_le(out, kTypeOffset, static_cast<std::uint16_t>(header.type));
  put_le(out, kSenderOffset, header.sender);
  put_le(out, kAuxOffset, header.aux);
  put_le(out, kStepOffset, header.step);
  put_le(out, kKeyBeginOffset, header.key_begin);
  put_le(out, kKeyEndOffset, header.key_end);
  put_le(out, kPayloadBytesOffset, header.payload_bytes);
}

Header decode_header(std::span<const std::byte> frame) {
  // The size goes first: every later read assumes 48 bytes are there.
  if (frame.size() != kHeaderBytes) {
    reject("header: " + std::to_string(frame.size()) + " bytes, expected " +
           std::to_string(kHeaderBytes));
  }
  Header header;
  header.magic = get_le<std::uint32_t>(frame, kMagicOffset);
  // Magic before version: a frame that is not ours at all (another protocol, a stray payload
  // frame) should be reported as such, not as a version mismatch.
  if (header.magic != kMagic) {
    reject("magic: " + hex32(header.magic) + ", expected " + hex32(kMagic) + " (GSPS)");
  }
  header.version = get_le<std::uint16_t>(frame, kVersionOffset);
  if (header.version != kWireVersion) {
    reject("version: " + std::to_string(header.version) + ", this build speaks " +
           std::to_string(kWireVersion));
  }
  const auto raw_type = get_le<std::uint16_t>(frame, kTypeOffset);
  if (!is_known_type(raw_type)) {
    reject("type: " + std::to_string(raw_type) + " is not a known message type (1.." +
           std::to_string(kLastType) + ")");
  }
  header.type = static_cast<MessageType>(raw_type);
  header.sender = get_le<std::uint32_t>(frame, kSenderOffset);
  header.aux = get_le<std::uint32_t>(frame, kAuxOffset);
  header.step = get_le<std::uint64_t>(frame, kStepOffset);
  header.key_begin = get_le<std::uint64_t>(frame, kKeyBeginOffset);
  header.key_end = get_le<std::uint64_t>(frame, kKeyEndOffset);
  header.payload_bytes = get_le<std::uint64_t>(frame, kPayloadBytesOffset);

  if (header.key_begin > header.key_end) {
    reject("key range: key_begin " + std::to_string(header.key_begin) + " > key_end " +
           std::to_string(header.key_end));
  }
  // The absolute bound first, so a receiver never sizes a buffer from an absurd length even
  // for a type whose own rule would also refuse it.
  if (header.payload_bytes > kMaxPayloadBytes) {
    reject("payload_bytes: " + std::to_string(header.payload_bytes) + ", more than the maximum " +
           std::to_string(kMaxPayloadBytes));
  }
  check_payload_for_type(header);
  return header;
}

Header make_header(MessageType type, std::uint32_t sender, std::uint64_t step,
                   std::uint64_t key_begin, std::uint64_t key_end, std::uint64_t payload_bytes,
                   std::uint32_t aux) {
  Header header;  // magic and version keep their defaults: this build's
  header.type = type;
  header.sender = sender;
  header.aux = aux;
  header.step = step;
  header.key_begin = key_begin;
  header.key_end = key_end;
  header.payload_bytes = payload_bytes;
  return header;
}

}  // namespace gradsync::wire
