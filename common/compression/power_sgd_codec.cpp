#include "common/compression/power_sgd_codec.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"

namespace gradsync::compression {
namespace {

// A column keeping no more than this fraction of its norm through the projections lay in the
// span of the columns before it: what is left is rounding noise, not a direction.
constexpr double kDependent = 1e-6;
// Redraws of a zero Q column before giving up on it (a random vector is dependent on fewer than
// `rows` others with probability zero, so one redraw is all it ever takes in practice).
constexpr int kMaxRedraws = 4;

double dot(const double* a, const double* b, std::size_t n) {
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Gram-Schmidt over the columns of `work` (column-major, rows x cols). A column that comes out
// zero is redrawn from `redraw` where given, else zeroed. Returns the nonzero columns.
std::size_t orthonormalize(double* work, std::size_t rows, std::size_t cols, SplitMix64* redraw) {
  std::size_t kept = 0;
  for (std::size_t c = 0; c < cols; ++c) {
    double* v = work + c * rows;
    for (int attempt = 0;; ++attempt) {
      const double before = std::sqrt(dot(v, v, rows));
      if (!std::isfinite(before)) {
        // NaN or inf in the gradient: let it show downstream instead of hiding it as zero.
        for (std::size_t i = 0; i < rows; ++i) v[i] /= before;
        break;
      }
      double after = 0.0;
      if (before > 0.0) {
        // Modified Gram-Schmidt: each projection taken from v as it is now, not as it was.
        for (std::size_t k = 0; k < c; ++k) {
          const double* u = work + k * rows;  // unit or zero: a zero column takes nothing
          const double along = dot(u, v, rows);
          for (std::size_t i = 0; i < rows; ++i) v[i] -= along * u[i];
        }
        after = std::sqrt(dot(v, v, rows));
      }
      if (before > 0.0 && after > kDependent * before) {
        for (std::size_t i = 0; i < rows; ++i) v[i] /= after;
        ++kept;
        break;
      }
      if (redraw == nullptr || attempt == kMaxRedraws) {
        std::fill(v, v + rows, 0.0);
        break;
      }
      for (std::size_t i = 0; i < rows; ++i) v[i] = redraw->normal();
    }
  }
  return kept;
}

// The products run in float with kLanes independent partial sums per dot product: a compiler
// keeps them in vector registers without reassociating anything (each lane's order is fixed)
// and they are added in a fixed order at the end, so a product is the same bits on every run.
// (In double, one scalar chain per sum, the products took three times a quickstart MLP step.)
constexpr std::size_t kLanes = 16;

// The two products whose results are all-reduced, compiled for the widest vectors this CPU has
// (a rank's own sums: ranks on different CPUs may differ in their last bits here and still
// agree after the all-reduce). decompress, whose result every rank applies, stays portable.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GRADSYNC_WIDEST_VECTORS __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GRADSYNC_WIDEST_VECTORS
#endif

// p (rows x rank, row-major) = m (rows x cols, row-major) times qt^T, qt (rank x cols): each a
// dot product of a row of m with a row of qt, in kLanes partial sums.
GRADSYNC_WIDEST_VECTORS
void product_p(const float* m, std::size_t rows, std::size_t cols, const float* qt,
               std::size_t rank, float* p) {
  for (std::size_t i = 0; i < rows; ++i) {
    const float* row = m + i * cols;
    for (std::size_t c = 0; c < rank; ++c) {
      const float* b = qt + c * cols;
      float acc[kLanes] = {};
      std::size_t j = 0;
      for (; j + kLanes <= cols; j += kLanes) {
        for (std::size_t l = 0; l < kLanes; ++l) acc[l] += row[j + l] * b[j + l];
      }
      float tail = 0.0f;
      for (; j < cols; ++j) tail += row[j] * b[j];
      for (std::size_t width = kLanes / 2; width > 0; width /= 2) {
        for (std::size_t l = 0; l < width; ++l) acc[l] += acc[l + width];
      }
      p[i * rank + c] = acc[0] + tail;
    }
  }
}

// acc (rank x cols, row-major) = p^T m: each row of m times p[i][c] added into row c of acc
// (elementwise over the columns).
GRADSYNC_WIDEST_VECTORS
void product_q(const float* m, std::size_t rows, std::size_t cols, const float* p,
               std::size_t rank, float* acc) {
  std::fill(acc, acc + cols * rank, 0.0f);
  for (std::size_t i = 0; i < rows; ++i) {
    const float* row = m + i * cols;
    for (std::size_t c = 0; c < rank; ++c) {
      const float pc = p[i * rank + c];
      float* __restrict column = acc + c * cols;
      for (std::size_t j = 0; j < cols; ++j) column[j] += row[j] * pc;
    }
  }
}

// out (cols x rows, row-major) = a (rows x cols, row-major) transposed.
void transpose(const float* a, std::size_t rows, std::size_t cols, float* out) {
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t c = 0; c < cols; ++c) out[c * rows + i] = a[i * cols + c];
}

// Row-major float matrix <-> column-major double work space.
void to_columns(std::span<const float> a, std::size_t rows, std::size_t cols, double* work) {
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t c = 0; c < cols; ++c) work[c * rows + i] = a[i * cols + c];
}
void from_columns(const double* work, std::size_t rows, std::size_t cols, std::span<float> a) {
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t c = 0; c < cols; ++c) a[i * cols + c] = static_cast<float>(work[c * rows + i]);
}

}  // namespace

std::size_t orthonormalize_columns(std::span<float> a, std::size_t rows, std::size_t cols) {
  GRADSYNC_CHECK(a.size() == rows * cols, "orthonormalize_columns: " + std::to_string(a.size()) +
                                              " values for " + std::to_string(rows) + " x " +
                                              std::to_string(cols));
  std::vector<double> work(rows * cols);
  to_columns(a, rows, cols, work.data());
  const std::size_t kept = orthonormalize(work.data(), rows, cols, nullptr);
  from_columns(work.data(), rows, cols, a);
  return kept;
}

PowerSgdCodec::PowerSgdCodec(std::size_t rows, std::size_t cols, std::size_t rank,
                             std::uint64_t seed)
    : rows_(rows), cols_(cols), rank_(std::min({rank, rows, cols})), seed_(seed), rng_(seed) {
  GRADSYNC_CHECK(rows > 0 && cols > 0 && rank > 0,
                 "PowerSGD needs a matrix and a rank, given " + std::to_string(rows) + " x " +
                     std::to_string(cols) + " at rank " + std::to_string(rank));
  p_.resize(rows_ * rank_);
  q_.resize(cols_ * rank_);
  residual_.resize(rows_ * cols_);
  scratch_.resize(std::max(rows_, cols_) * rank_);
  work_.resize(cols_ * (rank_ + 1));
  reset();
}

std::uint64_t PowerSgdCodec::wire_bytes(std::size_t rows, std::size_t cols, std::size_t rank) {
  const std::uint64_t r = std::min({rank, rows, cols});
  return (static_cast<std::uint64_t>(rows) + cols) * r * sizeof(float);
}

void PowerSgdCodec::reset() {
  rng_ = SplitMix64(seed_);
  for (float& value : q_) value = static_cast<float>(rng_.normal());
  std::fill(residual_.begin(), residual_.end(), 0.0f);
  std::fill(p_.begin(), p_.end(), 0.0f);
  next_ = Phase::kComputeP;
}

void PowerSgdCodec::expect(Phase phase, const char* name) {
  GRADSYNC_CHECK(next_ == phase, std::string("PowerSGD: ") + name +
                                     " out of order (compute_p, orthonormalize_p, compute_q, "
                                     "decompress)");
  next_ = phase == Phase::kDecompress ? Phase::kComputeP : static_cast<Phase>(int(phase) + 1);
}

void PowerSgdCodec::check_matrix(std::size_t size, const char* name) const {
  GRADSYNC_CHECK(size == rows_ * cols_,
                 std::string("PowerSGD ") + name + ": " + std::to_string(size) + " values for a " +
                     std::to_string(rows_) + " x " + std::to_string(cols_) + " matrix");
}

std::span<float> PowerSgdCodec::compute_p(std::span<float> m) {
  check_matrix(m.size(), "compute_p");
  expect(Phase::kComputeP, "compute_p");
  for (std::size_t i = 0; i < m.size(); ++i) m[i] += residual_[i];  // error feedback
  // Warm start: last step's (averaged) Q, orthonormalized (in columns, in scratch_), zero
  // columns redrawn.
  double* qc = scratch_.data();
  to_columns(q_, cols_, rank_, qc);
  orthonormalize(qc, cols_, rank_, &rng_);
  from_columns(qc, cols_, rank_, q_);
  // P[i][c] = sum_j m[i][j] Q[j][c], from the float Q every rank holds: a dot product of row i
  // with column c of Q (laid out contiguously in qt).
  float* qt = work_.data();
  transpose(q_.data(), cols_, rank_, qt);
  product_p(m.data(), rows_, cols_, qt, rank_, p_.data());
  return p_;
}

void PowerSgdCodec::orthonormalize_p() {
  expect(Phase::kOrthonormalizeP, "orthonormalize_p");
  double* work = scratch_.data();
  to_columns(p_, rows_, rank_, work);
  orthonormalize(work, rows_, rank_, nullptr);
  from_columns(work, rows_, rank_, p_);
}

std::span<float> PowerSgdCodec::compute_q(std::span<const float> m) {
  check_matrix(m.size(), "compute_q");
  expect(Phase::kComputeQ, "compute_q");
  // Q[j][c] = sum_i m[i][j] P[i][c]: m walked row by row, as it lies (product_q).
  float* acc = work_.data();
  product_q(m.data(), rows_, cols_, p_.data(), rank_, acc);
  transpose(acc, rank_, cols_, q_.data());
  return q_;
}

void PowerSgdCodec::decompress(std::span<float> m) {
  check_matrix(m.size(), "decompress");
  expect(Phase::kDecompress, "decompress");
  // Row i of P Q^T is sum_c P[i][c] * (column c of Q), the columns of Q contiguous in qt; then
  // m splits into the approximation (what is applied) and the residual (what waits for the next
  // step). Elementwise over j, in the same order on every rank: P and Q are the same bits
  // everywhere, and so is the approximation.
  float* qt = work_.data();
  float* approx = qt + cols_ * rank_;
  transpose(q_.data(), cols_, rank_, qt);
  for (std::size_t i = 0; i < rows_; ++i) {
    const float* p = p_.data() + i * rank_;
    for (std::size_t j = 0; j < cols_; ++j) approx[j] = p[0] * qt[j];
    for (std::size_t c = 1; c < rank_; ++c) {
      const float* __restrict column = qt + c * cols_;
      const float pc = p[c];
      for (std::size_t j = 0; j < cols_; ++j) approx[j] += pc * column[j];
    }
    float* row = m.data() + i * cols_;
    float* left = residual_.data() + i * cols_;
    for (std::size_t j = 0; j < cols_; ++j) {
      left[j] = row[j] - approx[j];
      row[j] = approx[j];
    }
  }
}

}  // namespace gradsync::compression
