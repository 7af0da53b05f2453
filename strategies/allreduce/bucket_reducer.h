// Gradient compression as DDP's communication hooks: how one bucket of the gradient buffer is
// reduced across ranks (comm.compression). The allreduce strategy hands each bucket, the moment
// backward has filled it, to its BucketReducer; the Work it returns leaves the bucket holding
// the average over ranks (exactly, or as the method approximates it) once waited for.
//
//   none      one all-reduce of the floats (kAvg)
//   fp16/bf16 divide by N, encode to 16 bits, all-reduce the 16-bit values, decode: half the
//             bytes (fp16_compress_hook, bf16_compress_hook; common/compression/half_codec.h)
//   powersgd  per weight matrix M (n x m) of the bucket: P = M Q, all-reduce P, orthonormalize,
//             Q = M^T P, all-reduce Q, M ~ P Q^T; the residual M - P Q^T fed back into the next
//             step, Q warm-started, the same seed for Q on every rank; the bucket's 1-D tensors
//             (biases) ride uncompressed in P's all-reduce (powerSGD_hook;
//             common/compression/power_sgd_codec.h). (n + m) r floats a matrix instead of n m
//   topk      the k = ratio * size largest magnitudes of the bucket (residual added first, the
//             rest kept as the next residual), gathered from every rank as (index, value) pairs
//             and summed in rank order: 8 k bytes a rank (Deep Gradient Compression;
//             common/compression/top_k_codec.h). With local_momentum (the allreduce strategy
//             sets it to SGD's), each rank first folds its gradient into a velocity of its own,
//             u = m u + g, and sparsifies u (DGC's momentum correction): error feedback on the
//             raw gradient under a global momentum loses what the residual held back; at ratio
//             1 it is momentum SGD exactly, only summed in another order
//
// Steps before `start_step` reduce uncompressed (PowerSGD's warm-up); error feedback starts with
// the first compressed step. Every method leaves every rank with the same bits: the sums come
// out of the communicator identical, and what each rank computes from them is deterministic.
// The bytes the communicator counts are the compressed ones.
//
// State (residuals, warm-start Q) is per bucket, keyed by the bucket's range: the strategy's
// buckets are the same every step. One reducer per strategy; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "allreduce/communicator.h"
#include "model/model.h"

namespace gradsync {

struct CompressionOptions {
  std::string method = "none";  // comm.compression
  int powersgd_rank = 1;
  double topk_ratio = 0.01;
  std::int64_t start_step = 0;       // comm.compression_start_step
  std::uint64_t seed = 0;            // PowerSGD's Q: the same on every rank
  std::vector<TensorShape> tensors;  // the model's (Model::tensors()): PowerSGD's matrices
  // topk: the optimizer's momentum, applied on each rank before selection (Deep Gradient
  // Compression's momentum correction: u = m u + g, then the top-k of u plus the residual);
  // the strategy's optimizer then steps without momentum. 0: plain error feedback.
  double local_momentum = 0;
};

class BucketReducer {
 public:
  virtual ~BucketReducer() = default;
  // Starts reducing `bucket`, the range [offset, offset + bucket.size()) of the gradient buffer,
  // in `step` (counted from 0, as the loop counts); `blocking`: the caller waits at once (the
  // step's last bucket), so the reduction may run on this thread. The Work's wait leaves the
  // bucket averaged over the ranks.
  virtual std::shared_ptr<Work> start(std::span<float> bucket, std::size_t offset,
                                      std::int64_t step, bool blocking) = 0;
};

}  // namespace gradsync
