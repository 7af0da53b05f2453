// The byte-level pieces the checkpoint files share (common/checkpoint_file.h, its parts;
// common/checkpoint_buffers.h, the running statistics beside them): little-endian values appended
// to or read from a byte string, and zlib's CRC-32 of any length.
//
//   std::string out;  put(out, std::uint32_t{1});  put(out, 2.5f);
//   auto version = get<std::uint32_t>(bytes, 16);       // the caller checks bytes.size() first
//   put(out, crc32_of(out.data(), out.size()));
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace gradsync::little_endian {

static_assert(std::endian::native == std::endian::little, "checkpoints are little-endian");

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

template <typename T>
T get(std::string_view in, std::size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof value);
  return value;
}

// CRC-32 (zlib's) of `size` bytes, in pieces of at most 1 GiB (zlib takes uInt lengths).
std::uint32_t crc32_of(const char* data, std::size_t size);

}  // namespace gradsync::little_endian
