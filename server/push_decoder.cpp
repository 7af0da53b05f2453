#include "server/push_decoder.h"

#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "common/compression/half_codec.h"
#include "common/compression/top_k_codec.h"
#include "common/error.h"

namespace gradsync {
namespace {

using wire::PushEncoding;

// The payload's bytes as `count` values of T, copied: a ZeroMQ frame's bytes carry no alignment
// promise for T, and the copy is small (at most one chunk of 16-bit values, or k top-k entries)
// next to what decoding writes.
template <typename T>
std::vector<T> values_of(std::span<const std::byte> bytes, std::size_t count) {
  std::vector<T> values(count);
  std::memcpy(values.data(), bytes.data(), count * sizeof(T));
  return values;
}

// A Buffer that owns `floats`.
Buffer own(std::shared_ptr<std::vector<float>> floats) {
  const std::span<const float> view(*floats);
  return {std::as_bytes(view), std::move(floats)};
}

}  // namespace

Buffer decode_push(const wire::Header& header, const Buffer& payload) {
  GRADSYNC_CHECK(payload.size() == header.payload_bytes,
                 "decode_push: the payload frame does not match its header");
  const std::size_t keys = header.key_end - header.key_begin;
  switch (header.encoding()) {
    case PushEncoding::kFp32:
      return payload;
    case PushEncoding::kFp16:
    case PushEncoding::kBf16: {
      const std::vector<std::uint16_t> halves = values_of<std::uint16_t>(payload.bytes, keys);
      auto dense = std::make_shared<std::vector<float>>(keys);
      compression::decode_half(header.encoding(), halves, *dense);
      return own(std::move(dense));
    }
    case PushEncoding::kTopK: {
      // k indices, then k values (wire_format.h): decode_header checked 8 k bytes, 0 < k <= keys.
      const std::size_t k = payload.size() / (sizeof(std::uint32_t) + sizeof(float));
      const auto indices =
          values_of<std::uint32_t>(payload.bytes.first(k * sizeof(std::uint32_t)), k);
      const auto values = values_of<float>(payload.bytes.subspan(k * sizeof(std::uint32_t)), k);
      auto dense = std::make_shared<std::vector<float>>(keys, 0.0f);
      for (const std::uint32_t index : indices) {
        if (index >= keys) {
          throw Error("top-k index " + std::to_string(index) + " is outside the chunk's " +
                      std::to_string(keys) + " keys " +
                      wire::range_text(header.key_begin, header.key_end));
        }
      }
      compression::scatter_add(indices, values, *dense);  // checks the indices again
      return own(std::move(dense));
    }
  }
  throw Error("decode_push: unknown encoding " + std::to_string(header.aux));
}

}  // namespace gradsync
