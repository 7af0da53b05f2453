// The shared-memory backend's reduction kernel: each rank sums its slice of every chunk from
// all ranks' slots, in one fixed order, so that every element's sum is the same bits whichever
// rank computes it.
//
//   sum_slots(out, {a, b, c}, lo, hi, 0.0f);  // out[i] = (a[i] + b[i]) + c[i], lo <= i < hi
//   sum_slots(out, {a, b, c}, lo, hi, 3.0f);  // the same, divided by 3 (the average)
#pragma once

#include <cstddef>
#include <vector>

namespace gradsync::shm {

// out[i] = (((s[0][i] + s[1][i]) + s[2][i]) + ...) for i in [begin, end), divided by `divisor`
// when it is not 0. `out` and the slots are indexed alike, and `out` overlaps no slot.
void sum_slots(float* out, const std::vector<const float*>& slots, std::size_t begin,
               std::size_t end, float divisor);

}  // namespace gradsync::shm
