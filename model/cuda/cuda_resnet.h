// The ResNet of model/resnet/resnet.h on one CUDA device: the same network, the same flat
// layout of parameters, gradients and running statistics (layers(), tensors() and the init are
// the host ResNet's own), the same math; convolutions as im2col + cuBLAS SGEMM (FP32, TF32 off),
// and the kernels of resnet_kernels.h for batch norm, ReLU, the residual adds and the pool.
//
//   CudaResNet model({.blocks_per_stage = 1, .stage_width = 16}, /*max_batch=*/128, local_rank);
//   model.init_params(seed);                        // bit-identical to ResNet::init_params(seed)
//   loss = model.forward_backward(data, indices);   // params()/grads() are device memory
//   model.buffers();                                // running statistics: HOST memory
//
// Products. Every matrix is the CPU's, column-major, which is cuBLAS's own order, so each
// product is the CPU's call with the same m, n, k and leading dimensions (conv2d.h):
//   forward      Z[Cout x P]  = W[Cout x K] * col[K x P]           (N, N)
//   weight grad  dW[Cout x K] = dZ[Cout x P] * col[K x P]^T        (N, T), beta 1 to accumulate
//   input grad   dcol[K x P]  = W^T * dZ, then col2im onto dX      (T, N)
// with col = im2col(x) of the whole batch (no chunks: a GPU has the memory), recomputed in
// backward rather than kept per layer. The linear layer is the MLP's: logits = W * pooled + b.
//
// Running statistics (buffers()). Model's contract puts them in host memory at a fixed
// address, because strategies and checkpoints read and write them as plain floats (`dp`
// copies replica 0's into the others, DDP's broadcast_buffers, a resume writes them). Here
// that host array (page-locked, allocated once) is the truth between calls, and the device
// holds a working copy: every forward (train or eval) first uploads the host array, and a
// train-mode forward downloads the moved statistics back before forward_backward returns. So
// whatever a strategy or a checkpoint wrote there is what the next forward normalises with,
// with no "changed" flag to forget; the cost is two copies of a few KiB per step.
//
// SyncBatchNorm (set_batch_stats_reducer): each norm's sums come off the device, go through
// the reducer as the CPU's do, and back (batch_stats_exchange.h); the reducer a strategy sets
// for a GPU model stages them for its communicator (strategies/make_strategy.cpp).
//
// Data: each batch is gathered and augmented on the host exactly as the CPU ResNet does
// (model/augment.h, keyed by (seed, epoch, index)), into page-locked memory, and uploaded.
//
// Streams and hand-off: all work runs on stream(), a non-blocking stream of the model's device.
// The gradient-ready callback is called per layer, last layer first, once that layer's
// gradient is FINISHED: the model synchronises its stream before each call, so a consumer
// needs no event of its own (model_stream() in cuda_mlp.h knows the MLP only). That costs
// the overlap of the copies with backward, not correctness. forward_backward returns once the
// step's work is done (it reads the loss).
//
// Threads: every public call selects the model's device first. Failures of CUDA or cuBLAS
// throw gradsync::Error naming the call and the device. Not thread-safe: one per replica.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/model_state_memory.h"
#include "model/augment.h"
#include "model/cuda/batch_stats_exchange.h"
#include "model/cuda/cuda_handles.h"
#include "model/cuda/device_buffer.h"
#include "model/cuda/mlp_kernels.h"
#include "model/cuda/resnet_kernels.h"
#include "model/model.h"
#include "model/resnet/resnet.h"

namespace gradsync {

namespace cuda {
struct ConvBnLayer;    // cuda_resnet_layers.h
struct ResidualBlock;  // cuda_resnet_layers.h
}  // namespace cuda

class CudaResNet final : public Model {
 public:
  // device is a CUDA ordinal (LOCAL_RANK for a worker). indices.size() of a step must be in
  // [1, max_batch].
  CudaResNet(ResNetShape shape, int max_batch, int device);
  ~CudaResNet() override;
  CudaResNet(const CudaResNet&) = delete;
  CudaResNet& operator=(const CudaResNet&) = delete;

  // The host ResNet's initialisation from the same seed, copied over (parameters and running
  // statistics): CPU and GPU start equal.
  void init_params(std::uint64_t seed) override;

  std::span<float> params() override { return params_.span(); }
  std::span<float> grads() override { return grads_.span(); }
  std::size_t param_count() const override { return params_.size(); }
  // The host ResNet's layers and tensors: the same ranges by construction.
  const std::vector<ResNet::Layer>& layers() const { return layout_->layers(); }
  std::vector<TensorShape> tensors() const override { return layout_->tensors(); }
  const ResNetShape& shape() const { return shape_; }

  // Host memory, at the same address for the model's lifetime (see the header comment).
  std::span<float> buffers() override { return buffers_host_.span(); }

  // SyncBatchNorm's statistics exchange; null: this rank's statistics.
  void set_batch_stats_reducer(BatchStatsReducer reducer) override;

  void set_augmentation(Augmentation augmentation) { augmentation_ = augmentation; }
  void set_epoch(std::int64_t epoch) override { epoch_ = epoch; }

  double forward_backward(const Dataset& data, std::span<const std::int64_t> indices,
                          float grad_scale = 1.0f, bool accumulate = false) override;
  void set_grad_ready_callback(GradReadyCallback callback) override {
    grad_ready_ = std::move(callback);
  }

  int device() const override { return device_; }
  void copy_params_to_host(std::span<float> out) override;
  void copy_params_from_host(std::span<const float> in) override;
  // Gradients to host memory (tests and diagnostics); out.size() == param_count().
  void copy_grads_to_host(std::span<float> out);

  // Eval mode over the whole dataset in chunks of max_batch; parameters and buffers unchanged.
  Evaluation evaluate(const Dataset& data) override;
  // One throwaway step on the first samples, the gradient-ready callback held back and the
  // running statistics restored, so module loading and cuBLAS's first calls leave the timed
  // loop; grads() zeroed after it.
  void prepare(const Dataset& data) override;

  cudaStream_t stream() const { return stream_.get(); }

 private:
  using ConvBn = cuda::ConvBnLayer;
  using Block = cuda::ResidualBlock;

  // Checks a batch against the model and the dataset; returns its size.
  int check_batch(const Dataset& data, std::span<const std::int64_t> indices) const;
  // The batch's images (NHWC, augmented when `augment` and augmentation is on) and labels into
  // the pinned staging buffers, then uploaded on stream().
  void upload_batch(const Dataset& data, std::span<const std::int64_t> indices, bool augment);
  void upload_running_statistics();
  void forward(int batch, bool training);
  void conv_forward(ConvBn& layer, int batch, const float* x, bool training);
  void backward(int batch, bool accumulate);
  void bn_backward(ConvBn& layer, int batch, const float* g, const float* relu_out, float* g_z,
                   bool accumulate);
  // dW (accumulated or not) and, where g_x is given, the input gradient (added when `add`).
  void conv_backward(ConvBn& layer, int batch, const float* x, const float* g_z, float* g_x,
                     bool add, bool accumulate);
  void loss(int batch, const float* grad_scale);
  void layer_ready(std::size_t layer);
  void gemm(cublasOperation_t a_op, cublasOperation_t b_op, int m, int n, int k, const float* a,
            int lda, const float* b, int ldb, float beta, float* c, int ldc);
  kernels::LossTotals read_totals();

  ResNetShape shape_;
  int max_batch_;
  int device_;
  std::unique_ptr<ResNet> layout_;  // the host ResNet at batch 1: layout, init, tensors()
  std::unique_ptr<ConvBn> stem_;
  std::vector<Block> blocks_;
  std::size_t fc_weight_ = 0, fc_bias_ = 0;
  int fc_in_ = 0;
  cuda::DeviceBuffer<float> params_, grads_;
  TrackedBytes params_counted_, grads_counted_;
  cuda::DeviceBuffer<float> running_;                 // the device's working copy of buffers()
  cuda::PinnedBuffer<float> buffers_host_;            // buffers(): the truth between calls
  cuda::DeviceBuffer<float> input_;                   // the batch, NHWC
  cuda::DeviceBuffer<float> col_, dcol_;              // im2col of the largest layer's whole batch
  std::vector<cuda::DeviceBuffer<float>> grad_work_;  // backward's four rotating gradients
  cuda::DeviceBuffer<float> pooled_, d_pooled_, logits_, d_logits_;
  cuda::DeviceBuffer<std::int32_t> labels_;
  cuda::DeviceBuffer<double> sample_loss_;
  cuda::DeviceBuffer<int> sample_correct_;
  cuda::DeviceBuffer<kernels::LossTotals> totals_;
  cuda::PinnedBuffer<kernels::LossTotals> host_totals_;
  cuda::PinnedBuffer<float> staged_input_;
  cuda::PinnedBuffer<std::int32_t> staged_labels_;
  std::vector<float> augment_scratch_;  // one image, (H, W, C)
  std::vector<std::int64_t> eval_indices_;
  GradReadyCallback grad_ready_;
  Augmentation augmentation_;
  std::int64_t epoch_ = 0;
  // cuBLAS's scratch memory, ours as the CUDA MLP's (fixed, and the same algorithms each call).
  cuda::DeviceBuffer<std::byte> cublas_workspace_;
  std::unique_ptr<cuda::BatchStatsExchange> sync_;  // SyncBatchNorm; inactive without a reducer
  // Last, so destroyed first: cuBLAS's handle, then the stream, which waits for its work
  // before any buffer above is freed.
  cuda::Stream stream_;
  cuda::Cublas cublas_;
};

}  // namespace gradsync
