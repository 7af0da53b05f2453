// The TcpStore wire format, shared by its server and client.
//
// A connection opens with the client's hello {u32 kStoreMagic, u32 kStoreVersion}; the server
// drops any connection that starts otherwise (a ring peer or a port scanner that dialled the
// wrong port). Then requests and replies alternate, one request in flight per connection:
//
//   kSet   string key, string value   -> u8 0
//   kGet   string key                 -> string value   (the server answers once the key exists)
//   kWait  u32 n, n x string key      -> u8 0           (once every key exists)
//   kCheck u32 n, n x string key      -> u32 n, n x u8 (1 = present); never blocks
//
// A string is u32 length + bytes; integers are little-endian. The client applies deadlines: it
// abandons (closes) a connection whose reply is late, which also cancels the server-side wait.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace gradsync::tcp {

inline constexpr std::uint32_t kStoreMagic = 0x54535347;  // "GSST" on the wire
inline constexpr std::uint32_t kStoreVersion = 1;
inline constexpr std::uint32_t kMaxKeyBytes = 64 * 1024;
inline constexpr std::uint32_t kMaxValueBytes = 64 * 1024 * 1024;
inline constexpr std::uint32_t kMaxKeys = 64 * 1024;

enum class StoreRequest : std::uint8_t { kSet = 1, kGet = 2, kWait = 3, kCheck = 4 };

inline void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

inline void put_string(std::string& out, const std::string& s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  out += s;
}

inline std::uint32_t read_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// Incremental parser over bytes received so far: each getter returns nullopt when the bytes are
// not all there yet (the caller reads more and parses the request again from the start).
class StoreReader {
 public:
  explicit StoreReader(const std::string& bytes) : bytes_(bytes) {}
  std::optional<std::uint32_t> u32() {
    if (bytes_.size() - pos_ < 4) return std::nullopt;
    const std::uint32_t v = read_u32(bytes_.data() + pos_);
    pos_ += 4;
    return v;
  }
  std::optional<std::uint8_t> u8() {
    if (bytes_.size() - pos_ < 1) return std::nullopt;
    return static_cast<std::uint8_t>(bytes_[pos_++]);
  }
  // `limit` guards against garbage: a length beyond it is a protocol violation (ok = false).
  std::optional<std::string> string(std::uint32_t limit, bool& ok) {
    const auto n = u32();
    if (!n) return std::nullopt;
    if (*n > limit) {
      ok = false;
      return std::nullopt;
    }
    if (bytes_.size() - pos_ < *n) return std::nullopt;
    std::string s = bytes_.substr(pos_, *n);
    pos_ += *n;
    return s;
  }
  std::size_t consumed() const { return pos_; }

 private:
  const std::string& bytes_;
  std::size_t pos_ = 0;
};

}  // namespace gradsync::tcp
