// The few kernels the CUDA MLP needs besides cuBLAS's matrix products, and the SGD update.
// Each launcher enqueues one kernel on `stream` and returns cudaGetLastError() for the caller to
// check (the callers are plain C++ files; only mlp_kernels.cu is compiled by nvcc).
//
// Matrices are column-major with samples as columns, as in model/mlp.h: a layer's activation
// is rows = width, cols = batch, element (i, j) at [i + j * rows]. Each kernel does exactly the
// arithmetic of the matching step of model/mlp.cpp / model/optimizer/sgd.cpp, in the same order
// where the order is visible in float (see the .cu file), so CPU and GPU agree to float rounding.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace gradsync::kernels {

// A batch's loss and correct count, summed on the device (deterministically: a fixed tree).
struct LossTotals {
  double loss_sum;
  long long correct;
};

// Sample index of batch column j: indices[j], or first + j when indices is null (evaluation
// walks the dataset in order and needs no index upload).
//
// out[:, j] = features[row(j), :]; features is the dataset's row-major (size x dim) matrix.
cudaError_t gather_columns(const float* features, int dim, const std::int64_t* indices,
                           std::int64_t first, int batch, float* out, cudaStream_t stream);

// z[:, j] += bias, then max(z, 0) when `relu` (hidden layers) in the same pass; a NaN stays NaN
// (torch.relu's behaviour), so a diverging hidden layer shows in the loss.
cudaError_t add_bias(float* z, const float* bias, int rows, int cols, bool relu,
                     cudaStream_t stream);

// Per column j of `logits` (classes x batch): softmax cross-entropy against label[row(j)].
// Writes the loss and correctness of each sample into loss[j] / correct[j]; when `delta` is
// not null also d(grad_scale * mean loss)/d(logits) into delta (classes x batch).
cudaError_t softmax_cross_entropy(const float* logits, int classes, int batch,
                                  const std::int32_t* labels, const std::int64_t* indices,
                                  std::int64_t first, float grad_scale, float* delta, double* loss,
                                  int* correct, cudaStream_t stream);

// totals += (sum of loss[0..n), sum of correct[0..n)), by one block in a fixed order.
cudaError_t add_loss_totals(const double* loss, const int* correct, int n, LossTotals* totals,
                            cudaStream_t stream);

// delta[k] = activation[k] > 0 ? delta[k] : 0 over `count` elements (ReLU's derivative).
cudaError_t relu_backward(float* delta, const float* activation, std::size_t count,
                          cudaStream_t stream);

// bias_grad[i] (=, or += when accumulate) sum over columns of delta[i, :] (rows x cols).
cudaError_t bias_gradient(const float* delta, int rows, int cols, float* bias_grad, bool accumulate,
                          cudaStream_t stream);

// torch.optim.SGD on n floats, exactly model/optimizer/sgd.cpp's arithmetic:
//   d = g + wd * p;  v = keep * v + d;  p -= lr * (mu == 0 ? d : v)
// keep is 0 on the first step (the buffer starts as the first gradient), mu afterwards.
cudaError_t sgd_update(float* params, const float* grads, float* velocity, std::size_t n, float lr,
                       float mu, float wd, float keep, cudaStream_t stream);

}  // namespace gradsync::kernels
