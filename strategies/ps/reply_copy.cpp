#include "strategies/ps/reply_copy.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace gradsync {
namespace {

// "32768K" -> 33554432; 0 for anything else.
std::size_t parse_cache_size(const std::string& text) {
  std::size_t used = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &used);
  } catch (const std::exception&) {
    return 0;
  }
  const std::string unit = text.substr(used);
  if (unit == "K") return value << 10;
  if (unit == "M") return value << 20;
  return unit.empty() ? value : 0;
}

}  // namespace

std::size_t last_level_cache_bytes() {
  std::size_t largest = 0;
  for (int index = 0;; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream size_file(dir + "/size");
    std::ifstream type_file(dir + "/type");
    std::string size, type;
    if (!(size_file >> size) || !(type_file >> type)) break;
    if (type != "Instruction") largest = std::max(largest, parse_cache_size(size));
  }
  if (largest > 0) return largest;
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return static_cast<std::size_t>(std::max({l3, l2, 0L}));
}

#if defined(__SSE2__)
constexpr bool kCanStream = true;
#else
constexpr bool kCanStream = false;
#endif

ReplyCopy::ReplyCopy(std::size_t model_bytes, std::size_t cache_bytes)
    : streaming_(kCanStream && cache_bytes > 0 && model_bytes > cache_bytes) {}

void ReplyCopy::operator()(float* dst, const void* src, std::size_t bytes) const {
  if (bytes == 0) return;  // an empty chunk may come with null pointers, which memcpy forbids
#if defined(__SSE2__)
  if (streaming_) {
    const auto* from = static_cast<const unsigned char*>(src);
    std::size_t n = bytes / sizeof(float);
    // Floats up to a 16-byte boundary of dst, then 4 floats per non-temporal store.
    std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16 / sizeof(float);
    head = std::min(head, n);
    std::memcpy(dst, from, head * sizeof(float));
    std::size_t i = head;
    for (; i + 4 <= n; i += 4) {
      _mm_stream_ps(dst + i,
                    _mm_loadu_ps(reinterpret_cast<const float*>(from + i * sizeof(float))));
    }
    std::memcpy(dst + i, from + i * sizeof(float), bytes - i * sizeof(float));
    // Non-temporal stores are weakly ordered: fenced before anyone reads the parameters.
    _mm_sfence();
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace gradsync
