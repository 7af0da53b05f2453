// PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019; PyTorch's powerSGD_hook): one layer's
// weight gradient M (rows n x cols m, row-major) travels as two thin matrices, P (n x r) and
// Q (m x r), (n + m) * r floats instead of n * m. One power-iteration step per training step,
// warm-started from the previous step's Q, with error feedback: what the rank-r approximation
// missed is added to the next step's gradient, so nothing is lost, only delayed.
//
// The step is split into phases so the caller can all-reduce between them (this class never
// communicates; every rank runs the same phases on its own gradient):
//
//   PowerSgdCodec codec(n, m, /*rank=*/4, mix_seed(seed, layer));   // the same seed on all ranks
//   std::span<float> p = codec.compute_p(grad);   // grad += residual; P = grad Q
//   comm.allreduce(p, sum);                        // sum or average: only P's span matters
//   codec.orthonormalize_p();                       // P's columns orthonormal (Gram-Schmidt)
//   std::span<float> q = codec.compute_q(grad);   // Q = grad^T P
//   comm.allreduce(q, sum); divide q by N;         // Q must be the AVERAGE (as the hook does)
//   codec.decompress(grad);                         // residual = grad - P Q^T; grad = P Q^T
//
// After decompress, `grad` holds P P^T M_avg, the same bits on every rank (P and Q are), which is
// the average gradient exactly when P spans M_avg's columns: at rank >= min(n, m) the result
// equals the uncompressed average up to float rounding. Each rank's residual is its own M minus
// that approximation; the residuals of all ranks sum to what the approximation missed.
//
// Why P and Q live in the codec: Q must survive to the next step (warm start) and P is needed
// again by decompress; owning them means the caller cannot forget either. compute_p and compute_q
// return them as spans to all-reduce in place. The caller must use an all-reduce that gives every
// rank the same bits (ring, shared memory, gloo's ring and NCCL do), since each rank then
// orthonormalizes P on its own and must reach the same result.
//
// Q: drawn once from SplitMix64(seed) (standard normal), so every rank starts equal without
// talking. Before each compute_p the warm-start Q is orthonormalized (as powerSGD_hook does),
// and a column that came out zero (a layer whose gradient was zero) is redrawn from the same
// generator, identically on every rank, so a zero gradient cannot lock the rank down forever.
//
// Rank: min(rank, n, m), as the hook clamps it. Biases and other 1-D tensors are not for this
// codec: the caller all-reduces them uncompressed. The products are float (each sum in a fixed
// order, so the same bits on every rank for the same inputs); the orthonormalization is double.
//
// Phases must run in order (compute_p, orthonormalize_p, compute_q, decompress); out of order is
// a gradsync::Error (GRADSYNC_CHECK). Not thread-safe; one codec per matrix per rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/random.h"

namespace gradsync::compression {

class PowerSgdCodec {
 public:
  PowerSgdCodec(std::size_t rows, std::size_t cols, std::size_t rank, std::uint64_t seed);

  std::size_t rows() const { return rows_; }
  std::size_t cols() const { return cols_; }
  std::size_t rank() const { return rank_; }  // the clamped rank

  // Bytes one rank puts on the wire per step for this matrix: P and Q, 4 bytes a value.
  static std::uint64_t wire_bytes(std::size_t rows, std::size_t cols, std::size_t rank);
  std::uint64_t wire_bytes() const { return wire_bytes(rows_, cols_, rank_); }

  // Phase 1. m (rows * cols, this rank's gradient) += residual, in place; Q (warm start)
  // orthonormalized; P = m Q. Returns P (rows x rank, row-major) to all-reduce in place.
  std::span<float> compute_p(std::span<float> m);
  // Phase 2. Orthonormalizes the all-reduced P's columns (orthonormalize_columns).
  void orthonormalize_p();
  // Phase 3. Q = m^T P, m as compute_p left it. Returns Q (cols x rank, row-major) to all-reduce
  // in place; it must hold the average over ranks before decompress.
  std::span<float> compute_q(std::span<const float> m);
  // Phase 4. residual = m - P Q^T; m = P Q^T. Q stays as next step's warm start.
  void decompress(std::span<float> m);

  std::span<const float> p() const { return p_; }
  std::span<const float> q() const { return q_; }
  std::span<const float> residual() const { return residual_; }
  // Back to the start: zero residual, Q drawn again from the seed.
  void reset();

 private:
  enum class Phase { kComputeP, kOrthonormalizeP, kComputeQ, kDecompress };
  void expect(Phase phase, const char* name);
  void check_matrix(std::size_t size, const char* name) const;

  std::size_t rows_, cols_, rank_;
  std::uint64_t seed_;
  SplitMix64 rng_;
  std::vector<float> p_, q_, residual_;
  std::vector<double> scratch_;  // column-major work space for Gram-Schmidt
  std::vector<float> work_;      // the products' work space: Q's columns, an accumulator
  Phase next_ = Phase::kComputeP;
};

// Orthonormalizes the columns of `a` (rows x cols, row-major) in place: modified Gram-Schmidt in
// double. A column left with no more than 1e-6 of its norm after projection (dependent on the
// ones before it, or zero) is set to zero rather than scaled up from rounding noise; every column
// kept lost less than that to cancellation, so it comes out orthogonal to about 1e-10, far
// finer than the float it is stored in. A column with a NaN or inf stays non-finite. Returns how
// many columns are nonzero.
std::size_t orthonormalize_columns(std::span<float> a, std::size_t rows, std::size_t cols);

}  // namespace gradsync::compression
