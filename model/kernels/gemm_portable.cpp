// The portable path: Eigen's general product, built with the build's baseline flags (whatever
// the compiler may assume of every CPU the binary runs on: SSE2 on x86-64 by default, the
// build machine's own set with GRADSYNC_NATIVE).
#include <Eigen/Core>

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

}  // namespace gradsync::kernels
