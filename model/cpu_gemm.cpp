#include "model/cpu_gemm.h"

#include <Eigen/Core>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace gradsync {
namespace {

#if defined(__AVX512F__)

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

#endif  // __AVX512F__

using ConstMap = Eigen::Map<const Eigen::MatrixXf, 0, Eigen::OuterStride<>>;
using Map = Eigen::Map<Eigen::MatrixXf, 0, Eigen::OuterStride<>>;

}  // namespace

void gemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate) {
#if defined(__AVX512F__)
  gemm<false>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
#else
  Map out(c, m, n, Eigen::OuterStride<>(ldc));
  const auto product =
      ConstMap(a, m, k, Eigen::OuterStride<>(lda)) * ConstMap(b, k, n, Eigen::OuterStride<>(ldb));
  if (accumulate) {
    out.noalias() += product;
  } else {
    out.noalias() = product;
  }
#endif
}

void gemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate) {
#if defined(__AVX512F__)
  gemm<true>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
#else
  Map out(c, m, n, Eigen::OuterStride<>(ldc));
  const auto product = ConstMap(a, m, k, Eigen::OuterStride<>(lda)) *
                       ConstMap(b, n, k, Eigen::OuterStride<>(ldb)).transpose();
  if (accumulate) {
    out.noalias() += product;
  } else {
    out.noalias() = product;
  }
#endif
}

void transpose(int rows, int cols, const float* in, float* out) {
  constexpr int kTile = 16;
  for (int j0 = 0; j0 < cols; j0 += kTile) {
    const int j1 = j0 + kTile < cols ? j0 + kTile : cols;
    for (int i0 = 0; i0 < rows; i0 += kTile) {
      const int i1 = i0 + kTile < rows ? i0 + kTile : rows;
      for (int i = i0; i < i1; ++i) {
        for (int j = j0; j < j1; ++j) {
          out[static_cast<long>(i) * cols + j] = in[static_cast<long>(j) * rows + i];
        }
      }
    }
  }
}

bool gemm_uses_avx512() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

}  // namespace gradsync
