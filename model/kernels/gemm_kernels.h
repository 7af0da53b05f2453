// The gemm kernels behind model/cpu_gemm.h, one per instruction set, each in its own file
// compiled with that set's flags (model/CMakeLists.txt): cpu_gemm.cpp calls the one the CPU
// runs. Same contract as gemm_nn / gemm_nt: column-major, C overwritten or (accumulate) added
// to; `transposed_b` selects B(k, j) = b[k * ldb + j] (nt) over b[j * ldb + k] (nn).
// Internal to model/.
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

}  // namespace gradsync::kernels
