// The matrix products of an MLP training step, column-major; C is overwritten, or added to
// when `accumulate` (gradient accumulation over micro-batches):
//
//   gemm_nn:  C[M x N] (+)= A[M x K] * B[K x N]      forward:        Z  = W * X
//   gemm_nt:  C[M x N] (+)= A[M x K] * B[N x K]^T    weight grad:    dW = dZ * X^T
//
// The input gradient dX = W^T * dZ is gemm_nn on W^T, transposed into a scratch buffer first
// by transpose(): 256 x 256 floats take ~20 us, a few percent of the step, and keep one kernel.
//
// Which kernel runs is chosen at run time from the CPU (cpuid), whatever the build machine had:
// a register-blocked kernel written for the MLP's shapes with AVX-512 (32 x 8 blocks of C in
// zmm registers) or AVX2 + FMA (its 16 x 6 twin), else Eigen's general product
// (model/kernels/). GRADSYNC_GEMM=avx512|avx2|portable forces one (a path this CPU cannot run
// is an error naming the variable). Pure functions; thread-safe; no allocation.
#pragma once

namespace gradsync {

enum class GemmPath { kAvx512, kAvx2, kPortable };

// "avx512", "avx2", "portable".
const char* gemm_path_name(GemmPath path);
// Whether this CPU (and its OS) runs the path: portable always.
bool cpu_runs(GemmPath path);
// The path gemm_nn and gemm_nt take: GRADSYNC_GEMM's on first use, else the fastest this CPU
// runs. Throws ConfigError naming GRADSYNC_GEMM when it names no path, or one the CPU lacks.
GemmPath gemm_path();
// The path GRADSYNC_GEMM's value `forced` names (null or empty: the fastest this CPU runs), as
// gemm_path() reads it on first use; throws as gemm_path() does.
GemmPath gemm_path_for(const char* forced);
// Forces a path (tests, benchmarks); throws Error when the CPU cannot run it.
void set_gemm_path(GemmPath path);

void gemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate = false);
void gemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate = false);

// out[cols x rows] = in[rows x cols]^T, both column-major and dense; in 16 x 16 tiles so that
// both the reads and the writes stay within a few cache lines at a time.
void transpose(int rows, int cols, const float* in, float* out);

}  // namespace gradsync
