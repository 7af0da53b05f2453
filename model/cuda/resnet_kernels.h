// The kernels of the CUDA ResNet (cuda_resnet.h) besides cuBLAS's products: im2col and its
// adjoint, batch norm's statistics, factors and element-wise passes, the residual add, ReLU's
// mask and the global average pool. Each launcher enqueues one kernel on `stream` and returns
// cudaGetLastError() for the caller to check (the callers are plain C++ files; only
// resnet_kernels.cu is compiled by nvcc).
//
// Layouts are the CPU ResNet's (model/resnet/conv2d.h): an activation of C channels is the
// column-major matrix [C x P], P = N*H*W pixels in (sample, row, column) order, channels
// contiguous (NHWC); col is [K x P'] column-major, K = kernel * kernel * Cin in (kh, kw, cin)
// order, one column per output pixel. Each kernel does the arithmetic of the matching CPU
// pass (model/resnet/resnet_ops.inl, batch_norm.cpp) with the same float and double roundings;
// resnet_kernels.cu is compiled without multiply-add contraction, as the CPU passes are, so
// the only differences from the CPU are the order of the double sums and the products'.
// Written for clarity over speed: one thread per output element, per-channel sums by one block
// each, in a fixed order (no atomics), so every run gives the same bits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "model/resnet/conv_shape.h"

namespace gradsync::kernels {

// A batch norm's per-channel state on the device (C each): what forward and backward read.
struct BnFactors {
  float* mean;     // the batch's (train) or the running mean (eval)
  double* invstd;  // 1 / sqrt(var + eps) of the batch (train mode only)
  float* scale;    // gamma * invstd: y = (z - mean) * scale + shift
  float* shift;    // beta
  float* a;        // backward: dz = a * dy + b * (z - mean) + c
  float* b;
  float* c;
};

// col[:, j] = the K inputs output pixel j (of `batch` samples) sees, zeros over the padding.
cudaError_t im2col(const resnet::ConvShape& s, int batch, const float* x, float* col,
                   cudaStream_t stream);

// g_x (=, or += when `add`) the adjoint of im2col applied to dcol: each input element the sum
// of the dcol entries that were copied from it (a gather per input element, no atomics).
cudaError_t col2im(const resnet::ConvShape& s, int batch, const float* dcol, float* g_x, bool add,
                   cudaStream_t stream);

// sums[c] = sum of z[c, :], sums[C + c] = sum of z[c, :]^2, in double, overwritten.
cudaError_t channel_sums(int channels, std::int64_t pixels, const float* z, double* sums,
                         cudaStream_t stream);

// BatchNorm::train_statistics from `sums` over `count` values per channel: the sums rounded to
// float as the CPU's exchange does, mean and invstd of the batch, scale and shift, and the
// running statistics moved (momentum 0.1, unbiased variance).
cudaError_t bn_train_statistics(int channels, const double* sums, std::int64_t count,
                                const float* gamma, const float* beta, float* running_mean,
                                float* running_var, BnFactors f, cudaStream_t stream);

// BatchNorm::eval_statistics: mean the running mean, scale gamma / sqrt(running var + eps).
cudaError_t bn_eval_statistics(int channels, const float* gamma, const float* beta,
                               const float* running_mean, const float* running_var, BnFactors f,
                               cudaStream_t stream);

// out = (z - mean) * scale + shift, then max(out, 0) where `relu`.
cudaError_t bn_apply(int channels, std::int64_t pixels, const float* z, BnFactors f, bool relu,
                     float* out, cudaStream_t stream);
// out = max(bn(z) + residual, 0): a block's end with the identity shortcut.
cudaError_t bn_add_relu(int channels, std::int64_t pixels, const float* z, BnFactors f,
                        const float* residual, float* out, cudaStream_t stream);
// out = max(bn(z) + down(z_down), 0): a block's end with the projection shortcut.
cudaError_t bn_bn_add_relu(int channels, std::int64_t pixels, const float* z, BnFactors f,
                           const float* z_down, BnFactors down, float* out, cudaStream_t stream);

// g = 0 where activation <= 0 (ReLU's derivative from its output), in place.
cudaError_t relu_mask(std::int64_t n, const float* activation, float* g, cudaStream_t stream);

// dy = g, or g masked by `mask` > 0 when mask is not null: dsums[c] = sum of dy[c, :],
// dsums[C + c] = sum of dy[c, :] * (z[c, :] - mean[c]), in double, overwritten.
cudaError_t bn_backward_sums(int channels, std::int64_t pixels, const float* g, const float* mask,
                             const float* z, const float* mean, double* dsums,
                             cudaStream_t stream);

// BatchNorm::backward_factors: gamma's and beta's gradients written (added when `accumulate`)
// and a, b, c of dz for `count` values per channel.
cudaError_t bn_backward_factors(int channels, const double* dsums, std::int64_t count,
                                const float* gamma, float* g_gamma, float* g_beta,
                                bool accumulate, BnFactors f, cudaStream_t stream);

// a, b, c of dz again after a SyncBatchNorm reducer, from `exchange` (device memory, 2C + 1):
// the reduced [sum of dy (C), sum of dy * xhat (C), count] (batch_stats_exchange.h); the
// gradients of gamma and beta stay bn_backward_factors' (this rank's batch, as the CPU's).
cudaError_t bn_backward_factors_reduced(int channels, const float* exchange, const float* gamma,
                                        BnFactors f, cudaStream_t stream);

// g_z = a * dy + b * (z - mean) + c, dy as in bn_backward_sums. g_z may be g.
cudaError_t bn_backward_apply(int channels, std::int64_t pixels, const float* g, const float* mask,
                              const float* z, BnFactors f, float* g_z, cudaStream_t stream);

// pooled[c + n * C] = the mean over image n's `hw` pixels of x, per channel (summed in pixel
// order, then times 1 / hw, as the CPU).
cudaError_t average_pool(int channels, int hw, int batch, const float* x, float* pooled,
                         cudaStream_t stream);
// g[(n * hw + p) * C + c] = d_pooled[c + n * C] / hw: the pool's gradient spread evenly.
cudaError_t average_pool_backward(int channels, int hw, int batch, const float* d_pooled, float* g,
                                  cudaStream_t stream);

}  // namespace gradsync::kernels
