#include "server/message.h"

#include <cstring>
#include <vector>

namespace gradsync {
namespace {
constexpr std::size_t kMaxErrorText = 4096;  // decode_header() refuses longer ERROR payloads
}  // namespace

Buffer Buffer::copy_of(std::string_view text) {
  return copy_of(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

Buffer Buffer::copy_of(std::span<const std::byte> data) {
  auto owned = std::make_shared<std::vector<std::byte>>(data.begin(), data.end());
  return {std::span<const std::byte>(*owned), owned};
}

std::string Outgoing::to_string() const { return header.to_string() + " to " + peer_hex(peer); }

std::string peer_hex(std::string_view peer) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * peer.size());
  for (const char c : peer) {
    const auto byte = static_cast<unsigned char>(c);
    hex += kDigits[byte >> 4];
    hex += kDigits[byte & 0xF];
  }
  return hex.empty() ? "(empty id)" : hex;
}

Outgoing make_error(const std::string& peer, std::uint32_t shard, std::uint64_t key_begin,
                    std::uint64_t key_end, std::string_view text) {
  if (text.empty()) text = "unspecified error";
  if (text.size() > kMaxErrorText) text = text.substr(0, kMaxErrorText);
  Outgoing out;
  out.peer = peer;
  out.payload = Buffer::copy_of(text);
  out.header = wire::make_header(wire::MessageType::kError, shard, 0, key_begin, key_end,
                                 out.payload.size());
  return out;
}

}  // namespace gradsync
