#include "model/cuda/cuda_mlp.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "common/error.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/cuda_device.h"
#include "model/cuda/device_sgd.h"

namespace gradsync {
namespace {

// A model sees its training set and its test set; a third would evict the older one.
constexpr std::size_t kCachedDatasets = 2;
// Training sees the full batch and, at each epoch's end, a shorter tail.
constexpr std::size_t kCachedGraphs = 2;
// cuBLAS's recommended workspace for Hopper (4 MiB suffices before it); a fixed cost per model.
constexpr std::size_t kCublasWorkspaceBytes = std::size_t{32} << 20;

}  // namespace

CudaMlp::CudaMlp(std::vector<int> widths, int max_batch, int device)
    : widths_(std::move(widths)),
      max_batch_(max_batch),
      device_(device),
      datasets_(kCachedDatasets, widths_.empty() ? 0 : widths_.back()) {
  GRADSYNC_CHECK(max_batch_ >= 1, "max_batch must be positive");
  // The host model defines the layout (and checks the widths): both models index the flat
  // buffers the same way by construction, not by keeping two copies of the arithmetic.
  layers_ = Mlp::layout(widths_);
  cuda::require_device(device_, "CudaMlp");
  cuda::DeviceGuard on(device_);
  stream_ = cuda::make_stream();
  // Plain FP32 products (no TF32 tensor-op shortcut), as PyTorch's default and as the CPU.
  cublas_ = cuda::make_cublas(stream_.get());
  // After make_cublas's cublasSetStream, which resets the workspace to cuBLAS's own pool (so it
  // must not be called again on this handle).
  cublas_workspace_ = cuda::DeviceBuffer<std::byte>(kCublasWorkspaceBytes);
  GRADSYNC_CUBLAS_CHECK(
      cublasSetWorkspace(cublas_.get(), cublas_workspace_.data(), cublas_workspace_.bytes()));

  const std::size_t count = layers_.back().end();
  params_ = cuda::DeviceBuffer<float>(count);
  grads_ = cuda::DeviceBuffer<float>(count);
  params_counted_ = TrackedBytes(ModelState::kParams, params_.bytes());
  grads_counted_ = TrackedBytes(ModelState::kGrads, grads_.bytes());
  params_.zero(stream_.get());
  grads_.zero(stream_.get());
  const auto batch = static_cast<std::size_t>(max_batch_);
  for (int width : widths_) {
    activations_.emplace_back(static_cast<std::size_t>(width) * batch);
  }
  for (std::size_t l = 1; l < widths_.size(); ++l) {
    deltas_.emplace_back(static_cast<std::size_t>(widths_[l]) * batch);
  }
  indices_ = cuda::DeviceBuffer<std::int64_t>(batch);
  staged_indices_ = cuda::PinnedBuffer<std::int64_t>(batch);
  sample_loss_ = cuda::DeviceBuffer<double>(batch);
  sample_correct_ = cuda::DeviceBuffer<int>(batch);
  totals_ = cuda::DeviceBuffer<kernels::LossTotals>(1);
  host_totals_ = cuda::PinnedBuffer<kernels::LossTotals>(1);
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

// The stream is the last member: destroyed first, it waits for its work before the buffers
// that work reads are freed (also when the constructor failed after enqueueing the memsets).
CudaMlp::~CudaMlp() = default;

void CudaMlp::init_params(std::uint64_t seed) {
  Mlp host(widths_, 1);
  host.init_params(seed);
  copy_params_from_host(host.params());
}

void CudaMlp::copy_params_to_host(std::span<float> out) {
  params_.copy_to_host(out, stream_.get(), "copy_params_to_host");
}

void CudaMlp::copy_params_from_host(std::span<const float> in) {
  params_.copy_from_host(in, stream_.get(), "copy_params_from_host");
}

void CudaMlp::copy_grads_to_host(std::span<float> out) {
  grads_.copy_to_host(out, stream_.get(), "copy_grads_to_host");
}

void CudaMlp::gemm(cublasOperation_t a_op, cublasOperation_t b_op, int m, int n, int k,
                   const float* a, int lda, const float* b, int ldb, float beta, float* c,
                   int ldc) {
  const float one = 1.0f;
  GRADSYNC_CUBLAS_CHECK(
      cublasSgemm(cublas_.get(), a_op, b_op, m, n, k, &one, a, lda, b, ldb, &beta, c, ldc));
}

void CudaMlp::forward(const cuda::DeviceDataset& data, const std::int64_t* indices,
                      std::int64_t first, int batch) {
  GRADSYNC_CUDA_CHECK(kernels::gather_columns(data.features.data(), data.dim, indices, first, batch,
                                              activations_.front().data(), stream_.get()));
  const int last = static_cast<int>(layers_.size()) - 1;
  for (int l = 0; l <= last; ++l) {
    const LayerRange& r = layers_[l];
    // Z (out x batch) = W (out x in) * X (in x batch), all column-major.
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, r.out, batch, r.in, params_.data() + r.weight_offset, r.out,
         activations_[l].data(), r.in, 0.0f, activations_[l + 1].data(), r.out);
    GRADSYNC_CUDA_CHECK(kernels::add_bias(activations_[l + 1].data(),
                                          params_.data() + r.bias_offset, r.out, batch, l < last,
                                          stream_.get()));
  }
}

void CudaMlp::loss(const cuda::DeviceDataset& data, const std::int64_t* indices, std::int64_t first,
                   int batch, const float* grad_scale) {
  GRADSYNC_CUDA_CHECK(kernels::softmax_cross_entropy(
      activations_.back().data(), widths_.back(), batch, data.labels.data(), indices, first,
      grad_scale != nullptr ? *grad_scale : 1.0f,
      grad_scale != nullptr ? deltas_.back().data() : nullptr, sample_loss_.data(),
      sample_correct_.data(), stream_.get()));
  GRADSYNC_CUDA_CHECK(kernels::add_loss_totals(sample_loss_.data(), sample_correct_.data(), batch,
                                               totals_.data(), stream_.get()));
}

void CudaMlp::enqueue_totals_readback() {
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(host_totals_.data(), totals_.data(),
                                      sizeof(kernels::LossTotals), cudaMemcpyDeviceToHost,
                                      stream_.get()));
}

kernels::LossTotals CudaMlp::read_totals() {
  enqueue_totals_readback();
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  return *host_totals_.data();
}

int CudaMlp::check_batch(const Dataset& data, std::span<const std::int64_t> indices) const {
  const int batch = static_cast<int>(indices.size());
  GRADSYNC_CHECK(batch >= 1 && batch <= max_batch_, "batch size outside [1, max_batch]");
  GRADSYNC_CHECK(data.dim == widths_.front(), "dataset width does not match the model input");
  for (const std::int64_t i : indices) {
    GRADSYNC_CHECK(i >= 0 && i < data.size, "batch index outside the dataset");
  }
  return batch;
}

const cuda::DeviceDataset& CudaMlp::stage(const Dataset& data,
                                          std::span<const std::int64_t> indices) {
  const cuda::DeviceDataset& device_data = datasets_.get(data, stream_.get());
  // The pinned copy is free to overwrite: the previous step's upload finished before that step
  // returned (every step synchronises on its loss).
  std::memcpy(staged_indices_.data(), indices.data(), indices.size_bytes());
  return device_data;
}

void CudaMlp::enqueue_step(const cuda::DeviceDataset& data, int batch, float grad_scale,
                           bool accumulate) {
  // From the fixed pinned buffer, so that a graph can hold this copy: each replay uploads
  // whatever stage() put there for that step.
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(indices_.data(), staged_indices_.data(),
                                      static_cast<std::size_t>(batch) * sizeof(std::int64_t),
                                      cudaMemcpyHostToDevice, stream_.get()));
  totals_.zero(stream_.get());
  forward(data, indices_.data(), 0, batch);
  loss(data, indices_.data(), 0, batch, &grad_scale);

  const float beta = accumulate ? 1.0f : 0.0f;
  for (int l = static_cast<int>(layers_.size()) - 1; l >= 0; --l) {
    const LayerRange& r = layers_[l];
    const float* delta = deltas_[l].data();
    const float* in = activations_[l].data();
    // dW (out x in) = delta (out x batch) * X^T (batch x in); beta 1 adds to the micro-batches
    // accumulated so far.
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, r.out, r.in, batch, delta, r.out, in, r.in, beta,
         grads_.data() + r.weight_offset, r.out);
    GRADSYNC_CUDA_CHECK(kernels::bias_gradient(delta, r.out, batch, grads_.data() + r.bias_offset,
                                               accumulate, stream_.get()));
    // Enqueued, not finished: see the header on how a consumer orders itself after stream().
    if (grad_ready_) grad_ready_(r.weight_offset, r.end());
    if (l == 0) break;  // nobody needs the gradient with respect to the input
    // dX (in x batch) = W^T (in x out) * delta (out x batch), then ReLU's derivative.
    float* prev = deltas_[l - 1].data();
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, r.in, batch, r.out, params_.data() + r.weight_offset, r.out,
         delta, r.out, 0.0f, prev, r.in);
    GRADSYNC_CUDA_CHECK(kernels::relu_backward(
        prev, in, static_cast<std::size_t>(r.in) * static_cast<std::size_t>(batch), stream_.get()));
  }
}

double CudaMlp::forward_backward(const Dataset& data, std::span<const std::int64_t> indices,
                                 float grad_scale, bool accumulate) {
  const int batch = check_batch(data, indices);
  cuda::DeviceGuard on(device_);
  const cuda::DeviceDataset& device_data = stage(data, indices);
  enqueue_step(device_data, batch, grad_scale, accumulate);
  // One synchronisation per step: the loss must reach the host anyway, and waiting for the
  // whole stream makes grads() final for whatever reads it next, on any stream.
  return read_totals().loss_sum / batch;
}

double CudaMlp::train_step(const Dataset& data, std::span<const std::int64_t> indices,
                           DeviceSgd& sgd) {
  GRADSYNC_CHECK(!grad_ready_,
                 "train_step: a gradient-ready callback is set, and a CUDA graph cannot call it "
                 "(use forward_backward)");
  GRADSYNC_CHECK(sgd.device() == device_ && sgd.size() == param_count(),
                 "train_step: the optimizer's device or size is not this model's");
  const int batch = check_batch(data, indices);
  cuda::DeviceGuard on(device_);
  const cuda::DeviceDataset& device_data = stage(data, indices);
  if (sgd.steps_taken() == 0) {
    // The first update initialises the momentum buffer (keep = 0); a graph of it would replay
    // that on every later step, so it runs eagerly, the same work in the same order.
    enqueue_step(device_data, batch, 1.0f, false);
    sgd.enqueue_update(params(), grads(), stream_.get());
    enqueue_totals_readback();
  } else {
    GRADSYNC_CUDA_CHECK(cudaGraphLaunch(step_graph(device_data, batch, sgd), stream_.get()));
  }
  // One synchronisation per step, as forward_backward: the loss reaches host_totals_, and the
  // update is done for whatever reads params() or the momentum next.
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  sgd.count_step();
  return host_totals_.data()->loss_sum / batch;
}

cudaGraphExec_t CudaMlp::step_graph(const cuda::DeviceDataset& data, int batch, DeviceSgd& sgd) {
  const SgdOptions& o = sgd.options();
  const StepGraphKey key{.features = data.features.data(),
                         .labels = data.labels.data(),
                         .batch = batch,
                         .momentum = sgd.momentum_buffer(),
                         .lr = o.lr_at(sgd.steps_taken()),
                         .mu = o.momentum,
                         .weight_decay = o.weight_decay};
  for (auto it = step_graphs_.begin(); it != step_graphs_.end(); ++it) {
    if (it->key == key) {
      step_graphs_.splice(step_graphs_.begin(), step_graphs_, it);
      return step_graphs_.front().exec.get();
    }
  }
  // Capture records without running: the stream is idle (every step ends synchronised), and
  // the graph's first launch does this step's work.
  cuda::GraphExec exec = cuda::capture_graph(stream_.get(), [&] {
    enqueue_step(data, batch, 1.0f, false);
    sgd.enqueue_update(params(), grads(), stream_.get());
    enqueue_totals_readback();
  });
  ++graphs_captured_;
  if (step_graphs_.size() >= kCachedGraphs) step_graphs_.pop_back();
  step_graphs_.push_front(StepGraph{key, std::move(exec)});
  return step_graphs_.front().exec.get();
}

Evaluation CudaMlp::evaluate(const Dataset& data) {
  GRADSYNC_CHECK(data.dim == widths_.front(), "dataset width does not match the model input");
  Evaluation result;
  result.samples = data.size;
  if (data.size == 0) return result;
  cuda::DeviceGuard on(device_);
  const cuda::DeviceDataset& device_data = datasets_.get(data, stream_.get());
  totals_.zero(stream_.get());
  for (std::int64_t start = 0; start < data.size; start += max_batch_) {
    const int batch = static_cast<int>(std::min<std::int64_t>(max_batch_, data.size - start));
    forward(device_data, nullptr, start, batch);
    loss(device_data, nullptr, start, batch, nullptr);
  }
  const kernels::LossTotals totals = read_totals();
  result.loss = totals.loss_sum / static_cast<double>(data.size);
  result.accuracy = static_cast<double>(totals.correct) / static_cast<double>(data.size);
  return result;
}

void CudaMlp::prepare(const Dataset& data) {
  if (data.size == 0) return;
  GradReadyCallback held = std::exchange(grad_ready_, nullptr);
  std::vector<std::int64_t> first(static_cast<std::size_t>(std::min<std::int64_t>(max_batch_, data.size)));
  std::iota(first.begin(), first.end(), std::int64_t{0});
  try {
    forward_backward(data, first);
  } catch (...) {
    grad_ready_ = std::move(held);
    throw;
  }
  grad_ready_ = std::move(held);
  // Every step overwrites grads() before anything reads them; zeroed all the same, so no
  // reader ever sees this step's values.
  cuda::DeviceGuard on(device_);
  grads_.zero(stream_.get());
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

cudaStream_t model_stream(Model& model) {
  auto* gpu = dynamic_cast<CudaMlp*>(&model);
  return gpu != nullptr ? gpu->stream() : nullptr;
}

}  // namespace gradsync
