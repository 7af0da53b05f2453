// The MLP of model/mlp.h on one CUDA device: the same layers, the same flat layout of
// parameters and gradients (W_l column-major out x in, then b_l, layer by layer), the same
// math; cuBLAS for the matrix products and the kernels of mlp_kernels.h for the rest.
//
//   CudaMlp model({784, 256, 256, 10}, /*max_batch=*/256, /*device=*/local_rank);
//   model.init_params(seed);                        // bit-identical to Mlp::init_params(seed)
//   loss = model.forward_backward(data, indices);   // params()/grads() are device memory
//
// Data: the first time a Dataset is seen it is uploaded whole (device_dataset.h); a step then
// copies only its indices and gathers the batch on the device.
//
// Streams and hand-off: all work runs on stream(), a non-blocking stream of the model's device.
// The gradient-ready callback is called per layer, last layer first, as soon as that layer's
// gradient kernels are ENQUEUED (not finished): a consumer orders itself after them with an
// event recorded on stream() (cudaEventRecord + cudaStreamWaitEvent), with no host
// synchronisation per layer. forward_backward() itself returns once the step's work is done
// (it reads the loss), so after it returns grads() is final for any stream or the host.
//
// Threads: the current CUDA device is per thread; every public call selects the model's device
// first, so a model may be created on one thread and trained on another (one at a time).
// Failures of CUDA or cuBLAS throw gradsync::Error naming the call and the device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "model/cuda/cuda_handles.h"
#include "model/cuda/device_buffer.h"
#include "model/cuda/device_dataset.h"
#include "model/cuda/mlp_kernels.h"
#include "model/mlp.h"
#include "model/model.h"

namespace gradsync {

class CudaMlp final : public Model {
 public:
  // widths = {input, hidden..., classes}; device is a CUDA ordinal (LOCAL_RANK for a worker).
  CudaMlp(std::vector<int> widths, int max_batch, int device);
  ~CudaMlp() override;
  CudaMlp(const CudaMlp&) = delete;
  CudaMlp& operator=(const CudaMlp&) = delete;

  // The host Mlp's initialisation from the same seed, copied over: CPU and GPU start equal.
  void init_params(std::uint64_t seed) override;

  std::span<float> params() override { return params_.span(); }
  std::span<float> grads() override { return grads_.span(); }
  std::size_t param_count() const override { return params_.size(); }
  const std::vector<LayerRange>& layers() const { return layers_; }

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

  Evaluation evaluate(const Dataset& data) override;

  // The stream every kernel of this model runs on (see the header comment).
  cudaStream_t stream() const { return stream_.get(); }

 private:
  void forward(const cuda::DeviceDataset& data, const std::int64_t* indices, std::int64_t first,
               int batch);
  // Softmax cross-entropy of the last forward; adds the batch's loss and correct count to the
  // device totals; writes the logits' gradient when `grad_scale` is given.
  void loss(const cuda::DeviceDataset& data, const std::int64_t* indices, std::int64_t first,
            int batch, const float* grad_scale);
  void gemm(cublasOperation_t a_op, cublasOperation_t b_op, int m, int n, int k, const float* a,
            int lda, const float* b, int ldb, float beta, float* c, int ldc);
  // Reads the totals back (one synchronisation of the stream).
  kernels::LossTotals read_totals();

  std::vector<int> widths_;
  int max_batch_;
  int device_;
  std::vector<LayerRange> layers_;
  cuda::DeviceBuffer<float> params_;
  cuda::DeviceBuffer<float> grads_;
  std::vector<cuda::DeviceBuffer<float>> activations_;  // [0] = input, [l+1] = layer l's output
  std::vector<cuda::DeviceBuffer<float>> deltas_;       // [l] = d(loss)/d(pre-activation l)
  cuda::DeviceBuffer<std::int64_t> indices_;
  cuda::PinnedBuffer<std::int64_t> staged_indices_;
  cuda::DeviceBuffer<double> sample_loss_;
  cuda::DeviceBuffer<int> sample_correct_;
  cuda::DeviceBuffer<kernels::LossTotals> totals_;
  cuda::PinnedBuffer<kernels::LossTotals> host_totals_;
  cuda::DeviceDatasetCache datasets_;
  GradReadyCallback grad_ready_;
  // Last, so destroyed first: cuBLAS's handle, then the stream, which waits for its work
  // before any buffer above is freed.
  cuda::Stream stream_;
  cuda::Cublas cublas_;
};

// The stream of a CudaMlp, or null for any other model (a CPU model has none).
cudaStream_t model_stream(Model& model);

}  // namespace gradsync
