// The CUDA ResNet's kernels (contract: resnet_kernels.h).
//
// Launch shapes are plain: grid-stride loops of 256 threads over output elements, so any size
// works with a capped grid; per-channel sums take one block per channel, each thread a fixed
// stride of pixels, then a fixed tree in shared memory. Compiled with --fmad=false
// (model/CMakeLists.txt): every float expression below rounds as its CPU twin in
// resnet_ops.inl or batch_norm.cpp, which are built without contraction too.
#include <cstddef>
#include <cstdint>

#include "model/cuda/resnet_kernels.h"

namespace gradsync::kernels {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU several times over; grid-stride loops do the rest.
constexpr std::size_t kMaxBlocks = 4096;
// BatchNorm::kEps and kMomentum (model/resnet/batch_norm.h), spelled out for device code.
constexpr double kEps = 1e-5;
constexpr double kMomentum = 0.1;

unsigned blocks_for(std::size_t n) {
  const std::size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

__device__ std::size_t first_index() { return blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; }
__device__ std::size_t grid_stride() { return std::size_t{gridDim.x} * blockDim.x; }

// Keeps a NaN, as the CPU's relu (resnet_ops.inl): a diverging run must show in its loss.
__device__ float relu(float x) { return x < 0.f ? 0.f : x; }

__global__ void im2col_kernel(resnet::ConvShape s, std::int64_t out_pixels,
                              const float* __restrict__ x, float* __restrict__ col) {
  const int cin = s.in_channels, k = s.kernel * s.kernel * cin;
  const std::size_t total = static_cast<std::size_t>(out_pixels) * k;
  const std::int64_t plane = std::int64_t{s.out_h} * s.out_w;
  for (std::size_t t = first_index(); t < total; t += grid_stride()) {
    // col is [K x P] column-major: t = row + K * pixel; row = (kh * kernel + kw) * Cin + ci.
    const std::int64_t j = static_cast<std::int64_t>(t / k);
    const int row = static_cast<int>(t % k);
    const int ci = row % cin, kw = (row / cin) % s.kernel, kh = row / cin / s.kernel;
    const std::int64_t n = j / plane;
    const int r = static_cast<int>(j % plane), ho = r / s.out_w, wo = r % s.out_w;
    const int hi = ho * s.stride - s.pad + kh, wi = wo * s.stride - s.pad + kw;
    const bool inside = hi >= 0 && hi < s.in_h && wi >= 0 && wi < s.in_w;
    col[t] = inside ? x[((n * s.in_h + hi) * s.in_w + wi) * cin + ci] : 0.f;
  }
}

__global__ void col2im_kernel(resnet::ConvShape s, std::int64_t in_pixels,
                              const float* __restrict__ dcol, float* __restrict__ g_x, bool add) {
  const int cin = s.in_channels, k = s.kernel * s.kernel * cin;
  const std::size_t total = static_cast<std::size_t>(in_pixels) * cin;
  for (std::size_t t = first_index(); t < total; t += grid_stride()) {
    // Input element (n, hi, wi, ci) was copied into col by every output pixel (ho, wo) and tap
    // (kh, kw) with ho * stride - pad + kh = hi (and the same across): gather those entries.
    const int ci = static_cast<int>(t % cin);
    const std::int64_t pixel = static_cast<std::int64_t>(t / cin);
    const int wi = static_cast<int>(pixel % s.in_w);
    const int hi = static_cast<int>((pixel / s.in_w) % s.in_h);
    const std::int64_t n = pixel / (std::int64_t{s.in_w} * s.in_h);
    float sum = 0.f;
    for (int kh = 0; kh < s.kernel; ++kh) {
      const int h = hi + s.pad - kh;  // ho * stride
      if (h < 0 || h % s.stride != 0 || h / s.stride >= s.out_h) continue;
      const int ho = h / s.stride;
      for (int kw = 0; kw < s.kernel; ++kw) {
        const int w = wi + s.pad - kw;
        if (w < 0 || w % s.stride != 0 || w / s.stride >= s.out_w) continue;
        const int wo = w / s.stride;
        const std::int64_t j = (n * s.out_h + ho) * s.out_w + wo;
        sum += dcol[static_cast<std::size_t>(j) * k + (kh * s.kernel + kw) * cin + ci];
      }
    }
    g_x[t] = add ? g_x[t] + sum : sum;
  }
}

// Adds the two per-thread double sums of a block into out[0] and out[1] by a fixed tree.
__device__ void block_sums(double first, double second, double* out_first, double* out_second) {
  __shared__ double a[kThreads];
  __shared__ double b[kThreads];
  a[threadIdx.x] = first;
  b[threadIdx.x] = second;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      a[threadIdx.x] += a[threadIdx.x + stride];
      b[threadIdx.x] += b[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *out_first = a[0];
    *out_second = b[0];
  }
}

// One block per channel (blockIdx.x).
__global__ void channel_sums_kernel(int channels, std::int64_t pixels, const float* __restrict__ z,
                                    double* __restrict__ sums) {
  const int c = blockIdx.x;
  double s = 0, q = 0;
  for (std::int64_t p = threadIdx.x; p < pixels; p += kThreads) {
    const double v = z[p * channels + c];
    s += v;
    q += v * v;
  }
  block_sums(s, q, sums + c, sums + channels + c);
}

__global__ void bn_backward_sums_kernel(int channels, std::int64_t pixels,
                                        const float* __restrict__ g, const float* __restrict__ mask,
                                        const float* __restrict__ z, const float* __restrict__ mean,
                                        double* __restrict__ dsums) {
  const int c = blockIdx.x;
  double s = 0, q = 0;
  for (std::int64_t p = threadIdx.x; p < pixels; p += kThreads) {
    const std::int64_t i = p * channels + c;
    // As add_backward_sums: the mask multiplies in float, the product with (z - mean) (a float
    // difference) is taken in double.
    const double d = mask != nullptr ? g[i] * static_cast<float>(mask[i] > 0.f) : g[i];
    s += d;
    q += d * (z[i] - mean[c]);
  }
  block_sums(s, q, dsums + c, dsums + channels + c);
}

// One thread per channel: BatchNorm::train_statistics line for line.
__global__ void bn_train_statistics_kernel(int channels, const double* __restrict__ sums,
                                           std::int64_t count, const float* __restrict__ gamma,
                                           const float* __restrict__ beta,
                                           float* __restrict__ running_mean,
                                           float* __restrict__ running_var, BnFactors f) {
  for (int c = static_cast<int>(first_index()); c < channels;
       c += static_cast<int>(grid_stride())) {
    // Through floats, as the CPU's exchange with a SyncBatchNorm reducer.
    const float sum = static_cast<float>(sums[c]);
    const float squares = static_cast<float>(sums[channels + c]);
    const double n = static_cast<float>(count);
    const double unbiased = n / (n - 1);
    const double mean = sum / n;
    const double spread = squares / n - mean * mean;
    const double var = 0.0 < spread ? spread : 0.0;  // std::max(0.0, spread), NaN included
    const double invstd = 1.0 / sqrt(var + kEps);
    f.invstd[c] = invstd;
    f.mean[c] = static_cast<float>(mean);
    f.scale[c] = static_cast<float>(gamma[c] * invstd);
    f.shift[c] = beta[c];
    running_mean[c] = static_cast<float>((1 - kMomentum) * running_mean[c] + kMomentum * mean);
    running_var[c] =
        static_cast<float>((1 - kMomentum) * running_var[c] + kMomentum * var * unbiased);
  }
}

__global__ void bn_eval_statistics_kernel(int channels, const float* __restrict__ gamma,
                                          const float* __restrict__ beta,
                                          const float* __restrict__ running_mean,
                                          const float* __restrict__ running_var, BnFactors f) {
  for (int c = static_cast<int>(first_index()); c < channels;
       c += static_cast<int>(grid_stride())) {
    f.mean[c] = running_mean[c];
    f.scale[c] = static_cast<float>(gamma[c] / sqrt(double{running_var[c]} + kEps));
    f.shift[c] = beta[c];
  }
}

// One thread per channel: BatchNorm::backward_factors without a reducer.
__global__ void bn_backward_factors_kernel(int channels, const double* __restrict__ dsums,
                                           std::int64_t count, const float* __restrict__ gamma,
                                           float* __restrict__ g_gamma, float* __restrict__ g_beta,
                                           bool accumulate, BnFactors f) {
  for (int c = static_cast<int>(first_index()); c < channels;
       c += static_cast<int>(grid_stride())) {
    const auto sum_dy = static_cast<float>(dsums[c]);
    const auto sum_dy_xhat = static_cast<float>(dsums[channels + c] * f.invstd[c]);
    g_gamma[c] = accumulate ? g_gamma[c] + sum_dy_xhat : sum_dy_xhat;
    g_beta[c] = accumulate ? g_beta[c] + sum_dy : sum_dy;
    const double n = static_cast<float>(count);
    const double a = gamma[c] * f.invstd[c];
    f.a[c] = static_cast<float>(a);
    f.b[c] = static_cast<float>(-a * f.invstd[c] * sum_dy_xhat / n);
    f.c[c] = static_cast<float>(-a * sum_dy / n);
  }
}

// One thread per channel: BatchNorm::backward_factors' a, b and c after a SyncBatchNorm
// reducer, from the reduced [sum of dy (C), sum of dy * xhat (C), count (1)].
__global__ void bn_backward_factors_reduced_kernel(int channels, const float* __restrict__ exchange,
                                                   const float* __restrict__ gamma, BnFactors f) {
  for (int c = static_cast<int>(first_index()); c < channels;
       c += static_cast<int>(grid_stride())) {
    const double n = exchange[2 * channels];
    const double a = gamma[c] * f.invstd[c];
    f.a[c] = static_cast<float>(a);
    f.b[c] = static_cast<float>(-a * f.invstd[c] * exchange[channels + c] / n);
    f.c[c] = static_cast<float>(-a * exchange[c] / n);
  }
}

__global__ void bn_apply_kernel(int channels, std::size_t total, const float* __restrict__ z,
                                BnFactors f, bool relu_after, float* out) {
  for (std::size_t t = first_index(); t < total; t += grid_stride()) {
    const int c = static_cast<int>(t % channels);
    const float y = (z[t] - f.mean[c]) * f.scale[c] + f.shift[c];
    out[t] = relu_after ? relu(y) : y;
  }
}

__global__ void bn_add_relu_kernel(int channels, std::size_t total, const float* __restrict__ z,
                                   BnFactors f, const float* __restrict__ residual,
                                   float* __restrict__ out) {
  for (std::size_t t = first_index(); t < total; t += grid_stride()) {
    const int c = static_cast<int>(t % channels);
    out[t] = relu((z[t] - f.mean[c]) * f.scale[c] + f.shift[c] + residual[t]);
  }
}

__global__ void bn_bn_add_relu_kernel(int channels, std::size_t total, const float* __restrict__ z,
                                      BnFactors f, const float* __restrict__ z_down, BnFactors d,
                                      float* __restrict__ out) {
  for (std::size_t t = first_index(); t < total; t += grid_stride()) {
    const int c = static_cast<int>(t % channels);
    const float r = (z_down[t] - d.mean[c]) * d.scale[c] + d.shift[c];
    out[t] = relu((z[t] - f.mean[c]) * f.scale[c] + f.shift[c] + r);
  }
}

__global__ void relu_mask_kernel(std::size_t n, const float* __restrict__ activation,
                                 float* __restrict__ g) {
  for (std::size_t t = first_index(); t < n; t += grid_stride()) {
    const float dy = g[t];
    g[t] = activation[t] > 0.f ? dy : 0.f;
  }
}

// g_z may alias g: each element is read, then written, by the same thread.
__global__ void bn_backward_apply_kernel(int channels, std::size_t total, const float* g,
                                         const float* __restrict__ mask,
                                         const float* __restrict__ z, BnFactors f, float* g_z) {
  for (std::size_t t = first_index(); t < total; t += grid_stride()) {
    const int c = static_cast<int>(t % channels);
    const float d = mask != nullptr ? g[t] * static_cast<float>(mask[t] > 0.f) : g[t];
    g_z[t] = f.a[c] * d + f.b[c] * (z[t] - f.mean[c]) + f.c[c];
  }
}

__global__ void average_pool_kernel(int channels, int hw, int batch, const float* __restrict__ x,
                                    float* __restrict__ pooled) {
  const std::size_t total = static_cast<std::size_t>(batch) * channels;
  const float inv = 1.0f / static_cast<float>(hw);
  for (std::size_t t = first_index(); t < total; t += grid_stride()) {
    const std::size_t n = t / channels;
    const int c = static_cast<int>(t % channels);
    const float* image = x + n * hw * channels;
    float sum = 0.f;
    for (int p = 0; p < hw; ++p) sum += image[static_cast<std::size_t>(p) * channels + c];
    pooled[t] = sum * inv;
  }
}

__global__ void average_pool_backward_kernel(int channels, int hw, int batch,
                                             const float* __restrict__ d_pooled,
                                             float* __restrict__ g) {
  const std::size_t total = static_cast<std::size_t>(batch) * hw * channels;
  const float inv = 1.0f / static_cast<float>(hw);
  for (std::size_t t = first_index(); t < total; t += grid_stride()) {
    const std::size_t n = t / (static_cast<std::size_t>(hw) * channels);
    const int c = static_cast<int>(t % channels);
    g[t] = d_pooled[n * channels + c] * inv;
  }
}

}  // namespace

cudaError_t im2col(const resnet::ConvShape& s, int batch, const float* x, float* col,
                   cudaStream_t stream) {
  const std::int64_t pixels = s.out_pixels(batch);
  const std::size_t total = static_cast<std::size_t>(pixels) * s.k();
  im2col_kernel<<<blocks_for(total), kThreads, 0, stream>>>(s, pixels, x, col);
  return cudaGetLastError();
}

cudaError_t col2im(const resnet::ConvShape& s, int batch, const float* dcol, float* g_x, bool add,
                   cudaStream_t stream) {
  const std::int64_t pixels = s.in_pixels(batch);
  const std::size_t total = static_cast<std::size_t>(pixels) * s.in_channels;
  col2im_kernel<<<blocks_for(total), kThreads, 0, stream>>>(s, pixels, dcol, g_x, add);
  return cudaGetLastError();
}

cudaError_t channel_sums(int channels, std::int64_t pixels, const float* z, double* sums,
                         cudaStream_t stream) {
  channel_sums_kernel<<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(channels, pixels, z,
                                                                                sums);
  return cudaGetLastError();
}

cudaError_t bn_train_statistics(int channels, const double* sums, std::int64_t count,
                                const float* gamma, const float* beta, float* running_mean,
                                float* running_var, BnFactors f, cudaStream_t stream) {
  bn_train_statistics_kernel<<<blocks_for(static_cast<std::size_t>(channels)), kThreads, 0,
                               stream>>>(channels, sums, count, gamma, beta, running_mean,
                                         running_var, f);
  return cudaGetLastError();
}

cudaError_t bn_eval_statistics(int channels, const float* gamma, const float* beta,
                               const float* running_mean, const float* running_var, BnFactors f,
                               cudaStream_t stream) {
  bn_eval_statistics_kernel<<<blocks_for(static_cast<std::size_t>(channels)), kThreads, 0,
                              stream>>>(channels, gamma, beta, running_mean, running_var, f);
  return cudaGetLastError();
}

cudaError_t bn_apply(int channels, std::int64_t pixels, const float* z, BnFactors f, bool relu,
                     float* out, cudaStream_t stream) {
  const std::size_t total = static_cast<std::size_t>(pixels) * channels;
  bn_apply_kernel<<<blocks_for(total), kThreads, 0, stream>>>(channels, total, z, f, relu, out);
  return cudaGetLastError();
}

cudaError_t bn_add_relu(int channels, std::int64_t pixels, const float* z, BnFactors f,
                        const float* residual, float* out, cudaStream_t stream) {
  const std::size_t total = static_cast<std::size_t>(pixels) * channels;
  bn_add_relu_kernel<<<blocks_for(total), kThreads, 0, stream>>>(channels, total, z, f, residual,
                                                                  out);
  return cudaGetLastError();
}

cudaError_t bn_bn_add_relu(int channels, std::int64_t pixels, const float* z, BnFactors f,
                           const float* z_down, BnFactors down, float* out, cudaStream_t stream) {
  const std::size_t total = static_cast<std::size_t>(pixels) * channels;
  bn_bn_add_relu_kernel<<<blocks_for(total), kThreads, 0, stream>>>(channels, total, z, f, z_down,
                                                                     down, out);
  return cudaGetLastError();
}

cudaError_t relu_mask(std::int64_t n, const float* activation, float* g, cudaStream_t stream) {
  const auto total = static_cast<std::size_t>(n);
  relu_mask_kernel<<<blocks_for(total), kThreads, 0, stream>>>(total, activation, g);
  return cudaGetLastError();
}

cudaError_t bn_backward_sums(int channels, std::int64_t pixels, const float* g, const float* mask,
                             const float* z, const float* mean, double* dsums,
                             cudaStream_t stream) {
  bn_backward_sums_kernel<<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(
      channels, pixels, g, mask, z, mean, dsums);
  return cudaGetLastError();
}

cudaError_t bn_backward_factors(int channels, const double* dsums, std::int64_t count,
                                const float* gamma, float* g_gamma, float* g_beta,
                                bool accumulate, BnFactors f, cudaStream_t stream) {
  bn_backward_factors_kernel<<<blocks_for(static_cast<std::size_t>(channels)), kThreads, 0,
                               stream>>>(channels, dsums, count, gamma, g_gamma, g_beta,
                                         accumulate, f);
  return cudaGetLastError();
}

cudaError_t bn_backward_factors_reduced(int channels, const float* exchange, const float* gamma,
                                        BnFactors f, cudaStream_t stream) {
  bn_backward_factors_reduced_kernel<<<blocks_for(static_cast<std::size_t>(channels)), kThreads, 0,
                                       stream>>>(channels, exchange, gamma, f);
  return cudaGetLastError();
}

cudaError_t bn_backward_apply(int channels, std::int64_t pixels, const float* g, const float* mask,
                              const float* z, BnFactors f, float* g_z, cudaStream_t stream) {
  const std::size_t total = static_cast<std::size_t>(pixels) * channels;
  bn_backward_apply_kernel<<<blocks_for(total), kThreads, 0, stream>>>(channels, total, g, mask, z,
                                                                        f, g_z);
  return cudaGetLastError();
}

cudaError_t average_pool(int channels, int hw, int batch, const float* x, float* pooled,
                         cudaStream_t stream) {
  const std::size_t total = static_cast<std::size_t>(batch) * channels;
  average_pool_kernel<<<blocks_for(total), kThreads, 0, stream>>>(channels, hw, batch, x, pooled);
  return cudaGetLastError();
}

cudaError_t average_pool_backward(int channels, int hw, int batch, const float* d_pooled, float* g,
                                  cudaStream_t stream) {
  const std::size_t total = static_cast<std::size_t>(batch) * hw * channels;
  average_pool_backward_kernel<<<blocks_for(total), kThreads, 0, stream>>>(channels, hw, batch,
                                                                           d_pooled, g);
  return cudaGetLastError();
}

}  // namespace gradsync::kernels
