// The CUDA MLP's element-wise and reduction kernels (contract: mlp_kernels.h).
//
// Launch shapes are plain: grid-stride loops of 256 threads, so any size works with a capped
// grid. The arithmetic copies model/mlp.cpp and model/optimizer/sgd.cpp step for step: the same max
// subtraction, the same float sum of exponentials in class order, the loss in double; nvcc's
// default contraction into fused multiply-adds matches what GCC does with -march=native on the
// CPU side, and either way the difference is one rounding per operation.
#include <cstdint>

#include "model/cuda/mlp_kernels.h"

namespace gradsync::kernels {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU several times over; grid-stride loops do the rest.
constexpr std::size_t kMaxBlocks = 4096;

unsigned blocks_for(std::size_t n) {
  const std::size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

__device__ std::int64_t sample_of(const std::int64_t* indices, std::int64_t first, int j) {
  return indices != nullptr ? indices[j] : first + j;
}

__global__ void gather_columns_kernel(const float* __restrict__ features, int dim,
                                      const std::int64_t* __restrict__ indices, std::int64_t first,
                                      int batch, float* __restrict__ out) {
  const std::size_t total = static_cast<std::size_t>(batch) * dim;
  for (std::size_t k = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; k < total;
       k += std::size_t{gridDim.x} * blockDim.x) {
    const int j = static_cast<int>(k / dim);
    const std::size_t i = k % dim;
    out[k] = features[static_cast<std::size_t>(sample_of(indices, first, j)) * dim + i];
  }
}

__global__ void add_bias_kernel(float* __restrict__ z, const float* __restrict__ bias, int rows,
                                int cols, bool relu) {
  const std::size_t total = static_cast<std::size_t>(rows) * cols;
  for (std::size_t k = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; k < total;
       k += std::size_t{gridDim.x} * blockDim.x) {
    const float v = z[k] + bias[k % rows];
    // Not fmaxf, which returns 0 for a NaN: a diverging layer must reach the loss as NaN.
    // v < 0 ? 0 : v is std::max(v, 0.f), NaN and signed zeros included, as Eigen's cwiseMax in
    // model/mlp.cpp.
    z[k] = (relu && v < 0.f) ? 0.f : v;
  }
}

// One thread per sample: the class count is small (10 for Fashion-MNIST), and one thread doing
// the CPU's loop keeps its order of summation.
__global__ void softmax_cross_entropy_kernel(const float* __restrict__ logits, int classes,
                                             int batch, const std::int32_t* __restrict__ labels,
                                             const std::int64_t* __restrict__ indices,
                                             std::int64_t first, float grad_scale,
                                             float* __restrict__ delta, double* __restrict__ loss,
                                             int* __restrict__ correct) {
  // Grid-stride: the grid is capped at kMaxBlocks, and a larger batch must not lose samples.
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < batch;
       j += static_cast<int>(gridDim.x * blockDim.x)) {
    const float* z = logits + static_cast<std::size_t>(j) * classes;
    const int label = labels[sample_of(indices, first, j)];
    // Subtracting the max keeps expf from overflowing; the first maximum is the argmax, as
    // std::max_element's.
    int argmax = 0;
    for (int c = 1; c < classes; ++c) {
      if (z[c] > z[argmax]) argmax = c;
    }
    const float zmax = z[argmax];
    float sum = 0.f;
    for (int c = 0; c < classes; ++c) sum += expf(z[c] - zmax);
    loss[j] = log(static_cast<double>(sum)) - static_cast<double>(z[label] - zmax);
    correct[j] = argmax == label ? 1 : 0;
    if (delta != nullptr) {
      // d(mean loss)/dz = (softmax(z) - onehot(label)) / batch, times grad_scale.
      const float inv_batch = grad_scale / static_cast<float>(batch);
      const float scale = inv_batch / sum;
      float* d = delta + static_cast<std::size_t>(j) * classes;
      for (int c = 0; c < classes; ++c) d[c] = expf(z[c] - zmax) * scale;
      d[label] -= inv_batch;
    }
  }
}

// One block: a fixed assignment of samples to threads and a fixed tree, so the sum is the
// same on every run (atomics would make the reported loss vary in its last digits).
__global__ void add_loss_totals_kernel(const double* __restrict__ loss,
                                       const int* __restrict__ correct, int n, LossTotals* totals) {
  __shared__ double loss_part[kThreads];
  __shared__ long long correct_part[kThreads];
  double l = 0;
  long long c = 0;
  for (int j = threadIdx.x; j < n; j += kThreads) {
    l += loss[j];
    c += correct[j];
  }
  loss_part[threadIdx.x] = l;
  correct_part[threadIdx.x] = c;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      loss_part[threadIdx.x] += loss_part[threadIdx.x + stride];
      correct_part[threadIdx.x] += correct_part[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    totals->loss_sum += loss_part[0];
    totals->correct += correct_part[0];
  }
}

__global__ void relu_backward_kernel(float* __restrict__ delta,
                                     const float* __restrict__ activation, std::size_t count) {
  for (std::size_t k = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; k < count;
       k += std::size_t{gridDim.x} * blockDim.x) {
    // As model/mlp.cpp: the gradient passes where the activation is positive. A NaN activation
    // gets none, but it has already made the loss and the output layer's gradient NaN.
    if (!(activation[k] > 0.f)) delta[k] = 0.f;
  }
}

// One thread per row: neighbouring threads read neighbouring elements of each column, so the
// loads coalesce, and each row is summed in column order.
__global__ void bias_gradient_kernel(const float* __restrict__ delta, int rows, int cols,
                                     float* __restrict__ bias_grad, bool accumulate) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows; i += gridDim.x * blockDim.x) {
    float sum = 0.f;
    for (int j = 0; j < cols; ++j) sum += delta[i + static_cast<std::size_t>(j) * rows];
    bias_grad[i] = accumulate ? bias_grad[i] + sum : sum;
  }
}

__global__ void sgd_update_kernel(float* __restrict__ p, const float* __restrict__ g,
                                  float* __restrict__ v, std::size_t n, float lr, float mu,
                                  float wd, float keep) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float d = g[i] + wd * p[i];
    const float velocity = keep * v[i] + d;
    v[i] = velocity;
    p[i] -= lr * (mu == 0.f ? d : velocity);
  }
}

}  // namespace

cudaError_t gather_columns(const float* features, int dim, const std::int64_t* indices,
                           std::int64_t first, int batch, float* out, cudaStream_t stream) {
  gather_columns_kernel<<<blocks_for(static_cast<std::size_t>(batch) * dim), kThreads, 0, stream>>>(
      features, dim, indices, first, batch, out);
  return cudaGetLastError();
}

cudaError_t add_bias(float* z, const float* bias, int rows, int cols, bool relu,
                     cudaStream_t stream) {
  add_bias_kernel<<<blocks_for(static_cast<std::size_t>(rows) * cols), kThreads, 0, stream>>>(
      z, bias, rows, cols, relu);
  return cudaGetLastError();
}

cudaError_t softmax_cross_entropy(const float* logits, int classes, int batch,
                                  const std::int32_t* labels, const std::int64_t* indices,
                                  std::int64_t first, float grad_scale, float* delta, double* loss,
                                  int* correct, cudaStream_t stream) {
  softmax_cross_entropy_kernel<<<blocks_for(static_cast<std::size_t>(batch)), kThreads, 0,
                                 stream>>>(logits, classes, batch, labels, indices, first,
                                           grad_scale, delta, loss, correct);
  return cudaGetLastError();
}

cudaError_t add_loss_totals(const double* loss, const int* correct, int n, LossTotals* totals,
                            cudaStream_t stream) {
  add_loss_totals_kernel<<<1, kThreads, 0, stream>>>(loss, correct, n, totals);
  return cudaGetLastError();
}

cudaError_t relu_backward(float* delta, const float* activation, std::size_t count,
                          cudaStream_t stream) {
  relu_backward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(delta, activation, count);
  return cudaGetLastError();
}

cudaError_t bias_gradient(const float* delta, int rows, int cols, float* bias_grad, bool accumulate,
                          cudaStream_t stream) {
  bias_gradient_kernel<<<blocks_for(static_cast<std::size_t>(rows)), kThreads, 0, stream>>>(
      delta, rows, cols, bias_grad, accumulate);
  return cudaGetLastError();
}

cudaError_t sgd_update(float* params, const float* grads, float* velocity, std::size_t n, float lr,
                       float mu, float wd, float keep, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  sgd_update_kernel<<<blocks_for(n), kThreads, 0, stream>>>(params, grads, velocity, n, lr, mu, wd,
                                                            keep);
  return cudaGetLastError();
}

}  // namespace gradsync::kernels
