// Comparing the parameters of two runs that should follow the same trajectory.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "model/mlp.h"

namespace gradsync::testing {

// The relative difference of a tensor: max_i |a_i - b_i| / max_i |b_i|.
//
// Element by element relative differences are ill-posed here: a weight that passes near zero
// (1e-5) differs by one float rounding (1e-8 absolute, the ulp of a typical 0.1 weight) between
// two summation orders, which reads as 1e-3 "relative". Measured against the tensor's own scale,
// the same rounding reads as ~1e-7, while a real error (a wrong average, a missed replica, a
// stale parameter) still shows as 1e-2 or more.
inline double tensor_relative_difference(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// The worst tensor_relative_difference over every weight matrix and bias vector of the MLP.
inline double max_relative_difference(std::span<const float> a, std::span<const float> b,
                                      const std::vector<LayerRange>& layers) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (const LayerRange& l : layers) {
    const std::size_t w = l.bias_offset - l.weight_offset;
    worst = std::max(worst, tensor_relative_difference(a.subspan(l.weight_offset, w),
                                                       b.subspan(l.weight_offset, w)));
    worst = std::max(worst, tensor_relative_difference(a.subspan(l.bias_offset, l.out),
                                                       b.subspan(l.bias_offset, l.out)));
  }
  return worst;
}

}  // namespace gradsync::testing
