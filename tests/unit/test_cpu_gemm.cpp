#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <vector>

#include "common/random.h"
#include "model/cpu_gemm.h"

namespace {

std::vector<float> random_matrix(int rows, int cols, std::uint64_t seed) {
  gradsync::SplitMix64 rng(seed);
  std::vector<float> m(static_cast<std::size_t>(rows) * cols);
  for (float& x : m) x = static_cast<float>(rng.normal());
  return m;
}

// How far the float result C[i, j] is from sum_k A[i, k] * B(k, j) computed in double, in units
// of the classical bound for a float dot product of length K: K * eps * sum_k |A[i, k] B(k, j)|.
// Any summation order stays below 1; a wrong element, index or tail is far above.
double error_in_bounds(const std::vector<float>& a, int lda, const std::vector<float>& b, int ldb,
                       bool transposed_b, int i, int j, int k_size, float computed) {
  double sum = 0, magnitude = 0;
  for (int k = 0; k < k_size; ++k) {
    const float bkj = transposed_b ? b[std::size_t(k) * ldb + j] : b[std::size_t(j) * ldb + k];
    sum += double(a[std::size_t(k) * lda + i]) * bkj;
    magnitude += std::abs(double(a[std::size_t(k) * lda + i]) * bkj);
  }
  const double bound = k_size * double(FLT_EPSILON) * magnitude;
  return std::abs(computed - sum) / std::max(bound, 1e-30);
}

}  // namespace

TEST_CASE("cpu gemm: nn and nt products match a double-precision reference on every shape") {
  // Shapes cover full 32 x 8 blocks, row tails (masks), column tails (narrow blocks), and the
  // MLP's own layers.
  const int shapes[][3] = {{1, 1, 1},    {32, 8, 4},     {33, 9, 5},     {10, 64, 256},
                           {47, 13, 17}, {256, 64, 784}, {256, 784, 64}, {16, 3, 2}};
  for (const auto& shape : shapes) {
    const int m = shape[0], n = shape[1], k = shape[2];
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    // Leading dimensions larger than the matrices: the kernel must honour them.
    const int lda = m + 3, ldc = m + 1;
    const auto a = random_matrix(lda, k, 1);
    const auto b_nn = random_matrix(k + 2, n, 2);  // K x N with ldb = k + 2
    const auto b_nt = random_matrix(n + 5, k, 3);  // N x K with ldb = n + 5
    std::vector<float> c(static_cast<std::size_t>(ldc) * n, NAN);

    gradsync::gemm_nn(m, n, k, a.data(), lda, b_nn.data(), k + 2, c.data(), ldc);
    double worst = 0;
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        worst = std::max(worst, error_in_bounds(a, lda, b_nn, k + 2, false, i, j, k,
                                                c[std::size_t(j) * ldc + i]));
      }
      // Rows past m (the padding of ldc) must be left alone.
      CHECK(std::isnan(c[std::size_t(j) * ldc + m]));
    }
    CHECK(worst < 1.0);

    std::fill(c.begin(), c.end(), NAN);
    gradsync::gemm_nt(m, n, k, a.data(), lda, b_nt.data(), n + 5, c.data(), ldc);
    worst = 0;
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        worst = std::max(worst, error_in_bounds(a, lda, b_nt, n + 5, true, i, j, k,
                                                c[std::size_t(j) * ldc + i]));
      }
      CHECK(std::isnan(c[std::size_t(j) * ldc + m]));
    }
    CHECK(worst < 1.0);
  }
}

TEST_CASE("cpu gemm: transpose of non-square, non-tile-multiple matrices") {
  for (const auto& [rows, cols] : {std::pair{1, 1}, {17, 5}, {256, 784}, {10, 33}}) {
    const auto in = random_matrix(rows, cols, 4);
    std::vector<float> out(in.size());
    gradsync::transpose(rows, cols, in.data(), out.data());
    bool equal = true;
    for (int i = 0; i < rows; ++i) {
      for (int j = 0; j < cols; ++j) {
        equal &= out[std::size_t(i) * cols + j] == in[std::size_t(j) * rows + i];
      }
    }
    CHECK(equal);
  }
}
