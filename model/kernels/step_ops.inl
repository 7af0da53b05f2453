// The elementwise parts of a step, written once as plain loops and compiled once per path by
// step_ops_<path>.cpp, each with its instruction set's flags (model/kernels/CMakeLists.txt): the
// compiler vectorises the same loops to 16, 8 or 4 lanes. The includer defines
//   GRADSYNC_KERNEL_TABLE  the name of the path's table function (kernel_table.h)
//   GRADSYNC_KERNEL_GEMM   the path's product (gemm_kernels.h)
//   GRADSYNC_KERNEL_PEAK   the path's peak measurement (gemm_kernels.h)
// and may define GRADSYNC_KERNEL_TRANSPOSE, a hand-written transpose taking the generic one's
// place.
// Every function is in an anonymous namespace, so no copy built for one instruction set can be
// merged with another's at link time. The files are compiled without floating-point
// contraction: every path computes each element with the same IEEE operations in the same
// order, and the results are bit-identical whatever the vector width.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "model/kernels/cpu_kernels.h"
#include "model/kernels/gemm_kernels.h"
#include "model/kernels/kernel_table.h"

namespace gradsync::kernels {
namespace {

// Helpers of our own rather than std::max, std::min, std::max_element or std::fill: a standard
// template instantiated here would be a weak symbol the linker may share with the copy another
// path's file compiled for another instruction set (CMakeLists.txt here).
// Both keep a NaN in `x`: a diverging run must show in its loss, not turn into 0 (ReLU) or into
// e^-87 (the softmax's clamp).
inline float at_least(float x, float floor) { return x < floor ? floor : x; }
inline int smaller(int a, int b) { return a < b ? a : b; }

#if defined(GRADSYNC_KERNEL_TRANSPOSE)
constexpr auto transpose = GRADSYNC_KERNEL_TRANSPOSE;
#else
void transpose(int rows, int cols, const float* in, float* out) {
  // 16 x 16 tiles, so that both the reads and the writes stay within a few cache lines.
  constexpr int kTile = 16;
  for (int j0 = 0; j0 < cols; j0 += kTile) {
    const int j1 = smaller(j0 + kTile, cols);
    for (int i0 = 0; i0 < rows; i0 += kTile) {
      const int i1 = smaller(i0 + kTile, rows);
      for (int i = i0; i < i1; ++i) {
        for (int j = j0; j < j1; ++j) {
          out[static_cast<long>(i) * cols + j] = in[static_cast<long>(j) * rows + i];
        }
      }
    }
  }
}
#endif

void bias_activation(int rows, int cols, const float* bias, float* out, int ldo, bool relu) {
  for (int j = 0; j < cols; ++j) {
    float* __restrict o = out + static_cast<long>(j) * ldo;
    if (relu) {
      for (int i = 0; i < rows; ++i) o[i] = at_least(o[i] + bias[i], 0.f);
    } else {
      for (int i = 0; i < rows; ++i) o[i] = o[i] + bias[i];
    }
  }
}

void relu_backward(int rows, int cols, const float* activation, int lda, float* delta, int ldd) {
  for (int j = 0; j < cols; ++j) {
    const float* __restrict a = activation + static_cast<long>(j) * lda;
    float* __restrict d = delta + static_cast<long>(j) * ldd;
    for (int i = 0; i < rows; ++i) d[i] = a[i] > 0.f ? d[i] : 0.f;
  }
}

void bias_gradient(int rows, int cols, const float* delta, int ldd, float* grad, bool accumulate) {
  // Column by column, each row's sum in the same order on every path (vectorised across rows).
  if (!accumulate) {
    for (int i = 0; i < rows; ++i) grad[i] = 0.f;
  }
  for (int j = 0; j < cols; ++j) {
    const float* __restrict d = delta + static_cast<long>(j) * ldd;
    float* __restrict g = grad;
    for (int i = 0; i < rows; ++i) g[i] = g[i] + d[i];
  }
}

// exp(x) for x <= 0 (logits minus their maximum), within 2 ulp of the exact value: x = n ln2 + r
// with |r| <= ln2 / 2, then 2^n * a degree-6 polynomial for e^r (Cephes' expf). Written without
// library calls or branches, so the compiler vectorises the loops around it.
inline float exp_nonpositive(float x) {
  x = at_least(x, -87.3f);  // below this e^x is denormal: as good as 0 for a softmax
  // Round to nearest by adding and taking away 1.5 * 2^23 (no library call, no SSE4.1 needed).
  const float n = (x * 1.44269504088896341f + 12582912.f) - 12582912.f;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;  // ln2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  // A NaN x makes p NaN, and so the result; n is kept a number for the conversion.
  const std::int32_t bits = (static_cast<std::int32_t>(n == n ? n : 0.f) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

SoftmaxCrossEntropy softmax_cross_entropy(int classes, int cols, const float* logits, int ldl,
                                          const std::int32_t* labels, float grad_scale,
                                          float* delta, int ldd) {
  SoftmaxCrossEntropy result{};  // aggregate initialisation: no constructor to instantiate
  for (int j = 0; j < cols; ++j) {
    const float* z = logits + static_cast<long>(j) * ldl;
    const int label = labels[j];
    int argmax = 0;  // the first largest, as std::max_element would pick
    for (int c = 1; c < classes; ++c) argmax = z[c] > z[argmax] ? c : argmax;
    const float zmax = z[argmax];
    // Subtracting the max keeps exp() from overflowing; log-sum-exp then gives the loss. The
    // sum runs in class order either way, so the loss is the same with or without gradients.
    float sum = 0;
    if (delta == nullptr) {
      for (int c = 0; c < classes; ++c) sum += exp_nonpositive(z[c] - zmax);
    } else {
      float* __restrict d = delta + static_cast<long>(j) * ldd;
      for (int c = 0; c < classes; ++c) d[c] = exp_nonpositive(z[c] - zmax);
      for (int c = 0; c < classes; ++c) sum += d[c];
      // d(grad_scale * loss)/dz = (softmax(z) - onehot(label)) * grad_scale
      const float scale = grad_scale / sum;
      for (int c = 0; c < classes; ++c) d[c] = d[c] * scale;
      d[label] -= grad_scale;
    }
    result.loss_sum += std::log(static_cast<double>(sum)) - (z[label] - zmax);
    result.correct += (argmax == label);
  }
  return result;
}

void sgd_update(std::size_t n, float* __restrict p, const float* __restrict g,
                float* __restrict v, float lr, float momentum, float weight_decay, float keep) {
  if (momentum == 0.f) {
    for (std::size_t i = 0; i < n; ++i) {
      const float d = g[i] + weight_decay * p[i];
      v[i] = keep * v[i] + d;
      p[i] = p[i] - lr * d;
    }
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const float d = g[i] + weight_decay * p[i];
    const float vi = keep * v[i] + d;
    v[i] = vi;
    p[i] = p[i] - lr * vi;
  }
}

}  // namespace

const KernelTable& GRADSYNC_KERNEL_TABLE() {
  static const KernelTable table{GRADSYNC_KERNEL_GEMM,  nullptr,  transpose,
                                 bias_activation,       relu_backward,
                                 bias_gradient,         softmax_cross_entropy,
                                 sgd_update,            GRADSYNC_KERNEL_PEAK};
  return table;
}

}  // namespace gradsync::kernels
