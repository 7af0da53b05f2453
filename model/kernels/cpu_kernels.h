// The CPU kernels of a training step: the matrix products and the fused elementwise parts around
// them (bias + ReLU, ReLU's derivative, the bias gradient, softmax cross-entropy, the SGD
// update). Column-major throughout.
//
// One binary runs on every x86-64 CPU: which kernels run is chosen at run time from the CPU
// (cpuid), whatever the build machine had. Each path is the same source compiled for one
// instruction set (the products hand-written per set, the elementwise parts vectorised by the
// compiler from one generic file):
//   avx512    AVX-512 (F, VL, BW, DQ) + FMA: a 32 x 8 block of C in zmm registers
//   avx2      AVX2 + FMA: its 16 x 6 twin in ymm registers
//   portable  Eigen's general product and the generic loops, at the build's baseline flags
// The fastest path the CPU runs is taken; GRADSYNC_KERNELS=avx512|avx2|portable forces one (a
// path this CPU cannot run is an error naming the variable).
//
// The products take a library where one beats the own kernels on the MLP's shapes (measured by
// bench/micro/gemm_candidates.cpp, docs/cpu-kernels.md) and is installed: oneDNN on the avx512
// path, OpenBLAS on the avx2 path, both loaded at run time; else the path's own kernel.
// GRADSYNC_GEMM=own holds every path to its own kernel (GRADSYNC_GEMM=library, the default,
// takes the library where there is one). The elementwise parts are compiled
// without floating-point contraction, so they give bit-identical results on every path: paths
// differ only in the order the products sum in.
//
// Thread-safe. The first call (or check_kernel_environment(), which main() makes before any
// thread starts) chooses the path and loads its library; the kernels themselves allocate nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gradsync {

enum class CpuPath { kAvx512, kAvx2, kPortable };
enum class GemmSource { kLibrary, kOwn };

// "avx512", "avx2", "portable".
const char* cpu_path_name(CpuPath path);
// The instruction set the path is built for: "avx512f+vl+bw+dq+fma", "avx2+fma", and for portable
// "sse2" (x86-64's baseline), "native" (a -march=native build) or "baseline" (elsewhere).
const char* cpu_path_isa(CpuPath path);
// Whether this CPU (and its OS) runs the path: portable always.
bool cpu_runs(CpuPath path);
// The path every kernel takes: GRADSYNC_KERNELS's on first use, else the fastest this CPU runs.
// Throws ConfigError naming GRADSYNC_KERNELS when it names no path, or one the CPU lacks.
CpuPath cpu_path();
// The path GRADSYNC_KERNELS's value `forced` names (null or empty: the fastest this CPU runs),
// as cpu_path() reads it on first use; throws as cpu_path() does.
CpuPath cpu_path_for(const char* forced);
// Chooses the path now, as the first product would: reads GRADSYNC_KERNELS and GRADSYNC_GEMM
// and loads the path's library. main() calls it before it runs or writes anything, so that a
// bad value fails there, and before any thread starts (loading OpenBLAS sets an environment
// variable for the moment). Throws as cpu_path().
void check_kernel_environment();
// GRADSYNC_GEMM's value (null or empty: library); throws ConfigError naming it otherwise.
GemmSource gemm_source_for(const char* forced);
// Forces a path and the source of its products (tests, benchmarks); throws Error when the CPU
// cannot run the path.
void set_cpu_path(CpuPath path, GemmSource source = GemmSource::kLibrary);
// What the products of the path in force run on: "onednn:<its instruction set>",
// "openblas:<its kernels>" (e.g. openblas:Haswell), "own", or "eigen" (the portable path's).
std::string gemm_name();
// One core's fp32 peak in GFLOP/s for the path's instruction set, measured for about `seconds`
// (independent multiply-add chains as wide as the set's vectors: FMA where it has it): the
// ceiling a single-thread step on that path can reach.
double measure_peak_gflops(CpuPath path, double seconds);

// ---- products --------------------------------------------------------------------------------
//   gemm_nn:  C[M x N] (+)= A[M x K] * B[K x N]      forward:        Z  = W * X
//   gemm_nt:  C[M x N] (+)= A[M x K] * B[N x K]^T    weight grad:    dW = dZ * X^T
// C is overwritten, or added to when `accumulate` (gradient accumulation over micro-batches).
//   gemm_tn:  C[M x N] (+)= A[K x M]^T * B[K x N]    input grad:     dX = W^T * dZ
// gemm_tn hands the transposed A to a library that takes it as it lies; the own kernels
// transpose A into `scratch` (M x K floats) first and run gemm_nn on it: 256 x 256 floats take a
// few microseconds in AVX2 registers, and one kernel serves all three products.
void gemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate = false);
void gemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate = false);
void gemm_tn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, float* scratch, bool accumulate = false);
// out[cols x rows] = in[rows x cols]^T, both column-major and dense.
void transpose(int rows, int cols, const float* in, float* out);

// ---- the elementwise parts -------------------------------------------------------------------
// out[:, j] += bias for every column j < cols, then max(out, 0) where `relu`: one pass over the
// layer's output while it is still in cache.
void bias_activation(int rows, int cols, const float* bias, float* out, int ldo, bool relu);
// ReLU's derivative: delta = 0 where the layer's output (after ReLU) is not positive.
void relu_backward(int rows, int cols, const float* activation, int lda, float* delta, int ldd);
// grad[i] (+)= sum over j < cols of delta[i, j]: the bias gradient, summed in column order.
void bias_gradient(int rows, int cols, const float* delta, int ldd, float* grad, bool accumulate);

struct SoftmaxCrossEntropy {
  double loss_sum = 0;       // sum over the batch of -log softmax(z)[label]
  std::int64_t correct = 0;  // columns whose largest logit is the label's
};
// Softmax cross-entropy of `cols` columns of `classes` logits against labels[j] (each in
// [0, classes), checked by the caller). With `delta` (may be null): delta[:, j] =
// (softmax(z_j) - onehot(label_j)) * grad_scale, the gradient of grad_scale * the summed loss.
SoftmaxCrossEntropy softmax_cross_entropy(int classes, int cols, const float* logits, int ldl,
                                          const std::int32_t* labels, float grad_scale,
                                          float* delta, int ldd);

// SGD with momentum and weight decay over n parameters, torch.optim.SGD's rule:
//   d = grad + weight_decay * p;  v = keep * v + d;  p -= lr * (momentum == 0 ? d : v)
// (`keep` is the momentum, or 0 on the first step: the buffer starts as the first gradient).
void sgd_update(std::size_t n, float* params, const float* grads, float* velocity, float lr,
                float momentum, float weight_decay, float keep);

}  // namespace gradsync
