#include <doctest/doctest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "common/random.h"
#include "model/kernels/cpu_kernels.h"
#include "tests/support/cpu_paths.h"

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

namespace {

void check_products() {
  // Shapes cover full blocks of both kernels (32 x 8, 16 x 6), row tails (masks), column tails
  // (narrow blocks), odd sizes (1, 7, 33, 257 rows and columns), and the MLP's own layers.
  const int shapes[][3] = {{1, 1, 1},    {32, 8, 4},     {33, 9, 5},     {10, 64, 256},
                           {47, 13, 17}, {256, 64, 784}, {256, 784, 64}, {16, 3, 2},
                           {7, 7, 7},    {33, 33, 33},   {257, 257, 31}, {1, 257, 7},
                           {257, 1, 33}, {16, 6, 9},     {9, 12, 1},     {24, 5, 3}};
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

}  // namespace

TEST_CASE("cpu gemm: nn and nt products match a double-precision reference, on every path") {
  gradsync::testing::on_every_gemm(check_products);
}

TEST_CASE("cpu gemm: accumulate adds to C on every path") {
  gradsync::testing::on_every_gemm([] {
    const int m = 33, n = 7, k = 5;
    const auto a = random_matrix(m, k, 4);
    const auto b = random_matrix(k, n, 5);
    std::vector<float> once(std::size_t(m) * n), twice(std::size_t(m) * n);
    gradsync::gemm_nn(m, n, k, a.data(), m, b.data(), k, once.data(), m);
    gradsync::gemm_nn(m, n, k, a.data(), m, b.data(), k, twice.data(), m);
    gradsync::gemm_nn(m, n, k, a.data(), m, b.data(), k, twice.data(), m, /*accumulate=*/true);
    for (std::size_t i = 0; i < once.size(); ++i) CHECK(twice[i] == doctest::Approx(2 * once[i]));
  });
}

TEST_CASE("cpu kernels: GRADSYNC_KERNELS names a path, or is one line naming the variable") {
  using gradsync::CpuPath;
  CHECK(gradsync::cpu_path_for("portable") == CpuPath::kPortable);
  const CpuPath best = gradsync::cpu_path_for(nullptr);
  CHECK(gradsync::cpu_runs(best));
  CHECK(gradsync::cpu_path_for("") == best);
  if (gradsync::cpu_runs(CpuPath::kAvx512)) CHECK(best == CpuPath::kAvx512);
  CHECK_THROWS_WITH_AS(gradsync::cpu_path_for("sse"),
                       "environment: GRADSYNC_KERNELS: 'sse' is not a kernel path (avx512, avx2 or "
                       "portable)",
                       gradsync::ConfigError);
  for (const auto path : {CpuPath::kAvx512, CpuPath::kAvx2}) {
    if (gradsync::cpu_runs(path)) {
      CHECK(gradsync::cpu_path_for(gradsync::cpu_path_name(path)) == path);
    } else {
      CHECK_THROWS_AS(gradsync::cpu_path_for(gradsync::cpu_path_name(path)), gradsync::ConfigError);
    }
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

TEST_CASE("cpu kernels: GRADSYNC_GEMM is library or own, or one line naming the variable") {
  using gradsync::GemmSource;
  CHECK(gradsync::gemm_source_for(nullptr) == GemmSource::kLibrary);
  CHECK(gradsync::gemm_source_for("") == GemmSource::kLibrary);
  CHECK(gradsync::gemm_source_for("library") == GemmSource::kLibrary);
  CHECK(gradsync::gemm_source_for("own") == GemmSource::kOwn);
  CHECK_THROWS_WITH_AS(gradsync::gemm_source_for("mkl"),
                       "environment: GRADSYNC_GEMM: 'mkl' is not a source of products (library "
                       "or own)",
                       gradsync::ConfigError);
}

TEST_CASE("cpu kernels: a path's own products are its own, whatever is installed") {
  gradsync::testing::on_every_cpu_path([] {
    const gradsync::CpuPath path = gradsync::cpu_path();
    gradsync::set_cpu_path(path, gradsync::GemmSource::kOwn);
    CHECK(gradsync::gemm_name() == (path == gradsync::CpuPath::kPortable ? "eigen" : "own"));
    gradsync::set_cpu_path(path);
  });
}

TEST_CASE("cpu gemm: tn (the input gradient) matches a double-precision reference, on every path") {
  gradsync::testing::on_every_gemm([] {
    const int shapes[][3] = {{1, 1, 1},     {7, 7, 7},     {33, 9, 5},
                             {256, 64, 10}, {257, 33, 31}, {256, 64, 256}};
    for (const auto& shape : shapes) {
      const int m = shape[0], n = shape[1], k = shape[2];
      for (const int pad : {0, 3}) {  // A dense (lda = k), or with a leading dimension past it
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(pad);
        const int lda = k + pad, ldc = m + 1;
        const auto a = random_matrix(lda, m, 6);  // K x M: A^T is the M x K operand
        const auto b = random_matrix(k, n, 7);
        std::vector<float> c(std::size_t(ldc) * n, NAN), scratch(std::size_t(m) * k);
        gradsync::gemm_tn(m, n, k, a.data(), lda, b.data(), k, c.data(), ldc, scratch.data());
        // The reference reads A^T(i, kk) = a[i * lda + kk] as a transposed-B element would.
        double worst = 0;
        for (int j = 0; j < n; ++j) {
          for (int i = 0; i < m; ++i) {
            double sum = 0, magnitude = 0;
            for (int kk = 0; kk < k; ++kk) {
              const double term = double(a[std::size_t(i) * lda + kk]) * b[std::size_t(j) * k + kk];
              sum += term;
              magnitude += std::abs(term);
            }
            const double bound = k * double(FLT_EPSILON) * magnitude;
            worst = std::max(worst,
                             std::abs(c[std::size_t(j) * ldc + i] - sum) / std::max(bound, 1e-30));
          }
          CHECK(std::isnan(c[std::size_t(j) * ldc + m]));
        }
        CHECK(worst < 1.0);
      }
    }
  });
}

TEST_CASE("cpu gemm: nt and tn accumulate too, on every path and source") {
  gradsync::testing::on_every_gemm([] {
    const int m = 33, n = 7, k = 5;
    const auto a = random_matrix(k, m, 8);  // k * m floats: M x K for nt, K x M for tn
    const auto b = random_matrix(n, k, 9);
    const auto bk = random_matrix(k, n, 10);
    std::vector<float> scratch(std::size_t(m) * k);
    std::vector<float> once(std::size_t(m) * n), twice(std::size_t(m) * n);
    // nt: A is M x K (lda m), B is N x K (ldb n).
    gradsync::gemm_nt(m, n, k, a.data(), m, b.data(), n, once.data(), m);
    gradsync::gemm_nt(m, n, k, a.data(), m, b.data(), n, twice.data(), m);
    gradsync::gemm_nt(m, n, k, a.data(), m, b.data(), n, twice.data(), m, /*accumulate=*/true);
    for (std::size_t i = 0; i < once.size(); ++i) CHECK(twice[i] == doctest::Approx(2 * once[i]));
    // tn: A is K x M (lda k), B is K x N (ldb k).
    gradsync::gemm_tn(m, n, k, a.data(), k, bk.data(), k, once.data(), m, scratch.data());
    gradsync::gemm_tn(m, n, k, a.data(), k, bk.data(), k, twice.data(), m, scratch.data());
    gradsync::gemm_tn(m, n, k, a.data(), k, bk.data(), k, twice.data(), m, scratch.data(),
                      /*accumulate=*/true);
    for (std::size_t i = 0; i < once.size(); ++i) CHECK(twice[i] == doctest::Approx(2 * once[i]));
  });
}

TEST_CASE("cpu gemm: empty products: K = 0 gives zeros (or leaves C when accumulating)") {
  gradsync::testing::on_every_gemm([] {
    const int m = 5, n = 3;
    const std::vector<float> none(1, NAN);  // never read
    std::vector<float> scratch(1);
    for (const bool accumulate : {false, true}) {
      CAPTURE(accumulate);
      std::vector<float> c(std::size_t(m) * n, 7.f);
      gradsync::gemm_nn(m, n, 0, none.data(), m, none.data(), 1, c.data(), m, accumulate);
      for (float x : c) CHECK(x == (accumulate ? 7.f : 0.f));
      std::fill(c.begin(), c.end(), 7.f);
      gradsync::gemm_nt(m, n, 0, none.data(), m, none.data(), n, c.data(), m, accumulate);
      for (float x : c) CHECK(x == (accumulate ? 7.f : 0.f));
      std::fill(c.begin(), c.end(), 7.f);
      gradsync::gemm_tn(m, n, 0, none.data(), 1, none.data(), 1, c.data(), m, scratch.data(),
                        accumulate);
      for (float x : c) CHECK(x == (accumulate ? 7.f : 0.f));
    }
    // M or N = 0: nothing to write.
    std::vector<float> c(4, 7.f);
    gradsync::gemm_nn(0, 2, 3, none.data(), 1, none.data(), 3, c.data(), 1);
    gradsync::gemm_nt(2, 0, 3, none.data(), 2, none.data(), 1, c.data(), 2);
    for (float x : c) CHECK(x == 7.f);
  });
}
