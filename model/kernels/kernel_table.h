// One path's kernels, as a table of functions (internal to model/kernels/): cpu_kernels.cpp
// picks the table of the path the CPU runs and calls through it. Each table is built in its
// path's own file, compiled with that path's flags (model/kernels/CMakeLists.txt): the
// hand-written products of gemm_<path>.cpp and the generic elementwise parts of step_ops.inl.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradsync {
struct SoftmaxCrossEntropy;  // cpu_kernels.h
}  // namespace gradsync

namespace gradsync::kernels {

struct KernelTable {
  using Gemm = void (*)(bool transposed_b, int m, int n, int k, const float* a, int lda,
                        const float* b, int ldb, float* c, int ldc, bool accumulate);
  Gemm gemm;
  // C = A^T B straight from A as it lies; null where the product needs A transposed first.
  void (*gemm_tn)(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
                  int ldc, bool accumulate);
  void (*transpose)(int rows, int cols, const float* in, float* out);
  void (*bias_activation)(int rows, int cols, const float* bias, float* out, int ldo, bool relu);
  void (*relu_backward)(int rows, int cols, const float* activation, int lda, float* delta,
                        int ldd);
  void (*bias_gradient)(int rows, int cols, const float* delta, int ldd, float* grad,
                        bool accumulate);
  SoftmaxCrossEntropy (*softmax_cross_entropy)(int classes, int cols, const float* logits, int ldl,
                                               const std::int32_t* labels, float grad_scale,
                                               float* delta, int ldd);
  void (*sgd_update)(std::size_t n, float* params, const float* grads, float* velocity, float lr,
                     float momentum, float weight_decay, float keep);
  double (*peak_gflops)(double seconds, double (*now)());
};

// step_ops_<path>.cpp; the x86 ones exist only where GRADSYNC_X86_KERNELS is defined.
const KernelTable& avx512_table();
const KernelTable& avx2_table();
const KernelTable& portable_table();

}  // namespace gradsync::kernels
