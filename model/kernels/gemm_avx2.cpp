// The AVX2 + FMA twin of gemm_avx512.cpp: the same register blocking, at half the width. A 16 x 6
// block of C lives in 12 ymm accumulators for the whole K loop (two 8-float registers per
// column), with the two A registers and one broadcast of B: 15 of the 16 ymm registers. A is
// read straight from its columns, B broadcast one element at a time; the last, partial row
// block goes through masked loads and stores. Compiled with -mavx2 -mfma only (and never
// AVX-512, so that a forced AVX2 path measures AVX2); called only where the CPU has both.
#include <immintrin.h>

#include "model/kernels/gemm_kernels.h"

namespace gradsync::kernels {
namespace {

constexpr int kMr = 16;  // rows of C per block: two ymm registers
constexpr int kNr = 6;   // columns of C per block: 2 x 6 = 12 accumulators

template <bool kTransposedB>
inline const float* b_element(const float* b, int ldb, int k, int j) {
  return kTransposedB ? b + static_cast<long>(k) * ldb + j : b + static_cast<long>(j) * ldb + k;
}

// Lane i of the mask is on for i < rows (0..8): what maskload / maskstore take.
inline __m256i lanes_below(int rows) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(rows), index);
}

// Masked loads are slow on some CPUs (microcoded on AMD's): full blocks (all 16 rows) load and
// store plainly, only the last, partial row block goes through the masks.
template <bool kFull>
inline __m256 load(const float* p, __m256i mask) {
  return kFull ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask);
}
template <bool kFull>
inline void store(float* p, __m256i mask, __m256 v) {
  if (kFull) {
    _mm256_storeu_ps(p, v);
  } else {
    _mm256_maskstore_ps(p, mask, v);
  }
}

template <int NR, bool kTransposedB, bool kFull>
void block(int k_size, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
           __m256i low, __m256i high, bool accumulate) {
  __m256 acc0[NR], acc1[NR];
#pragma GCC unroll 6
  for (int j = 0; j < NR; ++j) {
    acc0[j] = _mm256_setzero_ps();
    acc1[j] = _mm256_setzero_ps();
  }
  for (int k = 0; k < k_size; ++k) {
    const float* a_col = a + static_cast<long>(k) * lda;
    const __m256 a0 = load<kFull>(a_col, low);
    const __m256 a1 = load<kFull>(a_col + 8, high);
#pragma GCC unroll 6
    for (int j = 0; j < NR; ++j) {
      const __m256 bj = _mm256_broadcast_ss(b_element<kTransposedB>(b, ldb, k, j));
      acc0[j] = _mm256_fmadd_ps(a0, bj, acc0[j]);
      acc1[j] = _mm256_fmadd_ps(a1, bj, acc1[j]);
    }
  }
#pragma GCC unroll 6
  for (int j = 0; j < NR; ++j) {
    float* c_col = c + static_cast<long>(j) * ldc;
    if (accumulate) {
      acc0[j] = _mm256_add_ps(acc0[j], load<kFull>(c_col, low));
      acc1[j] = _mm256_add_ps(acc1[j], load<kFull>(c_col + 8, high));
    }
    store<kFull>(c_col, low, acc0[j]);
    store<kFull>(c_col + 8, high, acc1[j]);
  }
}

template <bool kTransposedB>
using BlockFn = void (*)(int, const float*, int, const float*, int, float*, int, __m256i, __m256i,
                         bool);

template <bool kTransposedB, bool kFull>
BlockFn<kTransposedB> block_for_columns(int columns) {
  static constexpr BlockFn<kTransposedB> kBlocks[] = {nullptr,
                                                      block<1, kTransposedB, kFull>,
                                                      block<2, kTransposedB, kFull>,
                                                      block<3, kTransposedB, kFull>,
                                                      block<4, kTransposedB, kFull>,
                                                      block<5, kTransposedB, kFull>,
                                                      block<6, kTransposedB, kFull>};
  return kBlocks[columns];
}

template <bool kTransposedB>
void gemm(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
          bool accumulate) {
  for (int i = 0; i < m; i += kMr) {
    const int rows = m - i < kMr ? m - i : kMr;
    const __m256i low = lanes_below(rows < 8 ? rows : 8);
    const __m256i high = lanes_below(rows > 8 ? rows - 8 : 0);
    const bool full = rows == kMr;
    int j = 0;
    for (; j + kNr <= n; j += kNr) {
      (full ? block<kNr, kTransposedB, true>
            : block<kNr, kTransposedB, false>)(k, a + i, lda, b_element<kTransposedB>(b, ldb, 0, j),
                                               ldb, c + static_cast<long>(j) * ldc + i, ldc, low,
                                               high, accumulate);
    }
    if (j < n) {
      (full ? block_for_columns<kTransposedB, true>(n - j)
            : block_for_columns<kTransposedB, false>(n - j))(
          k, a + i, lda, b_element<kTransposedB>(b, ldb, 0, j), ldb,
          c + static_cast<long>(j) * ldc + i, ldc, low, high, accumulate);
    }
  }
}

}  // namespace

void gemm_avx2(bool transposed_b, int m, int n, int k, const float* a, int lda, const float* b,
               int ldb, float* c, int ldc, bool accumulate) {
  if (transposed_b) {
    gemm<true>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
  } else {
    gemm<false>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
  }
}

}  // namespace gradsync::kernels
