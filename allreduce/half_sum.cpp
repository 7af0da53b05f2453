#include "allreduce/half_sum.h"

#include <algorithm>

#include "common/compression/half_codec.h"

namespace gradsync {
namespace {

// Values per block: the fp32 copies of a block live on the stack (3 KiB at most).
constexpr std::size_t kBlock = 256;

void widen(HalfType type, const std::uint16_t* src, float* dst, std::size_t n) {
  compression::decode_half(type, {src, n}, {dst, n});
}

// dst[i] = round16(src[i] / divisor); the codec divides in fp32 first, then rounds once.
void narrow(HalfType type, const float* src, std::uint16_t* dst, std::size_t n,
            float divisor = 1.0f) {
  compression::encode_half(type, {src, n}, {dst, n}, divisor);
}

}  // namespace

void add_halves(HalfType type, const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* dst,
                std::size_t n) {
  float x[kBlock], y[kBlock];
  for (std::size_t begin = 0; begin < n; begin += kBlock) {
    const std::size_t m = std::min(kBlock, n - begin);
    // Both widened before dst is written: in place (dst == a or b) reads each block first.
    widen(type, a + begin, x, m);
    widen(type, b + begin, y, m);
    for (std::size_t i = 0; i < m; ++i) x[i] += y[i];
    narrow(type, x, dst + begin, m);
  }
}

void divide_halves(HalfType type, std::uint16_t* data, std::size_t n, float divisor) {
  float x[kBlock];
  for (std::size_t begin = 0; begin < n; begin += kBlock) {
    const std::size_t m = std::min(kBlock, n - begin);
    widen(type, data + begin, x, m);
    narrow(type, x, data + begin, m, divisor);
  }
}

void sum_half_slots(HalfType type, std::uint16_t* out, std::span<const std::uint16_t* const> slots,
                    std::size_t n, float divisor) {
  float sum[kBlock], next[kBlock];
  for (std::size_t begin = 0; begin < n; begin += kBlock) {
    const std::size_t m = std::min(kBlock, n - begin);
    widen(type, slots[0] + begin, sum, m);
    for (std::size_t k = 1; k < slots.size(); ++k) {
      widen(type, slots[k] + begin, next, m);
      for (std::size_t i = 0; i < m; ++i) sum[i] += next[i];
    }
    narrow(type, sum, out + begin, m);
  }
  if (divisor != 0.0f) divide_halves(type, out, n, divisor);
}

}  // namespace gradsync
