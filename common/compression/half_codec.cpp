#include "common/compression/half_codec.h"

#include <string>

#include "common/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define GRADSYNC_HALF_F16C 1
#endif

namespace gradsync::compression {
namespace {

void check_sizes(std::size_t src, std::size_t dst, const char* what) {
  GRADSYNC_CHECK(src == dst, std::string(what) + ": " + std::to_string(src) +
                                 " values in, room for " + std::to_string(dst) + " out");
}

void encode_fp16_scalar(const float* src, std::uint16_t* dst, std::size_t n, float divisor) {
  if (divisor == 1.0f) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = fp16_from_float(src[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = fp16_from_float(src[i] / divisor);
  }
}

void decode_fp16_scalar(const std::uint16_t* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = float_from_fp16(src[i]);
}

#if defined(GRADSYNC_HALF_F16C)
// Compiled for AVX + F16C whatever the build's baseline; called only where cpuid has both. The
// tail goes through the scalar reference, which gives the same bits (the division is IEEE in
// both, and vcvtps2ph rounds to nearest even as fp16_from_float does).
__attribute__((target("avx,f16c"))) void encode_fp16_f16c(const float* src, std::uint16_t* dst,
                                                          std::size_t n, float divisor) {
  const bool divide = divisor != 1.0f;
  const __m256 by = _mm256_set1_ps(divisor);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(src + i);
    if (divide) v = _mm256_div_ps(v, by);
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  encode_fp16_scalar(src + i, dst + i, n - i, divisor);
}

__attribute__((target("avx,f16c"))) void decode_fp16_f16c(const std::uint16_t* src, float* dst,
                                                          std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  decode_fp16_scalar(src + i, dst + i, n - i);
}

// F16C from cpuid itself: clang's __builtin_cpu_supports does not know "f16c". Its "avx" also
// checks that the OS saves the YMM registers, which the 256-bit loops need.
bool cpu_has_f16c() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 &&
           (ecx & bit_F16C) != 0;
  }();
  return has;
}
#endif

}  // namespace

bool fp16_uses_f16c() {
#if defined(GRADSYNC_HALF_F16C)
  return cpu_has_f16c();
#else
  return false;
#endif
}

void encode_fp16(std::span<const float> src, std::span<std::uint16_t> dst, float divisor) {
  check_sizes(src.size(), dst.size(), "encode_fp16");
#if defined(GRADSYNC_HALF_F16C)
  if (cpu_has_f16c()) return encode_fp16_f16c(src.data(), dst.data(), src.size(), divisor);
#endif
  encode_fp16_scalar(src.data(), dst.data(), src.size(), divisor);
}

void decode_fp16(std::span<const std::uint16_t> src, std::span<float> dst) {
  check_sizes(src.size(), dst.size(), "decode_fp16");
#if defined(GRADSYNC_HALF_F16C)
  if (cpu_has_f16c()) return decode_fp16_f16c(src.data(), dst.data(), src.size());
#endif
  decode_fp16_scalar(src.data(), dst.data(), src.size());
}

void encode_bf16(std::span<const float> src, std::span<std::uint16_t> dst, float divisor) {
  check_sizes(src.size(), dst.size(), "encode_bf16");
  const std::size_t n = src.size();
  const float* in = src.data();
  std::uint16_t* out = dst.data();
  // Two loops rather than a branch inside one, so each vectorises on its own.
  if (divisor == 1.0f) {
    for (std::size_t i = 0; i < n; ++i) out[i] = bf16_from_float(in[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] = bf16_from_float(in[i] / divisor);
  }
}

void decode_bf16(std::span<const std::uint16_t> src, std::span<float> dst) {
  check_sizes(src.size(), dst.size(), "decode_bf16");
  const std::size_t n = src.size();
  const std::uint16_t* in = src.data();
  float* out = dst.data();
  for (std::size_t i = 0; i < n; ++i) out[i] = float_from_bf16(in[i]);
}

}  // namespace gradsync::compression
