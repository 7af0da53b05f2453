// fp16 and bf16 gradient codecs: 32-bit floats to 16 bits for the wire and back, as DDP's
// fp16_compress_hook and bf16_compress_hook do, so a gradient moves in half the bytes.
//
//   std::vector<std::uint16_t> wire(grad.size());
//   encode_fp16(grad, wire, world_size);    // wire[i] = fp16(grad[i] / N): divided BEFORE the sum
//   ... all-reduce (sum) the 16-bit values, or push them to a shard ...
//   decode_fp16(wire, grad);                // grad[i] = float(wire[i]): the average, in fp32
//
// encode_half / decode_half do the same for a format chosen at run time (HalfType::kFp16 or
// kBf16, and the ps wire's PushEncoding), so callers need not branch on it themselves.
//
// Why divide first: fp16 tops out at 65504, so N workers' sum of large gradients overflows to
// inf where their average would not (DDP divides by the world size before the all-reduce for
// this reason). The division is in fp32, then one rounding to 16 bits; dividing the 16-bit value
// instead (as DDP does) would round twice and lose the values above 65504 that the average keeps.
//
// Rounding is IEEE round-to-nearest-even, in both formats:
//   - fp16 (1 sign, 5 exponent, 10 mantissa bits): finite values that round above 65504 become
//     inf; values below 2^-14 become subnormals, correctly rounded, and below 2^-25 zero.
//   - bf16 (1, 8, 7: fp32's top half): the same range as fp32, 8 bits of precision; fp32's
//     largest values round up to inf exactly as RNE says they must.
// Infinities keep their sign. NaN stays NaN (quiet, sign and the top payload bits kept), as x86's
// F16C instructions do it, so the scalar and the F16C path give the same bits on every input.
//
// Relative error of a normal value: at most 2^-11 (fp16) and 2^-8 (bf16). Values that are
// exactly representable round-trip exactly.
//
// Speed: the span functions take F16C (with AVX) where the CPU has it, checked once at run time
// (the build is baseline x86-64); elsewhere a scalar loop. Both give identical bits, so ranks on
// different CPUs still agree. The bf16 loop is branch-free integer code the compiler vectorises.
//
// Thread safety: pure functions over caller-owned buffers; src and dst must not overlap.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

namespace gradsync::compression {

// ---- One value (the reference the span functions must match bit for bit) ----

constexpr std::uint16_t fp16_from_float(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude >= 0x7F800000u) {
    // inf stays inf; a NaN is made quiet (bit 9) and keeps the top 10 bits of its payload.
    const std::uint32_t nan = magnitude > 0x7F800000u ? 0x0200u | ((magnitude >> 13) & 0x3FFu) : 0;
    return static_cast<std::uint16_t>(sign | 0x7C00u | nan);
  }
  // 65520 is halfway between 65504 (the largest fp16, odd mantissa) and 65536: from there on,
  // round-to-even goes up, to inf.
  if (magnitude >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);
  if (magnitude >= 0x38800000u) {
    // Normal in fp16 (>= 2^-14): rebias the exponent (127 -> 15) and drop 13 mantissa bits,
    // rounding to nearest even; a carry out of the mantissa correctly bumps the exponent.
    const std::uint32_t rebiased = magnitude - (112u << 23);
    const std::uint32_t rounded = rebiased + 0x0FFFu + ((rebiased >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (rounded >> 13));
  }
  // Subnormal in fp16: the value in units of 2^-24 is mantissa * 2^(exponent - 126), i.e. the
  // 24-bit mantissa (implicit 1 included) shifted right by 126 - exponent >= 14. Below 2^-25
  // (shift > 24) everything rounds to zero, ties included (zero is even).
  const std::uint32_t exponent = magnitude >> 23;
  const std::uint32_t shift = 126u - exponent;
  if (shift > 24u) return sign;
  const std::uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
  const std::uint32_t kept = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  const std::uint32_t up = (rest > half || (rest == half && (kept & 1u))) ? 1u : 0u;
  // kept + up may reach 0x400, the smallest normal: exactly the right encoding.
  return static_cast<std::uint16_t>(sign | (kept + up));
}

constexpr float float_from_fp16(std::uint16_t half) {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
  const std::uint32_t exponent = (half >> 10) & 0x1Fu;
  const std::uint32_t mantissa = half & 0x3FFu;
  if (exponent == 0x1Fu) {
    // inf, or a NaN made quiet (bit 22) with its payload in the top mantissa bits.
    const std::uint32_t nan = mantissa != 0 ? 0x400000u | (mantissa << 13) : 0;
    return std::bit_cast<float>(sign | 0x7F800000u | nan);
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in fp32 (a 10-bit integer times a power of 2).
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

constexpr std::uint16_t bf16_from_float(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  // Round to nearest even on the low 16 bits; a carry may run into the exponent, up to inf.
  const std::uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  // A NaN must not round into inf (or wrap the sign): keep its top bits and make it quiet.
  const std::uint32_t quiet_nan = (bits >> 16) | 0x0040u;
  const bool is_nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<std::uint16_t>(is_nan ? quiet_nan : rounded);
}

constexpr float float_from_bf16(std::uint16_t value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value) << 16);
}

// ---- Spans: dst.size() must equal src.size() (checked; gradsync::Error otherwise) ----

// dst[i] = fp16(src[i] / divisor): pass the world size to average (see above), 1 to just encode.
void encode_fp16(std::span<const float> src, std::span<std::uint16_t> dst, float divisor = 1.0f);
void decode_fp16(std::span<const std::uint16_t> src, std::span<float> dst);

// dst[i] = bf16(src[i] / divisor).
void encode_bf16(std::span<const float> src, std::span<std::uint16_t> dst, float divisor = 1.0f);
void decode_bf16(std::span<const std::uint16_t> src, std::span<float> dst);

// Either format, picked at run time by a tag: any enum that names the two formats kFp16 and
// kBf16, as allreduce's HalfType and the wire's PushEncoding both do (common/ cannot include
// HalfType). kFp16 takes the fp16 functions above and any other value the bf16 ones, so callers
// pass one of the two (a PushEncoding only once it is known to be a 16-bit one).
template <typename Format>
requires requires { Format::kFp16, Format::kBf16; }
void encode_half(Format format, std::span<const float> src, std::span<std::uint16_t> dst,
                 float divisor = 1.0f) {
  if (format == Format::kFp16) {
    encode_fp16(src, dst, divisor);
  } else {
    encode_bf16(src, dst, divisor);
  }
}

template <typename Format>
requires requires { Format::kFp16, Format::kBf16; }
void decode_half(Format format, std::span<const std::uint16_t> src, std::span<float> dst) {
  if (format == Format::kFp16) {
    decode_fp16(src, dst);
  } else {
    decode_bf16(src, dst);
  }
}

// Whether encode_fp16 / decode_fp16 run on F16C here (for logs and benchmarks).
bool fp16_uses_f16c();

// Bytes on the wire for `elements` gradient values in either 16-bit format.
constexpr std::uint64_t half_wire_bytes(std::uint64_t elements) { return 2 * elements; }

}  // namespace gradsync::compression
