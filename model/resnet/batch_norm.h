// Batch normalisation of NHWC activations (one column of C channels per pixel), as PyTorch's
// BatchNorm2d: statistics per channel over (N, H, W), eps 1e-5, momentum 0.1.
//
//   double sums[2 * C] = {};  conv_forward(..., sums);        // the statistics, while z is hot
//   bn.train_statistics(sums, count, params, buffers, reducer);
//   bn_apply(C, pixels, z, bn, /*relu=*/true, out);
//   ...
//   double dsums[2 * C] = {};  add_backward_sums(C, pixels, g, mask, z, bn.mean(), dsums);
//   bn.backward_factors(dsums, params, grads, accumulate, reducer);
//   bn_backward_apply(C, pixels, g, mask, z, bn, g_z);
//
// Train mode normalises with the batch's mean and biased variance and moves the running
// statistics towards them: running = 0.9 running + 0.1 batch, the running variance taking the
// unbiased variance (times M / (M - 1), M values per channel), as PyTorch. Eval mode
// normalises with the running statistics and changes nothing.
//
// Parameters (gamma then beta, C each) are a range of the model's params(); the running mean and
// running variance (C each) a range of its buffers(), which are not parameters: no gradient,
// and strategies broadcast them (DDP's broadcast_buffers) rather than average them.
//
// SyncBatchNorm: when a reducer is given, train_statistics hands it this layer's
// [sum (C), sum of squares (C), count (1)] over the local batch, as floats, and normalises with
// what it leaves there; backward_factors hands it [sum of dy (C), sum of dy * xhat (C), count]
// likewise (the statistics the input gradient needs, as SyncBatchNorm all-reduces them). A
// strategy reduces both by summing across ranks, in the order the model calls (forward: BN
// layers in forward order; backward: in backward order); every rank must call for every layer.
// gamma's and beta's gradients stay the local batch's: the gradient synchronisation averages
// them as any other. count is the values per channel (N H W), exact in a float up to 2^24. The
// local path rounds its sums to floats as well, so a reducer that returns them unchanged (one
// rank), or doubled (two identical ranks), gives bit-identical outputs and gradients to no
// reducer at all; the running variance then takes the summed count's M / (M - 1), as
// SyncBatchNorm's does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace gradsync::resnet {

using BatchStatsReducer = std::function<void(std::span<float> sums)>;

class BatchNorm {
 public:
  static constexpr double kEps = 1e-5;
  static constexpr double kMomentum = 0.1;

  // gamma at params[param_offset], beta after it; running mean at buffers[buffer_offset],
  // running variance after it.
  BatchNorm(int channels, std::size_t param_offset, std::size_t buffer_offset);

  int channels() const { return channels_; }
  std::size_t param_offset() const { return param_offset_; }
  std::size_t param_end() const { return param_offset_ + 2 * static_cast<std::size_t>(channels_); }
  std::size_t buffer_offset() const { return buffer_offset_; }
  std::size_t buffer_end() const {
    return buffer_offset_ + 2 * static_cast<std::size_t>(channels_);
  }

  // gamma 1, beta 0; running mean 0, running variance 1 (PyTorch's initial state).
  void init(std::span<float> params, std::span<float> buffers) const;

  // Train mode, from sums[c] = sum of the channel's `count` values, sums[C + c] = sum of their
  // squares: mean and 1/sqrt(var + eps) for normalising, running statistics updated.
  void train_statistics(const double* sums, std::int64_t count, std::span<const float> params,
                        std::span<float> buffers, const BatchStatsReducer& reducer);
  // Eval mode: the running statistics; buffers unchanged.
  void eval_statistics(std::span<const float> params, std::span<const float> buffers);

  // From dsums[c] = sum of dy, dsums[C + c] = sum of dy * (z - mean) over the local batch
  // (add_backward_sums): gamma's and beta's gradients written (added when `accumulate`), and
  // the factors of dz = a * dy + b * (z - mean) + c.
  void backward_factors(const double* dsums, std::span<const float> params, std::span<float> grads,
                        bool accumulate, const BatchStatsReducer& reducer);

  // Per channel: y = (z - mean) * scale + shift; dz = a * dy + b * (z - mean) + c.
  const float* mean() const { return mean_.data(); }
  const float* scale() const { return scale_.data(); }
  const float* shift() const { return shift_.data(); }
  const float* a() const { return a_.data(); }
  const float* b() const { return b_.data(); }
  const float* c() const { return c_.data(); }

 private:
  int channels_;
  std::size_t param_offset_, buffer_offset_;
  float local_count_ = 0;        // values per channel of the last train-mode batch, this rank's
  double count_ = 0;             // the same over all ranks (the reducer's sum)
  std::vector<float> exchange_;  // [2C + 1] handed to the reducer
  std::vector<double> invstd_;
  std::vector<float> mean_, scale_, shift_, a_, b_, c_;
};

// ---- the elementwise passes (C channels, `pixels` columns; resnet_ops.h runs them) ----------
// sums[c] += sum of z[c, :], sums[C + c] += sum of z[c, :]^2.
void add_channel_sums(int channels, std::int64_t pixels, const float* z, double* sums);
// out = (z - mean) * scale + shift, then max(out, 0) where `relu`. out may be z.
void bn_apply(int channels, std::int64_t pixels, const float* z, const BatchNorm& bn, bool relu,
              float* out);
// A residual block's end: out = max(bn(z) + r, 0), r the identity shortcut `residual` or, with
// `down` (the projection shortcut's norm), down(z_down).
void bn_add_relu(int channels, std::int64_t pixels, const float* z, const BatchNorm& bn,
                 const float* residual, float* out);
void bn_bn_add_relu(int channels, std::int64_t pixels, const float* z, const BatchNorm& bn,
                    const float* z_down, const BatchNorm& down, float* out);
// g = 0 where activation <= 0 (ReLU's derivative, from its output), in place.
void relu_mask(std::int64_t n, const float* activation, float* g);
// dy = g, or with `mask` (the output of a ReLU after this norm) g where mask > 0 and 0 elsewhere:
// dsums[c] += sum of dy[c, :], dsums[C + c] += sum of dy[c, :] * (z[c, :] - mean[c]).
void add_backward_sums(int channels, std::int64_t pixels, const float* g, const float* mask,
                       const float* z, const float* mean, double* dsums);
// g_z = a * dy + b * (z - mean) + c per channel (BatchNorm::backward_factors), dy as above.
// g_z may be g.
void bn_backward_apply(int channels, std::int64_t pixels, const float* g, const float* mask,
                       const float* z, const BatchNorm& bn, float* g_z);

}  // namespace gradsync::resnet
