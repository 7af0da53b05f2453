#include "model/resnet/batch_norm.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "model/resnet/resnet_ops.h"

namespace gradsync::resnet {

BatchNorm::BatchNorm(int channels, std::size_t param_offset, std::size_t buffer_offset)
    : channels_(channels), param_offset_(param_offset), buffer_offset_(buffer_offset) {
  GRADSYNC_CHECK(channels >= 1, "batch norm channels must be positive");
  const auto c = static_cast<std::size_t>(channels);
  exchange_.resize(2 * c + 1);
  invstd_.resize(c);
  for (auto* v : {&mean_, &scale_, &shift_, &a_, &b_, &c_}) v->resize(c);
}

void BatchNorm::init(std::span<float> params, std::span<float> buffers) const {
  const auto c = static_cast<std::size_t>(channels_);
  std::fill_n(params.begin() + param_offset_, c, 1.f);
  std::fill_n(params.begin() + param_offset_ + c, c, 0.f);
  std::fill_n(buffers.begin() + buffer_offset_, c, 0.f);
  std::fill_n(buffers.begin() + buffer_offset_ + c, c, 1.f);
}

void BatchNorm::train_statistics(const double* sums, std::int64_t count,
                                 std::span<const float> params, std::span<float> buffers,
                                 const BatchStatsReducer& reducer) {
  const int n = channels_;
  // Through floats whether reduced or not (see the header): one rank's SyncBatchNorm is then
  // bit for bit the local batch norm.
  for (int c = 0; c < 2 * n; ++c) exchange_[c] = static_cast<float>(sums[c]);
  local_count_ = static_cast<float>(count);
  exchange_[2 * n] = local_count_;
  if (reducer) reducer(exchange_);
  count_ = exchange_[2 * n];
  GRADSYNC_CHECK(count_ > 1, "batch norm in training needs more than one value per channel");
  const float* gamma = params.data() + param_offset_;
  const float* beta = gamma + n;
  float* running_mean = buffers.data() + buffer_offset_;
  float* running_var = running_mean + n;
  const double unbiased = count_ / (count_ - 1);
  for (int c = 0; c < n; ++c) {
    const double mean = exchange_[c] / count_;
    // E[z^2] - E[z]^2 in double from float sums: cancellation costs about
    // 1e-7 * E[z^2] / var relative, small where the mean is not far larger than the spread.
    const double var = std::max(0.0, exchange_[n + c] / count_ - mean * mean);
    invstd_[c] = 1.0 / std::sqrt(var + kEps);
    mean_[c] = static_cast<float>(mean);
    scale_[c] = static_cast<float>(gamma[c] * invstd_[c]);
    shift_[c] = beta[c];
    running_mean[c] = static_cast<float>((1 - kMomentum) * running_mean[c] + kMomentum * mean);
    running_var[c] =
        static_cast<float>((1 - kMomentum) * running_var[c] + kMomentum * var * unbiased);
  }
}

void BatchNorm::eval_statistics(std::span<const float> params, std::span<const float> buffers) {
  const int n = channels_;
  const float* gamma = params.data() + param_offset_;
  const float* beta = gamma + n;
  const float* running_mean = buffers.data() + buffer_offset_;
  const float* running_var = running_mean + n;
  for (int c = 0; c < n; ++c) {
    mean_[c] = running_mean[c];
    scale_[c] = static_cast<float>(gamma[c] / std::sqrt(double{running_var[c]} + kEps));
    shift_[c] = beta[c];
  }
}

void BatchNorm::backward_factors(const double* dsums, std::span<const float> params,
                                 std::span<float> grads, bool accumulate,
                                 const BatchStatsReducer& reducer) {
  const int n = channels_;
  float* g_gamma = grads.data() + param_offset_;
  float* g_beta = g_gamma + n;
  for (int c = 0; c < n; ++c) {
    const auto sum_dy = static_cast<float>(dsums[c]);
    const auto sum_dy_xhat = static_cast<float>(dsums[n + c] * invstd_[c]);
    // y = gamma * xhat + beta: d gamma = sum dy * xhat, d beta = sum dy (this rank's batch).
    g_gamma[c] = accumulate ? g_gamma[c] + sum_dy_xhat : sum_dy_xhat;
    g_beta[c] = accumulate ? g_beta[c] + sum_dy : sum_dy;
    exchange_[c] = sum_dy;
    exchange_[n + c] = sum_dy_xhat;
  }
  exchange_[2 * n] = local_count_;
  if (reducer) {
    reducer(exchange_);
    GRADSYNC_CHECK(exchange_[2 * n] == static_cast<float>(count_),
                   "batch norm: the reduced backward count differs from the forward's");
  }
  // dz = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)), the means over all
  // M = count_ values of the channel (every rank's under SyncBatchNorm).
  const float* gamma = params.data() + param_offset_;
  for (int c = 0; c < n; ++c) {
    const double a = gamma[c] * invstd_[c];
    a_[c] = static_cast<float>(a);
    b_[c] = static_cast<float>(-a * invstd_[c] * exchange_[n + c] / count_);
    c_[c] = static_cast<float>(-a * exchange_[c] / count_);
  }
}

// ---- the elementwise passes, on the path's loops ----------------------------------------------

void add_channel_sums(int channels, std::int64_t pixels, const float* z, double* sums) {
  resnet_ops().add_channel_sums(channels, pixels, z, sums);
}

void bn_apply(int channels, std::int64_t pixels, const float* z, const BatchNorm& bn, bool relu,
              float* out) {
  resnet_ops().bn_apply(channels, pixels, z, bn.mean(), bn.scale(), bn.shift(), relu, out);
}

void bn_add_relu(int channels, std::int64_t pixels, const float* z, const BatchNorm& bn,
                 const float* residual, float* out) {
  resnet_ops().bn_add_relu(channels, pixels, z, bn.mean(), bn.scale(), bn.shift(), residual, out);
}

void bn_bn_add_relu(int channels, std::int64_t pixels, const float* z, const BatchNorm& bn,
                    const float* z_down, const BatchNorm& down, float* out) {
  resnet_ops().bn_bn_add_relu(channels, pixels, z, bn.mean(), bn.scale(), bn.shift(), z_down,
                              down.mean(), down.scale(), down.shift(), out);
}

void relu_mask(std::int64_t n, const float* activation, float* g) {
  resnet_ops().relu_mask(n, activation, g);
}

void add_backward_sums(int channels, std::int64_t pixels, const float* g, const float* mask,
                       const float* z, const float* mean, double* dsums) {
  resnet_ops().add_backward_sums(channels, pixels, g, mask, z, mean, dsums);
}

void bn_backward_apply(int channels, std::int64_t pixels, const float* g, const float* mask,
                       const float* z, const BatchNorm& bn, float* g_z) {
  resnet_ops().bn_backward_apply(channels, pixels, g, mask, z, bn.mean(), bn.a(), bn.b(), bn.c(),
                                 g_z);
}

}  // namespace gradsync::resnet
