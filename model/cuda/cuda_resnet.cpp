#include "model/cuda/cuda_resnet.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "common/error.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/cuda_device.h"

namespace gradsync {

using resnet::ConvShape;

namespace {

// cuBLAS's recommended workspace for Hopper, as the CUDA MLP's.
constexpr std::size_t kCublasWorkspaceBytes = std::size_t{32} << 20;

}  // namespace

// A convolution and the batch norm after it: one layer of params(), one range for the buckets,
// as the CPU ResNet's ConvBn.
struct CudaResNet::ConvBn {
  ConvShape conv;
  std::size_t weight = 0;             // W [Cout x K] in params()
  std::size_t gamma = 0;              // gamma, then beta, C each, after W
  std::size_t running = 0;            // running mean, then running variance, C each, in buffers()
  std::size_t layer = 0;              // index into layers()
  cuda::DeviceBuffer<float> z;        // the convolution's output, which the norm's backward reads
  cuda::DeviceBuffer<float> out;      // relu(bn(z)) for the stem and conv1; empty for the others
  cuda::DeviceBuffer<float> factors;  // mean, scale, shift, a, b, c: C each
  cuda::DeviceBuffer<double> invstd;  // C
  cuda::DeviceBuffer<double> sums;    // 2C: the statistics of forward, then of backward
  std::int64_t count = 0;             // values per channel of the last forward, every rank's

  int channels() const { return conv.out_channels; }
  kernels::BnFactors bn() const {
    const auto c = static_cast<std::size_t>(channels());
    float* f = factors.data();
    return {f, invstd.data(), f + c, f + 2 * c, f + 3 * c, f + 4 * c, f + 5 * c};
  }
};

struct CudaResNet::Block {
  ConvBn conv1, conv2;
  std::optional<ConvBn> down;     // the projection shortcut; none: the identity
  cuda::DeviceBuffer<float> out;  // relu(bn2(z2) + shortcut(x))
};

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

void CudaResNet::gemm(cublasOperation_t a_op, cublasOperation_t b_op, int m, int n, int k,
                      const float* a, int lda, const float* b, int ldb, float beta, float* c,
                      int ldc) {
  const float one = 1.0f;
  GRADSYNC_CUBLAS_CHECK(
      cublasSgemm(cublas_.get(), a_op, b_op, m, n, k, &one, a, lda, b, ldb, &beta, c, ldc));
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

void CudaResNet::conv_forward(ConvBn& layer, int batch, const float* x, bool training) {
  const ConvShape& s = layer.conv;
  const int c = s.out_channels, k = s.k();
  const std::int64_t pixels = s.out_pixels(batch);
  GRADSYNC_CUDA_CHECK(kernels::im2col(s, batch, x, col_.data(), stream_.get()));
  // Z [Cout x P] = W [Cout x K] * col [K x P].
  gemm(CUBLAS_OP_N, CUBLAS_OP_N, c, static_cast<int>(pixels), k, params_.data() + layer.weight, c,
       col_.data(), k, 0.0f, layer.z.data(), c);
  const float* gamma = params_.data() + layer.gamma;
  const float* beta = gamma + c;
  float* running_mean = running_.data() + layer.running;
  float* running_var = running_mean + c;
  if (training) {
    GRADSYNC_CHECK(pixels > 1, "batch norm in training needs more than one value per channel");
    GRADSYNC_CUDA_CHECK(
        kernels::channel_sums(c, pixels, layer.z.data(), layer.sums.data(), stream_.get()));
    // SyncBatchNorm: the sums of every rank's batch replace this rank's.
    layer.count =
        sync_->active() ? sync_->forward(c, pixels, layer.sums.data(), stream_.get()) : pixels;
    GRADSYNC_CUDA_CHECK(kernels::bn_train_statistics(c, layer.sums.data(), layer.count, gamma, beta,
                                                     running_mean, running_var, layer.bn(),
                                                     stream_.get()));
  } else {
    GRADSYNC_CUDA_CHECK(kernels::bn_eval_statistics(c, gamma, beta, running_mean, running_var,
                                                    layer.bn(), stream_.get()));
  }
  if (layer.out.size() > 0) {
    GRADSYNC_CUDA_CHECK(kernels::bn_apply(c, pixels, layer.z.data(), layer.bn(), true,
                                          layer.out.data(), stream_.get()));
  }
}

void CudaResNet::forward(int batch, bool training) {
  conv_forward(*stem_, batch, input_.data(), training);
  const float* x = stem_->out.data();
  // Batch norms in layers() order, as the CPU's.
  for (Block& b : blocks_) {
    conv_forward(b.conv1, batch, x, training);
    conv_forward(b.conv2, batch, b.conv1.out.data(), training);
    const int c = b.conv2.channels();
    const std::int64_t pixels = b.conv2.conv.out_pixels(batch);
    if (b.down) {
      conv_forward(*b.down, batch, x, training);
      GRADSYNC_CUDA_CHECK(kernels::bn_bn_add_relu(c, pixels, b.conv2.z.data(), b.conv2.bn(),
                                                  b.down->z.data(), b.down->bn(), b.out.data(),
                                                  stream_.get()));
    } else {
      GRADSYNC_CUDA_CHECK(kernels::bn_add_relu(c, pixels, b.conv2.z.data(), b.conv2.bn(), x,
                                               b.out.data(), stream_.get()));
    }
    x = b.out.data();
  }
  const ConvShape& last = blocks_.back().conv2.conv;
  const int hw = last.out_h * last.out_w, c = fc_in_, classes = shape_.classes;
  GRADSYNC_CUDA_CHECK(kernels::average_pool(c, hw, batch, x, pooled_.data(), stream_.get()));
  // logits [classes x B] = W [classes x C] * pooled [C x B] + b, as the MLP's layers.
  gemm(CUBLAS_OP_N, CUBLAS_OP_N, classes, batch, c, params_.data() + fc_weight_, classes,
       pooled_.data(), c, 0.0f, logits_.data(), classes);
  GRADSYNC_CUDA_CHECK(kernels::add_bias(logits_.data(), params_.data() + fc_bias_, classes, batch,
                                        false, stream_.get()));
}

void CudaResNet::loss(int batch, const float* grad_scale) {
  // Labels are the batch's own (indices null, first 0: column j reads labels_[j]).
  GRADSYNC_CUDA_CHECK(
      kernels::softmax_cross_entropy(logits_.data(), shape_.classes, batch, labels_.data(), nullptr,
                                     0, grad_scale != nullptr ? *grad_scale : 1.0f,
                                     grad_scale != nullptr ? d_logits_.data() : nullptr,
                                     sample_loss_.data(), sample_correct_.data(), stream_.get()));
  GRADSYNC_CUDA_CHECK(kernels::add_loss_totals(sample_loss_.data(), sample_correct_.data(), batch,
                                               totals_.data(), stream_.get()));
}

kernels::LossTotals CudaResNet::read_totals() {
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(host_totals_.data(), totals_.data(),
                                      sizeof(kernels::LossTotals), cudaMemcpyDeviceToHost,
                                      stream_.get()));
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  return *host_totals_.data();
}

void CudaResNet::layer_ready(std::size_t layer) {
  if (!grad_ready_) return;
  // Finished, not only enqueued (see the header): the consumer may read grads() on any stream.
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  const ResNet::Layer& range = layers()[layer];
  grad_ready_(range.begin, range.end);
}

void CudaResNet::bn_backward(ConvBn& layer, int batch, const float* g, const float* relu_out,
                             float* g_z, bool accumulate) {
  const int c = layer.channels();
  const std::int64_t pixels = layer.conv.out_pixels(batch);
  const kernels::BnFactors f = layer.bn();
  GRADSYNC_CUDA_CHECK(kernels::bn_backward_sums(c, pixels, g, relu_out, layer.z.data(), f.mean,
                                                layer.sums.data(), stream_.get()));
  float* g_gamma = grads_.data() + layer.gamma;
  GRADSYNC_CUDA_CHECK(kernels::bn_backward_factors(c, layer.sums.data(), pixels,
                                                   params_.data() + layer.gamma, g_gamma,
                                                   g_gamma + c, accumulate, f, stream_.get()));
  if (sync_->active()) {
    // gamma's and beta's gradients stay this rank's; dz's factors take every rank's sums.
    const float* reduced = sync_->backward(c, pixels, layer.count, layer.sums.data(),
                                           layer.invstd.data(), stream_.get());
    GRADSYNC_CUDA_CHECK(kernels::bn_backward_factors_reduced(
        c, reduced, params_.data() + layer.gamma, f, stream_.get()));
  }
  GRADSYNC_CUDA_CHECK(
      kernels::bn_backward_apply(c, pixels, g, relu_out, layer.z.data(), f, g_z, stream_.get()));
}

void CudaResNet::conv_backward(ConvBn& layer, int batch, const float* x, const float* g_z,
                               float* g_x, bool add, bool accumulate) {
  const ConvShape& s = layer.conv;
  const int c = s.out_channels, k = s.k();
  const int pixels = static_cast<int>(s.out_pixels(batch));
  // col is recomputed rather than kept per layer from forward (K times the activation).
  GRADSYNC_CUDA_CHECK(kernels::im2col(s, batch, x, col_.data(), stream_.get()));
  // dW [Cout x K] = dZ [Cout x P] * col [K x P]^T; beta 1 adds to earlier micro-batches.
  gemm(CUBLAS_OP_N, CUBLAS_OP_T, c, k, pixels, g_z, c, col_.data(), k, accumulate ? 1.0f : 0.0f,
       grads_.data() + layer.weight, c);
  if (g_x == nullptr) return;
  // dcol [K x P] = W^T [K x Cout] * dZ [Cout x P], then each input element gathers its entries.
  gemm(CUBLAS_OP_T, CUBLAS_OP_N, k, pixels, c, params_.data() + layer.weight, c, g_z, c, 0.0f,
       dcol_.data(), k);
  GRADSYNC_CUDA_CHECK(kernels::col2im(s, batch, dcol_.data(), g_x, add, stream_.get()));
}

void CudaResNet::backward(int batch, bool accumulate) {
  // The linear layer, as the CUDA MLP's, then the pool's gradient spread over the pixels.
  const int classes = shape_.classes, c = fc_in_;
  gemm(CUBLAS_OP_N, CUBLAS_OP_T, classes, c, batch, d_logits_.data(), classes, pooled_.data(), c,
       accumulate ? 1.0f : 0.0f, grads_.data() + fc_weight_, classes);
  GRADSYNC_CUDA_CHECK(kernels::bias_gradient(d_logits_.data(), classes, batch,
                                             grads_.data() + fc_bias_, accumulate, stream_.get()));
  layer_ready(layers().size() - 1);
  gemm(CUBLAS_OP_T, CUBLAS_OP_N, c, batch, classes, params_.data() + fc_weight_, classes,
       d_logits_.data(), classes, 0.0f, d_pooled_.data(), c);
  const ConvShape& last = blocks_.back().conv2.conv;
  const int hw = last.out_h * last.out_w;
  // The CPU's four rotating gradient tensors, in the same roles (ResNet::backward): `at` holds
  // the gradient of the current block's output; the others take dz of a norm, the gradient of
  // conv1's output and (projection shortcut) the gradient of the block's input. An identity
  // block's input gradient builds up in place of its output gradient, once the norms read it.
  int at = 0;
  GRADSYNC_CUDA_CHECK(kernels::average_pool_backward(c, hw, batch, d_pooled_.data(),
                                                     grad_work_[at].data(), stream_.get()));
  for (std::size_t i = blocks_.size(); i-- > 0;) {
    Block& b = blocks_[i];
    const float* x = i > 0 ? blocks_[i - 1].out.data() : stem_->out.data();
    float* g_out = grad_work_[at].data();
    float* dz = grad_work_[(at + 1) % 4].data();
    float* g_mid = grad_work_[(at + 2) % 4].data();
    float* g_in = g_out;
    // relu(bn2(z2) + shortcut): both branches get dy where the output was positive.
    GRADSYNC_CUDA_CHECK(kernels::relu_mask(b.conv2.conv.out_pixels(batch) * b.conv2.channels(),
                                           b.out.data(), g_out, stream_.get()));
    if (b.down) {
      at = (at + 3) % 4;
      g_in = grad_work_[at].data();
      bn_backward(*b.down, batch, g_out, nullptr, dz, accumulate);
      conv_backward(*b.down, batch, x, dz, g_in, false, accumulate);
      layer_ready(b.down->layer);
    }
    bn_backward(b.conv2, batch, g_out, nullptr, dz, accumulate);
    conv_backward(b.conv2, batch, b.conv1.out.data(), dz, g_mid, false, accumulate);
    layer_ready(b.conv2.layer);
    bn_backward(b.conv1, batch, g_mid, b.conv1.out.data(), g_mid, accumulate);
    // Onto the shortcut's gradient: dy itself (identity) or the projection's.
    conv_backward(b.conv1, batch, x, g_mid, g_in, true, accumulate);
    layer_ready(b.conv1.layer);
  }
  float* g = grad_work_[at].data();
  bn_backward(*stem_, batch, g, stem_->out.data(), g, accumulate);
  // Nobody needs the gradient with respect to the image.
  conv_backward(*stem_, batch, input_.data(), g, nullptr, false, accumulate);
  layer_ready(stem_->layer);
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
  // A throwaway train-mode step moves the running statistics: kept aside and put back.
  const std::vector<float> kept(buffers_host_.data(), buffers_host_.data() + buffers_host_.size());
  GradReadyCallback held = std::exchange(grad_ready_, nullptr);
  // Nor does it reach the other ranks: a throwaway step's statistics are this rank's own.
  BatchStatsReducer reducer = sync_->take_reducer();
  std::vector<std::int64_t> first(
      static_cast<std::size_t>(std::min<std::int64_t>(max_batch_, data.size)));
  std::iota(first.begin(), first.end(), std::int64_t{0});
  try {
    forward_backward(data, first);
  } catch (...) {
    grad_ready_ = std::move(held);
    sync_->set_reducer(std::move(reducer));
    std::copy(kept.begin(), kept.end(), buffers_host_.data());
    throw;
  }
  grad_ready_ = std::move(held);
  sync_->set_reducer(std::move(reducer));
  std::copy(kept.begin(), kept.end(), buffers_host_.data());
  cuda::DeviceGuard on(device_);
  grads_.zero(stream_.get());
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

}  // namespace gradsync
