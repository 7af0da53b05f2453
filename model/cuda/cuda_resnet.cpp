#include "model/cuda/cuda_resnet.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "common/error.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/cuda_device.h"
#include "model/cuda/cuda_resnet_layers.h"

namespace gradsync {

using resnet::ConvShape;

namespace {

// cuBLAS's recommended workspace for Hopper, as the CUDA MLP's.
constexpr std::size_t kCublasWorkspaceBytes = std::size_t{32} << 20;

}  // namespace

CudaResNet::CudaResNet(ResNetShape shape, int max_batch, int device)
    : shape_(shape), max_batch_(max_batch), device_(device) {
  GRADSYNC_CHECK(max_batch_ >= 1, "max_batch must be positive");
  // The host model checks the shape and defines the layout; the walk below repeats the CPU
  // constructor's order and is checked against it range by range.
  layout_ = std::make_unique<ResNet>(shape_, 1);
  cuda::require_device(device_, "CudaResNet");
  cuda::DeviceGuard on(device_);
  stream_ = cuda::make_stream();
  // Plain FP32 products (no TF32 tensor-op shortcut), as PyTorch's default and as the CPU.
  cublas_ = cuda::make_cublas(stream_.get());
  // After make_cublas's cublasSetStream, which resets the workspace to cuBLAS's own pool.
  cublas_workspace_ = cuda::DeviceBuffer<std::byte>(kCublasWorkspaceBytes);
  GRADSYNC_CUBLAS_CHECK(
      cublasSetWorkspace(cublas_.get(), cublas_workspace_.data(), cublas_workspace_.bytes()));

  const std::vector<ResNet::Layer>& layers = layout_->layers();
  std::size_t param = 0, buffer = 0, largest = 0, col = 0;
  auto conv_bn = [&](int cin, int cout, int kernel, int stride, int h, int w, bool own_out) {
    ConvBn layer;
    layer.conv = ConvShape::make(cin, cout, kernel, stride, h, w);
    layer.weight = param;
    layer.gamma = param + layer.conv.weight_count();
    param = layer.gamma + 2 * static_cast<std::size_t>(cout);
    layer.running = buffer;
    buffer += 2 * static_cast<std::size_t>(cout);
    const auto size = static_cast<std::size_t>(layer.conv.out_pixels(max_batch_) * cout);
    layer.z = cuda::DeviceBuffer<float>(size);
    if (own_out) layer.out = cuda::DeviceBuffer<float>(size);
    layer.factors = cuda::DeviceBuffer<float>(6 * static_cast<std::size_t>(cout));
    layer.invstd = cuda::DeviceBuffer<double>(static_cast<std::size_t>(cout));
    layer.sums = cuda::DeviceBuffer<double>(2 * static_cast<std::size_t>(cout));
    largest = std::max(largest, size);
    col = std::max(col, static_cast<std::size_t>(layer.conv.out_pixels(max_batch_)) *
                            static_cast<std::size_t>(layer.conv.k()));
    return layer;
  };
  std::size_t next_layer = 0;
  auto check_range = [&](ConvBn& layer) {
    GRADSYNC_CHECK(next_layer < layers.size() && layers[next_layer].begin == layer.weight &&
                       layers[next_layer].end == layer.gamma + 2 * layer.conv.out_channels,
                   "CudaResNet: layer layout differs from the host ResNet's");
    layer.layer = next_layer++;
  };
  stem_ = std::make_unique<ConvBn>(
      conv_bn(shape_.channels, shape_.stage_width, 3, 1, shape_.height, shape_.width, true));
  check_range(*stem_);
  int cin = shape_.stage_width, h = stem_->conv.out_h, w = stem_->conv.out_w;
  for (int stage = 0; stage < 3; ++stage) {
    const int cout = shape_.stage_width << stage;
    for (int b = 0; b < shape_.blocks_per_stage; ++b) {
      const int stride = stage > 0 && b == 0 ? 2 : 1;
      Block block;
      block.conv1 = conv_bn(cin, cout, 3, stride, h, w, true);
      check_range(block.conv1);
      const int oh = block.conv1.conv.out_h, ow = block.conv1.conv.out_w;
      block.conv2 = conv_bn(cout, cout, 3, 1, oh, ow, false);
      check_range(block.conv2);
      if (stride != 1 || cin != cout) {
        block.down.emplace(conv_bn(cin, cout, 1, stride, h, w, false));
        check_range(*block.down);
      }
      block.out = cuda::DeviceBuffer<float>(block.conv2.z.size());
      blocks_.push_back(std::move(block));
      cin = cout;
      h = oh;
      w = ow;
    }
  }
  fc_in_ = cin;
  fc_weight_ = param;
  fc_bias_ = param + static_cast<std::size_t>(fc_in_) * shape_.classes;
  param = fc_bias_ + static_cast<std::size_t>(shape_.classes);
  GRADSYNC_CHECK(next_layer + 1 == layers.size() && layers.back().begin == fc_weight_ &&
                     layers.back().end == param && param == layout_->param_count() &&
                     buffer == layout_->buffers().size(),
                 "CudaResNet: parameter or buffer layout differs from the host ResNet's");

  params_ = cuda::DeviceBuffer<float>(param);
  grads_ = cuda::DeviceBuffer<float>(param);
  params_counted_ = TrackedBytes(ModelState::kParams, params_.bytes());
  grads_counted_ = TrackedBytes(ModelState::kGrads, grads_.bytes());
  params_.zero(stream_.get());
  grads_.zero(stream_.get());
  running_ = cuda::DeviceBuffer<float>(buffer);
  buffers_host_ = cuda::PinnedBuffer<float>(buffer);
  std::copy(layout_->buffers().begin(), layout_->buffers().end(), buffers_host_.data());

  const auto batch = static_cast<std::size_t>(max_batch_);
  const auto dim = static_cast<std::size_t>(shape_.channels) * shape_.height * shape_.width;
  input_ = cuda::DeviceBuffer<float>(batch * dim);
  staged_input_ = cuda::PinnedBuffer<float>(batch * dim);
  col_ = cuda::DeviceBuffer<float>(col);
  dcol_ = cuda::DeviceBuffer<float>(col);
  // Every gradient tensor of backward fits the largest activation (the stem's).
  for (int i = 0; i < 4; ++i) grad_work_.emplace_back(largest);
  pooled_ = cuda::DeviceBuffer<float>(batch * fc_in_);
  d_pooled_ = cuda::DeviceBuffer<float>(batch * fc_in_);
  logits_ = cuda::DeviceBuffer<float>(batch * shape_.classes);
  d_logits_ = cuda::DeviceBuffer<float>(batch * shape_.classes);
  labels_ = cuda::DeviceBuffer<std::int32_t>(batch);
  staged_labels_ = cuda::PinnedBuffer<std::int32_t>(batch);
  sample_loss_ = cuda::DeviceBuffer<double>(batch);
  sample_correct_ = cuda::DeviceBuffer<int>(batch);
  totals_ = cuda::DeviceBuffer<kernels::LossTotals>(1);
  host_totals_ = cuda::PinnedBuffer<kernels::LossTotals>(1);
  augment_scratch_.resize(dim);
  // The widest norm is the last stage's (fc_in_ channels).
  sync_ = std::make_unique<cuda::BatchStatsExchange>(fc_in_);
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

// The stream is the last member but one: destroyed first after cuBLAS's handle, it waits for
// its work before the buffers that work reads are freed.
CudaResNet::~CudaResNet() = default;

void CudaResNet::set_batch_stats_reducer(BatchStatsReducer reducer) {
  sync_->set_reducer(std::move(reducer));
}

void CudaResNet::init_params(std::uint64_t seed) {
  layout_->init_params(seed);
  copy_params_from_host(layout_->params());
  const std::span<const float> buffers = layout_->buffers();
  std::copy(buffers.begin(), buffers.end(), buffers_host_.data());
}

void CudaResNet::copy_params_to_host(std::span<float> out) {
  params_.copy_to_host(out, stream_.get(), "copy_params_to_host");
}

void CudaResNet::copy_params_from_host(std::span<const float> in) {
  params_.copy_from_host(in, stream_.get(), "copy_params_from_host");
}

void CudaResNet::copy_grads_to_host(std::span<float> out) {
  grads_.copy_to_host(out, stream_.get(), "copy_grads_to_host");
}

int CudaResNet::check_batch(const Dataset& data, std::span<const std::int64_t> indices) const {
  const int batch = static_cast<int>(indices.size());
  GRADSYNC_CHECK(batch >= 1 && batch <= max_batch_, "batch size outside [1, max_batch]");
  GRADSYNC_CHECK(data.dim == shape_.channels * shape_.height * shape_.width,
                 "dataset width does not match the resnet's C x H x W");
  for (const std::int64_t i : indices) {
    GRADSYNC_CHECK(i >= 0 && i < data.size, "batch index outside the dataset");
  }
  return batch;
}

void CudaResNet::upload_batch(const Dataset& data, std::span<const std::int64_t> indices,
                              bool augment) {
  // The staging buffers are about to be overwritten: the previous upload from them must have
  // landed (evaluate() uploads chunk after chunk without reading anything back in between).
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  const int c = shape_.channels;
  Augmentation augmentation = augmentation_;
  augmentation.enabled = augment && augmentation_.enabled;
  const ImageShape image_shape{.height = shape_.height, .width = shape_.width, .channels = c};
  const auto dim = static_cast<std::size_t>(data.dim);
  for (std::size_t j = 0; j < indices.size(); ++j) {
    // ResNet::gather's steps, so the GPU trains on the CPU's images.
    gather_training_image(data.sample(indices[j]), {staged_input_.data() + j * dim, dim},
                          image_shape, augmentation, epoch_, indices[j], augment_scratch_);
    const int label = data.labels[static_cast<std::size_t>(indices[j])];
    GRADSYNC_CHECK(label >= 0 && label < shape_.classes, "label outside the model's classes");
    staged_labels_.data()[j] = label;
  }
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(input_.data(), staged_input_.data(),
                                      indices.size() * dim * sizeof(float), cudaMemcpyHostToDevice,
                                      stream_.get()));
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(labels_.data(), staged_labels_.data(),
                                      indices.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                                      stream_.get()));
}

void CudaResNet::upload_running_statistics() {
  // The host array is the truth between calls (a strategy or a resume may have written it).
  if (running_.size() == 0) return;
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(running_.data(), buffers_host_.data(), running_.bytes(),
                                      cudaMemcpyHostToDevice, stream_.get()));
}

double CudaResNet::forward_backward(const Dataset& data, std::span<const std::int64_t> indices,
                                    float grad_scale, bool accumulate) {
  const int batch = check_batch(data, indices);
  cuda::DeviceGuard on(device_);
  upload_batch(data, indices, true);
  upload_running_statistics();
  totals_.zero(stream_.get());
  forward(batch, true);
  // The moved statistics back to the host array; landed before this call returns (read_totals
  // synchronises the stream, as does the first layer_ready).
  if (running_.size() > 0) {
    GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(buffers_host_.data(), running_.data(), running_.bytes(),
                                        cudaMemcpyDeviceToHost, stream_.get()));
  }
  loss(batch, &grad_scale);
  backward(batch, accumulate);
  // One synchronisation per step: grads() final for whatever reads it next, on any stream.
  return read_totals().loss_sum / batch;
}

Evaluation CudaResNet::evaluate(const Dataset& data) {
  GRADSYNC_CHECK(data.dim == shape_.channels * shape_.height * shape_.width,
                 "dataset width does not match the resnet's C x H x W");
  Evaluation result;
  result.samples = data.size;
  if (data.size == 0) return result;
  cuda::DeviceGuard on(device_);
  upload_running_statistics();
  totals_.zero(stream_.get());
  eval_indices_.resize(static_cast<std::size_t>(max_batch_));
  for (std::int64_t start = 0; start < data.size; start += max_batch_) {
    const int batch = static_cast<int>(std::min<std::int64_t>(max_batch_, data.size - start));
    for (int j = 0; j < batch; ++j) eval_indices_[static_cast<std::size_t>(j)] = start + j;
    upload_batch(data, {eval_indices_.data(), static_cast<std::size_t>(batch)}, false);
    forward(batch, false);
    loss(batch, nullptr);
  }
  const kernels::LossTotals totals = read_totals();
  result.loss = totals.loss_sum / static_cast<double>(data.size);
  result.accuracy = static_cast<double>(totals.correct) / static_cast<double>(data.size);
  return result;
}

void CudaResNet::prepare(const Dataset& data) {
  if (data.size == 0) return;
  std::vector<std::int64_t> first(
      static_cast<std::size_t>(std::min<std::int64_t>(max_batch_, data.size)));
  std::iota(first.begin(), first.end(), std::int64_t{0});
  // A throwaway train-mode step: its running statistics are kept aside and put back, its
  // gradients reach no callback, and its batch statistics no other rank (the reducer).
  struct Restore {
    CudaResNet& model;
    std::vector<float> kept;
    GradReadyCallback callback;
    BatchStatsReducer reducer;
    ~Restore() {
      model.grad_ready_ = std::move(callback);
      model.sync_->set_reducer(std::move(reducer));
      std::copy(kept.begin(), kept.end(), model.buffers_host_.data());
    }
  } restore{*this,
            {buffers_host_.data(), buffers_host_.data() + buffers_host_.size()},
            std::exchange(grad_ready_, nullptr),
            sync_->take_reducer()};
  forward_backward(data, first);
  cuda::DeviceGuard on(device_);
  grads_.zero(stream_.get());
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

}  // namespace gradsync
