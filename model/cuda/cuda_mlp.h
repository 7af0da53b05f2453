// The MLP of model/mlp.h on one CUDA device: the same layers, the same flat layout of
// parameters and gradients (W_l column-major out x in, then b_l, layer by layer), the same
// math; cuBLAS for the matrix products and the kernels of mlp_kernels.h for the rest.
//
//   CudaMlp model({784, 256, 256, 10}, /*max_batch=*/256, /*device=*/local_rank);
//   model.init_params(seed);                        // bit-identical to Mlp::init_params(seed)
//   loss = model.forward_backward(data, indices);   // params()/grads() are device memory
//   loss = model.train_step(data, indices, sgd);    // or: the whole step as one CUDA graph
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
// CUDA graphs (train_step): a step at batch 256 is ~20 short kernels, and launching them one
// by one costs more host time than the GPU spends on them. train_step records forward,
// backward, the optimizer's update and the loss read-back once per (dataset, batch size,
// optimizer) into a graph and then launches that graph, one call per step. A replay repeats
// the recorded work with the recorded arguments, so everything the graph reads must stay where
// it was: this model's buffers and cuBLAS workspace (allocated once, never moved), the pinned
// index buffer the batch is staged in, the dataset's device copy and the optimizer's momentum
// buffer (both part of the key: a change captures a new graph). Bit for bit, a replay does what
// forward_backward + DeviceSgd::step do: the same kernels with the same arguments.
//
// Threads: the current CUDA device is per thread; every public call selects the model's device
// first, so a model may be created on one thread and trained on another (one at a time).
// Failures of CUDA or cuBLAS throw gradsync::Error naming the call and the device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <vector>

#include "common/model_state_memory.h"
#include "model/cuda/cuda_handles.h"
#include "model/cuda/device_buffer.h"
#include "model/cuda/device_dataset.h"
#include "model/cuda/mlp_kernels.h"
#include "model/mlp.h"
#include "model/model.h"

namespace gradsync {

class DeviceSgd;

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

  // One training step: forward_backward(data, indices) then sgd.step(params(), grads()), with
  // the same result bit for bit (parameters, momentum, sgd.steps_taken(), the returned mean
  // loss), as one CUDA graph launch instead of ~20 kernel launches and two synchronisations.
  // Returns once the update is done. `sgd` must be this model's optimizer (same device, size
  // param_count()). The first step of an optimizer runs without a graph (it sets the momentum
  // buffer rather than decaying it, a different kernel argument); later steps capture a graph
  // on first use of a (dataset, batch size, optimizer) and replay it afterwards; the two most
  // recently used graphs are kept, so a full batch and an epoch's shorter tail both stay
  // captured. Throws if a gradient-ready callback is set: a graph cannot call the host halfway
  // through backward, so callers that overlap communication use forward_backward.
  double train_step(const Dataset& data, std::span<const std::int64_t> indices, DeviceSgd& sgd);
  // How many graphs train_step has captured so far (tests, diagnostics).
  std::size_t graphs_captured() const { return graphs_captured_; }

  int device() const override { return device_; }
  void copy_params_to_host(std::span<float> out) override;
  void copy_params_from_host(std::span<const float> in) override;
  // Gradients to host memory (tests and diagnostics); out.size() == param_count().
  void copy_grads_to_host(std::span<float> out);

  Evaluation evaluate(const Dataset& data) override;
  // Uploads `data` and runs one throwaway step on its first samples with the gradient-ready
  // callback held back, so module loading and cuBLAS's first calls leave the timed loop.
  void prepare(const Dataset& data) override;

  // The stream every kernel of this model runs on (see the header comment).
  cudaStream_t stream() const { return stream_.get(); }

 private:
  // What a captured step bakes in beyond this model's own buffers: a replay is valid only
  // while all of it is unchanged (the batch size sizes the index copy, GEMMs and launches; the
  // rest are the gather's, the loss's and the update's pointer and scalar arguments).
  struct StepGraphKey {
    const float* features;
    const std::int32_t* labels;
    int batch;
    const float* momentum;
    double lr, mu, weight_decay;
    bool operator==(const StepGraphKey&) const = default;
  };
  struct StepGraph {
    StepGraphKey key;
    cuda::GraphExec exec;
  };

  // Checks a batch against the model and the dataset; returns its size.
  int check_batch(const Dataset& data, std::span<const std::int64_t> indices) const;
  // The dataset's device copy (uploaded on first sight), with `indices` copied into the pinned
  // staging buffer that enqueue_step uploads from.
  const cuda::DeviceDataset& stage(const Dataset& data, std::span<const std::int64_t> indices);
  // Enqueues a whole forward + backward on stream() and nothing that waits: the index upload
  // from the staging buffer, zeroing the totals, forward, loss, backward (calling grad_ready_
  // per layer when set), so that it can be captured into a graph as it is.
  void enqueue_step(const cuda::DeviceDataset& data, int batch, float grad_scale, bool accumulate);
  // The graph of enqueue_step + sgd's update + the loss read-back for this key, captured if new.
  cudaGraphExec_t step_graph(const cuda::DeviceDataset& data, int batch, DeviceSgd& sgd);
  void forward(const cuda::DeviceDataset& data, const std::int64_t* indices, std::int64_t first,
               int batch);
  // Softmax cross-entropy of the last forward; adds the batch's loss and correct count to the
  // device totals; writes the logits' gradient when `grad_scale` is given.
  void loss(const cuda::DeviceDataset& data, const std::int64_t* indices, std::int64_t first,
            int batch, const float* grad_scale);
  void gemm(cublasOperation_t a_op, cublasOperation_t b_op, int m, int n, int k, const float* a,
            int lda, const float* b, int ldb, float beta, float* c, int ldc);
  // Enqueues the copy of the totals into host_totals_ (pinned, so it can be in a graph).
  void enqueue_totals_readback();
  // Reads the totals back (one synchronisation of the stream).
  kernels::LossTotals read_totals();

  std::vector<int> widths_;
  int max_batch_;
  int device_;
  std::vector<LayerRange> layers_;
  cuda::DeviceBuffer<float> params_;
  cuda::DeviceBuffer<float> grads_;
  // Their bytes in the process's model-state ledger (common/model_state_memory.h), on the device
  // as on the host; activations and scratch are not model state.
  TrackedBytes params_counted_;
  TrackedBytes grads_counted_;
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
  // cuBLAS's scratch memory, ours rather than its internal pool's so that the GEMMs in a graph
  // read a buffer that outlives the graph, and eager and graphed steps pick the same algorithms.
  cuda::DeviceBuffer<std::byte> cublas_workspace_;
  std::list<StepGraph> step_graphs_;  // most recently used first
  std::size_t graphs_captured_ = 0;
  // Last, so destroyed first: cuBLAS's handle, then the stream, which waits for its work
  // (graph launches included) before any buffer or graph above is freed.
  cuda::Stream stream_;
  cuda::Cublas cublas_;
};

// The stream of a CudaMlp, or null for any other model (a CPU model has none).
cudaStream_t model_stream(Model& model);

}  // namespace gradsync
