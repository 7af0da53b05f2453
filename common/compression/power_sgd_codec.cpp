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
  // P[i][c] = sum_j m[i][j] Q[j][c], from the float Q every rank holds (row-major, rank_
  // values a row): one pass over each row of m, the rank_ sums side by side, so that the
  // additions of one column follow each other and the rank_ columns' go in parallel.
  double* sums = qc;  // rank_ values; the columns are no longer needed
  for (std::size_t i = 0; i < rows_; ++i) {
    const float* row = m.data() + i * cols_;
    std::fill(sums, sums + rank_, 0.0);
    for (std::size_t j = 0; j < cols_; ++j) {
      const double value = row[j];
      const float* q = q_.data() + j * rank_;
      for (std::size_t c = 0; c < rank_; ++c) sums[c] += value * q[c];
    }
    for (std::size_t c = 0; c < rank_; ++c) p_[i * rank_ + c] = static_cast<float>(sums[c]);
  }
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
  // Q[j][c] = sum_i m[i][j] P[i][c]: walk m row by row (as it lies), adding each row times
  // P[i][c] into column c of the double accumulator.
  double* acc = scratch_.data();
  std::fill(acc, acc + cols_ * rank_, 0.0);
  for (std::size_t i = 0; i < rows_; ++i) {
    const float* row = m.data() + i * cols_;
    for (std::size_t c = 0; c < rank_; ++c) {
      const double p = p_[i * rank_ + c];
      double* column = acc + c * cols_;
      for (std::size_t j = 0; j < cols_; ++j) column[j] += static_cast<double>(row[j]) * p;
    }
  }
  from_columns(acc, cols_, rank_, q_);
  return q_;
}

void PowerSgdCodec::decompress(std::span<float> m) {
  check_matrix(m.size(), "decompress");
  expect(Phase::kDecompress, "decompress");
  // Row i of P Q^T is sum_c P[i][c] * (column c of Q): accumulate it in double, then split m
  // into the approximation (what is applied) and the residual (what waits for the next step).
  std::vector<double>& row_sum = scratch_;  // max(rows, cols) * rank >= cols values
  for (std::size_t i = 0; i < rows_; ++i) {
    // Row i of P Q^T: for each j the rank_ products of P's row with Q's row j, contiguous.
    const float* p = p_.data() + i * rank_;
    for (std::size_t j = 0; j < cols_; ++j) {
      const float* q = q_.data() + j * rank_;
      double sum = 0.0;
      for (std::size_t c = 0; c < rank_; ++c) sum += static_cast<double>(p[c]) * q[c];
      row_sum[j] = sum;
    }
    float* row = m.data() + i * cols_;
    float* left = residual_.data() + i * cols_;
    for (std::size_t j = 0; j < cols_; ++j) {
      const float approx = static_cast<float>(row_sum[j]);
      left[j] = row[j] - approx;
      row[j] = approx;
    }
  }
}

}  // namespace gradsync::compression
