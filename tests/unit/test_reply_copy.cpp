#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "strategies/ps/reply_copy.h"

using gradsync::ReplyCopy;

TEST_CASE("ReplyCopy streams only a model larger than the cache, and only a known cache") {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
#if defined(__SSE2__)
  CHECK(ReplyCopy(64 * kMiB, 32 * kMiB).streaming());
#endif
  CHECK_FALSE(ReplyCopy(4 * kMiB, 32 * kMiB).streaming());
  CHECK_FALSE(ReplyCopy(32 * kMiB, 32 * kMiB).streaming());
  CHECK_FALSE(ReplyCopy(64 * kMiB, 0).streaming());
}

TEST_CASE("ReplyCopy copies every byte and nothing past the range, at any alignment") {
  // A chunk lands anywhere in the parameters: every start within a 16-byte line, sizes around
  // the 4-float stores, and a payload at any byte offset (ZeroMQ's frames give no promise).
  for (const bool stream : {false, true}) {
    const ReplyCopy copy(stream ? 2 : 1, 1);
#if defined(__SSE2__)
    REQUIRE(copy.streaming() == stream);
#endif
    for (std::size_t dst_at = 0; dst_at < 4; ++dst_at) {
      for (std::size_t src_at = 0; src_at < 8; ++src_at) {
        for (const std::size_t n : {0, 1, 3, 4, 5, 8, 17, 1001}) {
          // Whole floats, and a byte count with 1 to 3 bytes past them (the tail copies those).
          for (const std::size_t extra : {0, 3}) {
            const std::size_t bytes = n * sizeof(float) + extra;
            std::vector<unsigned char> src(src_at + bytes + 1);  // never empty: data() not null
            for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7);
            std::vector<float> dst(dst_at + n + 5, -1.f);
            copy(dst.data() + dst_at, src.data() + src_at, bytes);
            CAPTURE(stream);
            CAPTURE(dst_at);
            CAPTURE(src_at);
            CAPTURE(bytes);
            CHECK(std::memcmp(dst.data() + dst_at, src.data() + src_at, bytes) == 0);
            for (std::size_t i = 0; i < dst_at; ++i) CHECK(dst[i] == -1.f);
            // Past the copied bytes: the rest of a partly written float, then whole floats.
            const auto* raw = reinterpret_cast<const unsigned char*>(dst.data());
            const float untouched = -1.f;
            const auto* mark = reinterpret_cast<const unsigned char*>(&untouched);
            for (std::size_t b = (dst_at * sizeof(float)) + bytes; b < dst.size() * sizeof(float);
                 ++b) {
              CHECK(raw[b] == mark[b % sizeof(float)]);
            }
          }
        }
      }
    }
  }
}
