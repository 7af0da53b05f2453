// The AVX-512 kernel, written for the MLP's shapes (M up to a few hundred, N or K = the batch):
// a 32 x 8 block of C stays in 16 zmm registers for the whole K loop, A is read straight from
// its columns (no packing: for these sizes the copy costs more than it saves) and B is
// broadcast one element at a time; the last, partial row block goes through masks. Compiled
// with AVX-512F and FMA (model/CMakeLists.txt); called only where the CPU has them.
#include <immintrin.h>

#include "model/kernels/fma_peak.h"
#include "model/kernels/gemm_kernels.h"

namespace gradsync::kernels {
namespace {

constexpr int kMr = 32;  // rows of C per block: two zmm registers
constexpr int kNr = 8;   // columns of C per block: 2 x 8 = 16 accumulators, 19 registers in all

// B(k, j) for the two layouts: column-major B (nn) or the transpose of column-major B (nt).
template <bool kTransposedB>
inline const float* b_element(const float* b, int ldb, int k, int j) {
  return kTransposedB ? b + static_cast<long>(k) * ldb + j : b + static_cast<long>(j) * ldb + k;
}

// One block: C[0:rows, 0:NR] = A[0:rows, 0:K] * B(0:K, 0:NR), rows <= 32 through the masks.
template <int NR, bool kTransposedB>
void block(int k_size, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
           __mmask16 low, __mmask16 high, bool accumulate) {
  // Every loop over the accumulators is fully unrolled: only then does GCC keep the arrays in
  // registers instead of storing them to the stack on every iteration.
  __m512 acc0[NR], acc1[NR];
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    acc0[j] = _mm512_setzero_ps();
    acc1[j] = _mm512_setzero_ps();
  }
  for (int k = 0; k < k_size; ++k) {
    const float* a_col = a + static_cast<long>(k) * lda;
    const __m512 a0 = _mm512_maskz_loadu_ps(low, a_col);
    const __m512 a1 = _mm512_maskz_loadu_ps(high, a_col + 16);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m512 bj = _mm512_set1_ps(*b_element<kTransposedB>(b, ldb, k, j));
      acc0[j] = _mm512_fmadd_ps(a0, bj, acc0[j]);
      acc1[j] = _mm512_fmadd_ps(a1, bj, acc1[j]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    float* c_col = c + static_cast<long>(j) * ldc;
    if (accumulate) {
      acc0[j] = _mm512_add_ps(acc0[j], _mm512_maskz_loadu_ps(low, c_col));
      acc1[j] = _mm512_add_ps(acc1[j], _mm512_maskz_loadu_ps(high, c_col + 16));
    }
    _mm512_mask_storeu_ps(c_col, low, acc0[j]);
    _mm512_mask_storeu_ps(c_col + 16, high, acc1[j]);
  }
}

template <bool kTransposedB>
using BlockFn = void (*)(int, const float*, int, const float*, int, float*, int, __mmask16,
                         __mmask16, bool);

// The column tail (n % 8) runs a narrower instantiation of the same block.
template <bool kTransposedB>
BlockFn<kTransposedB> block_for_columns(int columns) {
  static constexpr BlockFn<kTransposedB> kBlocks[] = {nullptr,
                                                      block<1, kTransposedB>,
                                                      block<2, kTransposedB>,
                                                      block<3, kTransposedB>,
                                                      block<4, kTransposedB>,
                                                      block<5, kTransposedB>,
                                                      block<6, kTransposedB>,
                                                      block<7, kTransposedB>,
                                                      block<8, kTransposedB>};
  return kBlocks[columns];
}

template <bool kTransposedB>
void gemm(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
          bool accumulate) {
  // Row blocks outermost: the 32-row strip of A is reused by every column block while it is
  // still in cache; the B columns it meets are re-read from L1/L2.
  for (int i = 0; i < m; i += kMr) {
    const int rows = m - i < kMr ? m - i : kMr;
    // Masks for the last, partial row block: the first `rows` lanes of the two registers.
    const __mmask16 low = rows >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << rows) - 1);
    const __mmask16 high = rows >= 32   ? 0xFFFF
                           : rows <= 16 ? 0
                                        : static_cast<__mmask16>((1u << (rows - 16)) - 1);
    int j = 0;
    for (; j + kNr <= n; j += kNr) {
      block<kNr, kTransposedB>(k, a + i, lda, b_element<kTransposedB>(b, ldb, 0, j), ldb,
                               c + static_cast<long>(j) * ldc + i, ldc, low, high, accumulate);
    }
    if (j < n) {
      block_for_columns<kTransposedB>(n - j)(k, a + i, lda, b_element<kTransposedB>(b, ldb, 0, j),
                                             ldb, c + static_cast<long>(j) * ldc + i, ldc, low,
                                             high, accumulate);
    }
  }
}

}  // namespace

void gemm_avx512(bool transposed_b, int m, int n, int k, const float* a, int lda, const float* b,
                 int ldb, float* c, int ldc, bool accumulate) {
  if (transposed_b) {
    gemm<true>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
  } else {
    gemm<false>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
  }
}

double peak_gflops_avx512(double seconds, double (*now)()) {
  return fma_peak_gflops(seconds, now, 16, _mm512_set1_ps(0.9999f), _mm512_set1_ps(1e-4f),
                         [](__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); });
}

}  // namespace gradsync::kernels
