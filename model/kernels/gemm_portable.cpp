// The portable path: Eigen's general product, built with the build's baseline flags (whatever
// the compiler may assume of every CPU the binary runs on: SSE2 on x86-64 by default, the
// build machine's own set with GRADSYNC_NATIVE).
#include <Eigen/Core>

#include "model/kernels/fma_peak.h"
#include "model/kernels/gemm_kernels.h"

namespace gradsync::kernels {
namespace {

using ConstMap = Eigen::Map<const Eigen::MatrixXf, 0, Eigen::OuterStride<>>;
using Map = Eigen::Map<Eigen::MatrixXf, 0, Eigen::OuterStride<>>;

}  // namespace

void gemm_portable(bool transposed_b, int m, int n, int k, const float* a, int lda, const float* b,
                   int ldb, float* c, int ldc, bool accumulate) {
  Map out(c, m, n, Eigen::OuterStride<>(ldc));
  const ConstMap a_map(a, m, k, Eigen::OuterStride<>(lda));
  if (transposed_b) {
    const auto product = a_map * ConstMap(b, n, k, Eigen::OuterStride<>(ldb)).transpose();
    if (accumulate) {
      out.noalias() += product;
    } else {
      out.noalias() = product;
    }
    return;
  }
  const auto product = a_map * ConstMap(b, k, n, Eigen::OuterStride<>(ldb));
  if (accumulate) {
    out.noalias() += product;
  } else {
    out.noalias() = product;
  }
}

// The build's own widest vectors, written with the compiler's vector extension: SSE2's 4 lanes
// (a multiply and an add, no FMA) on a default x86-64 build, wider under -march=native.
double peak_gflops_portable(double seconds, double (*now)()) {
#if defined(__AVX512F__)
  constexpr int kLanes = 16;
#elif defined(__AVX__)
  constexpr int kLanes = 8;
#else
  constexpr int kLanes = 4;
#endif
  using Vector = float __attribute__((vector_size(4 * kLanes)));
  Vector a, b;
  for (int l = 0; l < kLanes; ++l) {
    a[l] = 0.9999f;
    b[l] = 1e-4f;
  }
  return fma_peak_gflops(seconds, now, kLanes, a, b,
                         [](Vector x, Vector y, Vector z) { return x * y + z; });
}

}  // namespace gradsync::kernels
