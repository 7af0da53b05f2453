#include "allreduce/shm/shm_sum.h"

#include <algorithm>

namespace gradsync::shm {

// Blocks of 1024 floats keep the running sum in L1 across the slots: each slot's block is read
// once, the output's block stays put until every slot is in.
void sum_slots(float* out, const std::vector<const float*>& slots, std::size_t begin,
               std::size_t end, float divisor) {
  constexpr std::size_t kBlock = 1024;
  for (std::size_t b = begin; b < end; b += kBlock) {
    const std::size_t e = std::min(end, b + kBlock);
    float* __restrict o = out + b;
    const std::size_t n = e - b;
    const float* __restrict first = slots[0] + b;
    for (std::size_t i = 0; i < n; ++i) o[i] = first[i];
    for (std::size_t k = 1; k < slots.size(); ++k) {
      const float* __restrict s = slots[k] + b;
      for (std::size_t i = 0; i < n; ++i) o[i] += s[i];
    }
    if (divisor != 0.0f) {
      for (std::size_t i = 0; i < n; ++i) o[i] /= divisor;
    }
  }
}

}  // namespace gradsync::shm
