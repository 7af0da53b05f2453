#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "server/reply_copy.h"

using gradsync::ReplyCopy;

TEST_CASE("ReplyCopy streams only a model larger than the cache, and only a known cache") {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  CHECK(ReplyCopy(64 * kMiB, 32 * kMiB).streaming());
  CHECK_FALSE(ReplyCopy(4 * kMiB, 32 * kMiB).streaming());
  CHECK_FALSE(ReplyCopy(32 * kMiB, 32 * kMiB).streaming());
  CHECK_FALSE(ReplyCopy(64 * kMiB, 0).streaming());
  const std::size_t cache = gradsync::last_level_cache_bytes();
  CHECK((cache == 0 || cache >= 4096));  // unknown, or a size a cache can have
}

TEST_CASE("ReplyCopy copies every byte and nothing past the range, at any alignment") {
  // A chunk lands anywhere in the parameters: every start within a 16-byte line, sizes around
  // the 4-float stores, and a payload at any byte offset (ZeroMQ's frames give no promise).
  for (const bool stream : {false, true}) {
    const ReplyCopy copy(stream ? 2 : 1, 1);
    REQUIRE(copy.streaming() == stream);
    for (std::size_t dst_at = 0; dst_at < 4; ++dst_at) {
      for (std::size_t src_at = 0; src_at < 8; ++src_at) {
        for (const std::size_t n : {0, 1, 3, 4, 5, 8, 17, 1001}) {
          std::vector<unsigned char> src(src_at + n * sizeof(float));
          for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7);
          std::vector<float> dst(dst_at + n + 4, -1.f);
          copy(dst.data() + dst_at, src.data() + src_at, n * sizeof(float));
          CAPTURE(stream);
          CAPTURE(dst_at);
          CAPTURE(src_at);
          CAPTURE(n);
          CHECK(std::memcmp(dst.data() + dst_at, src.data() + src_at, n * sizeof(float)) == 0);
          for (std::size_t i = 0; i < dst_at; ++i) CHECK(dst[i] == -1.f);
          for (std::size_t i = dst_at + n; i < dst.size(); ++i) CHECK(dst[i] == -1.f);
        }
      }
    }
  }
}
