#include "common/little_endian_file.h"

#include <zlib.h>

#include <algorithm>

namespace gradsync::little_endian {

std::uint32_t crc32_of(const char* data, std::size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (size > 0) {
    const uInt piece = static_cast<uInt>(std::min<std::size_t>(size, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), piece);
    data += piece;
    size -= piece;
  }
  return static_cast<std::uint32_t>(crc);
}

}  // namespace gradsync::little_endian
