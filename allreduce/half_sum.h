// The arithmetic of allreduce_half (allreduce/communicator.h) on the host, the one every CPU
// backend runs so that they round alike: 16-bit floats (HalfType's bit patterns) widened to
// fp32, added there, rounded back to 16 bits by common/compression/half_codec.h (round to
// nearest even, overflow to inf, NaN stays NaN). For one addition that is the correctly rounded
// 16-bit sum, what NCCL's __hadd gives: fp32's 24 bits are at least twice 11 (fp16) or 8 (bf16)
// plus 2, so rounding the fp32 sum again never differs from rounding the exact one.
//
//   add_halves(HalfType::kFp16, mine, received, mine, n);   // a ring step: mine += received
//   divide_halves(HalfType::kFp16, mine, n, 4.0f);          // kAvg, once, on the finished sum
//   sum_half_slots(HalfType::kBf16, out, slots, n, 0.0f);   // shm: all in fp32, one rounding
//
// Works in blocks of a few hundred values on the stack (F16C where the CPU has it, through the
// codec's span functions); no allocation, no state; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "allreduce/communicator.h"

namespace gradsync {

// dst[i] = round16(float(a[i]) + float(b[i])): one addition, one rounding. dst may be a or b
// (in place), but must not overlap them otherwise.
void add_halves(HalfType type, const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* dst,
                std::size_t n);

// data[i] = round16(float(data[i]) / divisor): kAvg's one division of the finished sum.
void divide_halves(HalfType type, std::uint16_t* data, std::size_t n, float divisor);

// out[i] = round16((((float(s0[i]) + float(s1[i])) + float(s2[i])) + ...)): every slot's value
// added in fp32 in slot order, then rounded once; with a non-zero `divisor`, that 16-bit sum is
// then divided (divide_halves). out must not overlap the slots.
void sum_half_slots(HalfType type, std::uint16_t* out, std::span<const std::uint16_t* const> slots,
                    std::size_t n, float divisor);

}  // namespace gradsync
