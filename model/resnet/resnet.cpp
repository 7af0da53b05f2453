#include "model/resnet/resnet.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "common/error.h"
#include "common/random.h"
#include "model/kernels/cpu_kernels.h"

namespace gradsync {

using resnet::BatchNorm;
using resnet::ConvShape;

// A convolution and the batch norm after it: one layer of params(), one range for the buckets.
struct ResNet::ConvBn {
  ConvShape conv;
  std::size_t weight;  // offset of W in params()
  BatchNorm bn;
  std::size_t layer;     // index into layers_
  resnet::FlatBuffer z;  // the convolution's output, which the norm's backward reads
  // relu(bn(z)) for the stem and a block's conv1; empty for the layers whose norm feeds the
  // residual add (conv2, the shortcut), which the block's `out` holds.
  resnet::FlatBuffer out;
};

struct ResNet::Block {
  ConvBn conv1, conv2;
  std::optional<ConvBn> down;  // the projection shortcut; none: the identity
  resnet::FlatBuffer out;      // relu(bn2(z2) + shortcut(x))
};

ResNet::ResNet(ResNetShape shape, int max_batch) : shape_(shape), max_batch_(max_batch) {
  GRADSYNC_CHECK(max_batch_ >= 1, "max_batch must be positive");
  GRADSYNC_CHECK(shape_.channels >= 1 && shape_.height >= 1 && shape_.width >= 1,
                 "resnet input channels, height and width must be positive");
  GRADSYNC_CHECK(shape_.classes >= 2, "resnet needs at least two classes");
  GRADSYNC_CHECK(shape_.blocks_per_stage >= 1, "resnet needs at least one block per stage");
  GRADSYNC_CHECK(shape_.stage_width >= 1, "resnet stage width must be positive");
  std::size_t param = 0, buffer = 0;
  // Appends a layer's ranges: W, then gamma and beta; the running statistics to buffers().
  auto conv_bn = [&](std::string name, int cin, int cout, int kernel, int stride, int h, int w,
                     bool own_out) {
    const ConvShape conv = ConvShape::make(cin, cout, kernel, stride, h, w);
    ConvBn layer{conv,           param, BatchNorm(cout, param + conv.weight_count(), buffer),
                 layers_.size(), {},    {}};
    param = layer.bn.param_end();
    buffer = layer.bn.buffer_end();
    layers_.push_back({std::move(name), layer.weight, param});
    const auto size = static_cast<std::size_t>(conv.out_pixels(max_batch_) * cout);
    layer.z.resize(size);
    if (own_out) layer.out.resize(size);
    scratch_.reserve(conv, max_batch_);
    return layer;
  };
  stem_ = std::make_unique<ConvBn>(conv_bn("conv1", shape_.channels, shape_.stage_width, 3, 1,
                                           shape_.height, shape_.width, true));
  int cin = shape_.stage_width, h = stem_->conv.out_h, w = stem_->conv.out_w;
  std::size_t largest = stem_->z.size();
  for (int stage = 0; stage < 3; ++stage) {
    const int cout = shape_.stage_width << stage;
    for (int b = 0; b < shape_.blocks_per_stage; ++b) {
      const int stride = stage > 0 && b == 0 ? 2 : 1;
      const std::string name = "layer" + std::to_string(stage + 1) + "." + std::to_string(b);
      ConvBn conv1 = conv_bn(name + ".conv1", cin, cout, 3, stride, h, w, true);
      const int oh = conv1.conv.out_h, ow = conv1.conv.out_w;
      ConvBn conv2 = conv_bn(name + ".conv2", cout, cout, 3, 1, oh, ow, false);
      std::optional<ConvBn> down;
      if (stride != 1 || cin != cout) {
        down.emplace(conv_bn(name + ".downsample", cin, cout, 1, stride, h, w, false));
      }
      resnet::FlatBuffer out(conv2.z.size());
      blocks_.push_back(Block{std::move(conv1), std::move(conv2), std::move(down), std::move(out)});
      cin = cout;
      h = oh;
      w = ow;
    }
  }
  fc_in_ = cin;
  fc_weight_ = param;
  fc_bias_ = param + static_cast<std::size_t>(fc_in_) * shape_.classes;
  param = fc_bias_ + static_cast<std::size_t>(shape_.classes);
  layers_.push_back({"fc", fc_weight_, param});

  params_.assign(param, 0.f);
  grads_.assign(param, 0.f);
  buffers_.assign(buffer, 0.f);
  const auto batch = static_cast<std::size_t>(max_batch_);
  input_.resize(batch * shape_.channels * shape_.height * shape_.width);
  pooled_.resize(batch * fc_in_);
  d_pooled_.resize(batch * fc_in_);
  logits_.resize(batch * shape_.classes);
  d_logits_.resize(batch * shape_.classes);
  fc_transposed_.resize(static_cast<std::size_t>(fc_in_) * shape_.classes);
  // Every gradient tensor of backward fits the largest activation: the stem's (stage 1 keeps
  // its size; later stages are smaller).
  grad_work_.assign(4, resnet::FlatBuffer(largest));
  sums_.resize(2 * (static_cast<std::size_t>(shape_.stage_width) << 2));  // 2C, C at most 4w
  batch_labels_.resize(batch);
}

ResNet::~ResNet() = default;

std::size_t ResNet::parameter_count(const ResNetShape& shape) {
  // W, gamma and beta of each conv-norm layer, as the constructor lays them out; then fc.
  auto conv_bn = [](std::size_t cin, std::size_t cout, std::size_t kernel) {
    return cin * cout * kernel * kernel + 2 * cout;
  };
  const auto w = static_cast<std::size_t>(shape.stage_width);
  std::size_t count = conv_bn(static_cast<std::size_t>(shape.channels), w, 3), cin = w;
  for (int stage = 0; stage < 3; ++stage) {
    const std::size_t cout = w << stage;
    for (int b = 0; b < shape.blocks_per_stage; ++b) {
      count += conv_bn(cin, cout, 3) + conv_bn(cout, cout, 3);
      if ((stage > 0 && b == 0) || cin != cout) count += conv_bn(cin, cout, 1);
      cin = cout;
    }
  }
  return count + (cin + 1) * static_cast<std::size_t>(shape.classes);
}

void ResNet::set_conv_chunk_pixels(int pixels) {
  scratch_.chunk_pixels = pixels;
  scratch_.reserve(stem_->conv, max_batch_);
  for (const Block& b : blocks_) {
    scratch_.reserve(b.conv1.conv, max_batch_);
    scratch_.reserve(b.conv2.conv, max_batch_);
    if (b.down) scratch_.reserve(b.down->conv, max_batch_);
  }
}

void ResNet::init_params(std::uint64_t seed) {
  SplitMix64 rng(seed);
  // Layer by layer in forward order, so that the draws do not depend on anything but the shape.
  auto init = [&](const ConvBn& layer) {
    const ConvShape& c = layer.conv;
    // kaiming_normal_(mode="fan_out", nonlinearity="relu"): std = sqrt(2 / fan_out).
    const double std = std::sqrt(2.0 / (double(c.out_channels) * c.kernel * c.kernel));
    for (std::size_t i = 0; i < c.weight_count(); ++i) {
      params_[layer.weight + i] = static_cast<float>(rng.normal() * std);
    }
    layer.bn.init(params_, buffers_);
  };
  init(*stem_);
  for (const Block& b : blocks_) {
    init(b.conv1);
    init(b.conv2);
    if (b.down) init(*b.down);
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(fc_in_));
  for (std::size_t i = fc_weight_; i < params_.size(); ++i) {
    params_[i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
  }
}

void ResNet::gather(const Dataset& data, std::span<const std::int64_t> indices, bool augment) {
  const int c = shape_.channels, hw = shape_.height * shape_.width;
  GRADSYNC_CHECK(data.dim == c * hw, "dataset width does not match the resnet's C x H x W");
  Augmentation augmentation = augmentation_;
  augmentation.enabled = augment && augmentation_.enabled;
  const ImageShape image_shape{.height = shape_.height, .width = shape_.width, .channels = c};
  const auto dim = static_cast<std::size_t>(data.dim);
  augment_scratch_.resize(dim);
  for (std::size_t j = 0; j < indices.size(); ++j) {
    gather_training_image(data.sample(indices[j]), {input_.data() + j * dim, dim}, image_shape,
                          augmentation, epoch_, indices[j], augment_scratch_);
  }
}

void ResNet::conv_bn_forward(ConvBn& layer, int batch, const float* x, bool training) {
  const int c = layer.conv.out_channels;
  const std::int64_t pixels = layer.conv.out_pixels(batch);
  const float* w = params_.data() + layer.weight;
  if (training) {
    std::fill_n(sums_.begin(), 2 * c, 0.0);
    resnet::conv_forward(layer.conv, batch, x, w, layer.z.data(), scratch_, sums_.data());
    layer.bn.train_statistics(sums_.data(), pixels, params_, buffers_, batch_stats_reducer_);
  } else {
    resnet::conv_forward(layer.conv, batch, x, w, layer.z.data(), scratch_, nullptr);
    layer.bn.eval_statistics(params_, buffers_);
  }
  if (!layer.out.empty()) {
    resnet::bn_apply(c, pixels, layer.z.data(), layer.bn, true, layer.out.data());
  }
}

void ResNet::forward(int batch, bool training) {
  conv_bn_forward(*stem_, batch, input_.data(), training);
  const float* x = stem_->out.data();
  // Batch norms in layers() order: the order a SyncBatchNorm reducer sees them.
  for (Block& b : blocks_) {
    conv_bn_forward(b.conv1, batch, x, training);
    conv_bn_forward(b.conv2, batch, b.conv1.out.data(), training);
    const int c = b.conv2.conv.out_channels;
    const std::int64_t pixels = b.conv2.conv.out_pixels(batch);
    if (b.down) {
      conv_bn_forward(*b.down, batch, x, training);
      resnet::bn_bn_add_relu(c, pixels, b.conv2.z.data(), b.conv2.bn, b.down->z.data(), b.down->bn,
                             b.out.data());
    } else {
      resnet::bn_add_relu(c, pixels, b.conv2.z.data(), b.conv2.bn, x, b.out.data());
    }
    x = b.out.data();
  }
  // Global average pool: pooled[:, n] = the mean of image n's pixels, per channel.
  const ConvShape& last = blocks_.back().conv2.conv;
  const int hw = last.out_h * last.out_w, c = fc_in_;
  const float inv = 1.0f / static_cast<float>(hw);
  for (int n = 0; n < batch; ++n) {
    float* pooled = pooled_.data() + std::size_t(n) * c;
    std::fill_n(pooled, c, 0.f);
    const float* image = x + std::size_t(n) * hw * c;
    for (int p = 0; p < hw; ++p) {
      for (int ch = 0; ch < c; ++ch) pooled[ch] += image[p * c + ch];
    }
    for (int ch = 0; ch < c; ++ch) pooled[ch] *= inv;
  }
  // The linear layer, as the MLP's: logits = W * pooled + b.
  const int classes = shape_.classes;
  gemm_nn(classes, batch, c, params_.data() + fc_weight_, classes, pooled_.data(), c,
          logits_.data(), classes);
  bias_activation(classes, batch, params_.data() + fc_bias_, logits_.data(), classes, false);
}

std::pair<double, std::int64_t> ResNet::loss(const Dataset& data,
                                             std::span<const std::int64_t> indices, bool want_grad,
                                             float grad_scale) {
  const int batch = static_cast<int>(indices.size()), classes = shape_.classes;
  for (int j = 0; j < batch; ++j) {
    const int label = data.labels[static_cast<std::size_t>(indices[j])];
    GRADSYNC_CHECK(label >= 0 && label < classes, "label outside the model's classes");
    batch_labels_[static_cast<std::size_t>(j)] = label;
  }
  // d(mean loss)/dz = (softmax(z) - onehot(label)) / batch
  const auto result = softmax_cross_entropy(
      classes, batch, logits_.data(), classes, batch_labels_.data(),
      grad_scale / static_cast<float>(batch), want_grad ? d_logits_.data() : nullptr, classes);
  return {result.loss_sum, result.correct};
}

double ResNet::forward_backward(const Dataset& data, std::span<const std::int64_t> indices,
                                float grad_scale, bool accumulate) {
  const int batch = static_cast<int>(indices.size());
  GRADSYNC_CHECK(batch >= 1 && batch <= max_batch_, "batch size outside [1, max_batch]");
  gather(data, indices, true);
  forward(batch, true);
  const double loss_sum = loss(data, indices, true, grad_scale).first;
  backward(batch, accumulate);
  return loss_sum / batch;
}

void ResNet::layer_ready(std::size_t layer) {
  if (grad_ready_) grad_ready_(layers_[layer].begin, layers_[layer].end);
}

void ResNet::bn_backward(ConvBn& layer, int batch, const float* g, const float* relu_out,
                         float* g_z, bool accumulate) {
  const int c = layer.conv.out_channels;
  const std::int64_t pixels = layer.conv.out_pixels(batch);
  std::fill_n(sums_.begin(), 2 * c, 0.0);
  resnet::add_backward_sums(c, pixels, g, relu_out, layer.z.data(), layer.bn.mean(), sums_.data());
  layer.bn.backward_factors(sums_.data(), params_, grads_, accumulate, batch_stats_reducer_);
  resnet::bn_backward_apply(c, pixels, g, relu_out, layer.z.data(), layer.bn, g_z);
}

void ResNet::backward(int batch, bool accumulate) {
  // The linear layer, as the MLP's, then the pool's gradient spread evenly over the pixels.
  const int classes = shape_.classes, c = fc_in_;
  gemm_nt(classes, c, batch, d_logits_.data(), classes, pooled_.data(), c,
          grads_.data() + fc_weight_, classes, accumulate);
  bias_gradient(classes, batch, d_logits_.data(), classes, grads_.data() + fc_bias_, accumulate);
  layer_ready(layers_.size() - 1);
  gemm_tn(c, batch, classes, params_.data() + fc_weight_, classes, d_logits_.data(), classes,
          d_pooled_.data(), c, fc_transposed_.data());
  const ConvShape& last = blocks_.back().conv2.conv;
  const int hw = last.out_h * last.out_w;
  const float inv = 1.0f / static_cast<float>(hw);
  // Four gradient tensors rotate: `at` holds the gradient of the current block's output; the
  // others take dz of a norm, the gradient of conv1's output, and (projection shortcut) the
  // gradient of the block's input. An identity block's input gradient builds up in place of
  // its output gradient (the shortcut passes it on unchanged), once the norms have read it.
  int at = 0;
  float* g = grad_work_[at].data();
  for (int n = 0; n < batch; ++n) {
    const float* d = d_pooled_.data() + std::size_t(n) * c;
    float* image = g + std::size_t(n) * hw * c;
    for (int p = 0; p < hw; ++p) {
      for (int ch = 0; ch < c; ++ch) image[p * c + ch] = d[ch] * inv;
    }
  }
  for (std::size_t i = blocks_.size(); i-- > 0;) {
    Block& b = blocks_[i];
    const float* x = i > 0 ? blocks_[i - 1].out.data() : stem_->out.data();
    float* g_out = grad_work_[at].data();
    float* dz = grad_work_[(at + 1) % 4].data();
    float* g_mid = grad_work_[(at + 2) % 4].data();
    float* g_in = g_out;
    // relu(bn2(z2) + shortcut): both branches get dy where the output was positive.
    resnet::relu_mask(b.conv2.conv.out_pixels(batch) * b.conv2.conv.out_channels, b.out.data(),
                      g_out);
    if (b.down) {
      at = (at + 3) % 4;
      g_in = grad_work_[at].data();
      bn_backward(*b.down, batch, g_out, nullptr, dz, accumulate);
      resnet::conv_backward(b.down->conv, batch, x, params_.data() + b.down->weight, dz,
                            grads_.data() + b.down->weight, accumulate, g_in, false, scratch_);
      layer_ready(b.down->layer);
    }
    bn_backward(b.conv2, batch, g_out, nullptr, dz, accumulate);
    resnet::conv_backward(b.conv2.conv, batch, b.conv1.out.data(), params_.data() + b.conv2.weight,
                          dz, grads_.data() + b.conv2.weight, accumulate, g_mid, false, scratch_);
    layer_ready(b.conv2.layer);
    bn_backward(b.conv1, batch, g_mid, b.conv1.out.data(), g_mid, accumulate);
    // Onto the shortcut's gradient: dy itself (identity) or the projection's.
    resnet::conv_backward(b.conv1.conv, batch, x, params_.data() + b.conv1.weight, g_mid,
                          grads_.data() + b.conv1.weight, accumulate, g_in, true, scratch_);
    layer_ready(b.conv1.layer);
  }
  g = grad_work_[at].data();
  bn_backward(*stem_, batch, g, stem_->out.data(), g, accumulate);
  // Nobody needs the gradient with respect to the image.
  resnet::conv_backward(stem_->conv, batch, input_.data(), params_.data() + stem_->weight, g,
                        grads_.data() + stem_->weight, accumulate, nullptr, false, scratch_);
  layer_ready(stem_->layer);
}

std::span<const float> ResNet::logits(const Dataset& data, std::span<const std::int64_t> indices,
                                      bool training) {
  const int batch = static_cast<int>(indices.size());
  GRADSYNC_CHECK(batch >= 1 && batch <= max_batch_, "batch size outside [1, max_batch]");
  gather(data, indices, false);
  forward(batch, training);
  return {logits_.data(), static_cast<std::size_t>(batch) * shape_.classes};
}

Evaluation ResNet::evaluate(const Dataset& data) {
  Evaluation result;
  eval_indices_.resize(static_cast<std::size_t>(max_batch_));
  double loss_sum = 0;
  std::int64_t correct = 0;
  for (std::int64_t start = 0; start < data.size; start += max_batch_) {
    const int batch = static_cast<int>(std::min<std::int64_t>(max_batch_, data.size - start));
    for (int j = 0; j < batch; ++j) eval_indices_[j] = start + j;
    std::span<const std::int64_t> indices(eval_indices_.data(), static_cast<std::size_t>(batch));
    gather(data, indices, false);
    forward(batch, false);
    const auto [loss_part, right] = loss(data, indices, false, 1.0f);
    loss_sum += loss_part;
    correct += right;
  }
  result.samples = data.size;
  if (data.size > 0) {
    result.loss = loss_sum / static_cast<double>(data.size);
    result.accuracy = static_cast<double>(correct) / static_cast<double>(data.size);
  }
  return result;
}

double ResNet::step_flop(int batch) const {
  // Forward, weight gradient and input gradient: 3 products of 2 flop per multiply-add; the
  // stem needs no input gradient.
  double macs = 2 * stem_->conv.macs(batch);
  for (const Block& b : blocks_) {
    macs += 3 * (b.conv1.conv.macs(batch) + b.conv2.conv.macs(batch));
    if (b.down) macs += 3 * b.down->conv.macs(batch);
  }
  macs += 3.0 * batch * fc_in_ * shape_.classes;
  return 2 * macs;
}

}  // namespace gradsync
