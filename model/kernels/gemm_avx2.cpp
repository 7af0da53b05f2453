// The AVX2 + FMA twin of gemm_avx512.cpp: the same register blocking, at half the width. A 16 x 6
// block of C lives in 12 ymm accumulators for the whole K loop (two 8-float registers per
// column), with the two A registers and one broadcast of B: 15 of the 16 ymm registers. A is
// read straight from its columns, B broadcast one element at a time; the last, partial row
// block goes through masked loads and stores. Compiled with -mavx2 -mfma only (and never
// AVX-512, so that a forced AVX2 path measures AVX2); called only where the CPU has both.
#include <immintrin.h>

#include "model/kernels/fma_peak.h"
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

// out[cols x rows] = in[rows x cols]^T in 8 x 8 tiles: eight columns of `in` loaded as they lie,
// transposed in registers (unpack, shuffle, lane swap), stored as eight columns of `out`; the
// edges element by element. Also the avx512 path's: a CPU with AVX-512 has AVX2.
void transpose_avx2(int rows, int cols, const float* in, float* out) {
  const auto at = [](auto* base, int column, int height, int row) {
    return base + static_cast<long>(column) * height + row;
  };
  int c0 = 0;
  for (; c0 + 8 <= cols; c0 += 8) {
    int r0 = 0;
    for (; r0 + 8 <= rows; r0 += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(at(in, c0 + k, rows, r0));
      const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
      const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
      const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
      const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
      const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
      const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
      const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
      const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
      const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
      const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
      const __m256 o[8] = {
          _mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
          _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
          _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
          _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) _mm256_storeu_ps(at(out, r0 + k, cols, c0), o[k]);
    }
    for (int row = r0; row < rows; ++row) {
      for (int k = 0; k < 8; ++k) *at(out, row, cols, c0 + k) = *at(in, c0 + k, rows, row);
    }
  }
  for (int column = c0; column < cols; ++column) {
    for (int row = 0; row < rows; ++row) *at(out, row, cols, column) = *at(in, column, rows, row);
  }
}

double peak_gflops_avx2(double seconds, double (*now)()) {
  return fma_peak_gflops(seconds, now, 8, _mm256_set1_ps(0.9999f), _mm256_set1_ps(1e-4f),
                         [](__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); });
}

}  // namespace gradsync::kernels
