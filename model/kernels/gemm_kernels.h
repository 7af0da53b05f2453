// The gemm kernels behind cpu_kernels.h, one per instruction set, each in its own file compiled
// with that set's flags (CMakeLists.txt here), and each set's peak measurement beside it.
// Same contract as gemm_nn / gemm_nt: column-major, C overwritten or (accumulate) added to;
// `transposed_b` selects B(k, j) = b[k * ldb + j] (nt) over b[j * ldb + k] (nn).
// Internal to model/kernels/.
#pragma once

namespace gradsync::kernels {

// AVX-512F: a 32 x 8 block of C in 16 zmm accumulators (gemm_avx512.cpp).
void gemm_avx512(bool transposed_b, int m, int n, int k, const float* a, int lda, const float* b,
                 int ldb, float* c, int ldc, bool accumulate);
// AVX2 + FMA: its twin, a 16 x 6 block in 12 ymm accumulators (gemm_avx2.cpp).
void gemm_avx2(bool transposed_b, int m, int n, int k, const float* a, int lda, const float* b,
               int ldb, float* c, int ldc, bool accumulate);
// Eigen's general product, built with the build's baseline flags (gemm_portable.cpp).
void gemm_portable(bool transposed_b, int m, int n, int k, const float* a, int lda, const float* b,
                   int ldb, float* c, int ldc, bool accumulate);

// out[cols x rows] = in[rows x cols]^T with AVX2 registers (gemm_avx2.cpp): the avx2 and
// avx512 paths' transpose.
void transpose_avx2(int rows, int cols, const float* in, float* out);

// One core's fp32 peak on each set's widest vectors, measured for about `seconds` by the clock
// `now` (seconds; fma_peak.h).
double peak_gflops_avx512(double seconds, double (*now)());
double peak_gflops_avx2(double seconds, double (*now)());
double peak_gflops_portable(double seconds, double (*now)());

}  // namespace gradsync::kernels
