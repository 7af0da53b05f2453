// The matrix products of an MLP training step, column-major; C is overwritten, or added to
// when `accumulate` (gradient accumulation over micro-batches):
//
//   gemm_nn:  C[M x N] (+)= A[M x K] * B[K x N]      forward:        Z  = W * X
//   gemm_nt:  C[M x N] (+)= A[M x K] * B[N x K]^T    weight grad:    dW = dZ * X^T
//
// The input gradient dX = W^T * dZ is gemm_nn on W^T, transposed into a scratch buffer first
// by transpose(): 256 x 256 floats take ~20 us, a few percent of the step, and keep one kernel.
//
// With AVX-512 these run a register-blocked kernel written for the MLP's shapes (M up to a few
// hundred, N or K = the batch): a 32 x 8 block of C stays in 16 zmm registers for the whole K
// loop, A is read straight from its columns (no packing: for these sizes the copy costs more
// than it saves) and B is broadcast one element at a time. Without AVX-512 they fall back to
// Eigen's general product. Pure functions; thread-safe; no allocation.
#pragma once

namespace gradsync {

void gemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate = false);
void gemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate = false);

// out[cols x rows] = in[rows x cols]^T, both column-major and dense; in 16 x 16 tiles so that
// both the reads and the writes stay within a few cache lines at a time.
void transpose(int rows, int cols, const float* in, float* out);

// True when the AVX-512 kernel is compiled in (for benchmark labels).
bool gemm_uses_avx512();

}  // namespace gradsync
