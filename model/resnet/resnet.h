// A small residual network with batch norm for images (Fashion-MNIST's 28x28x1 by default),
// the CIFAR-style ResNet of He et al. (2016) at torchvision's block design:
//
//   conv3x3(w) - BN - ReLU
//   3 stages of `blocks_per_stage` basic blocks at widths w, 2w, 4w; the first block of stages
//     2 and 3 has stride 2 and a projection shortcut (conv1x1 stride 2 + BN, torchvision's
//     downsample); a basic block is relu(bn(conv3x3(relu(bn(conv3x3(x))))) + shortcut(x))
//   global average pool - linear to `classes` - softmax cross-entropy
//
// With w = 16 and one block per stage (ResNet-8): 77,754 parameters. Convolutions have no bias
// (a batch norm follows each), as torchvision's.
//
//   ResNet net({.blocks_per_stage = 1, .stage_width = 16}, max_batch);
//   net.init_params(seed);
//   loss = net.forward_backward(data, batch);   // train mode: batch statistics
//   net.evaluate(test);                         // eval mode: running statistics
//
// Buffers. params() and grads() are each ONE flat buffer, layer by layer in forward order; a
// layer is a convolution with the batch norm after it (weight [Cout x K] column-major, K in
// (kh, kw, cin) order, then gamma and beta), and last the linear layer (W [classes x C]
// column-major, then b). A block's layers are conv1, conv2, then the shortcut's. layers() lists
// the ranges; backward hands each to the grad-ready callback as soon as it is final, in reverse
// order of layers(), so buckets reduce while backward goes on. The running statistics of every
// batch norm (mean then variance, C each, forward order) are buffers(): state, not parameters.
//
// Activations are NHWC (see conv2d.h): dataset samples are read as (C, H, W) row-major, as
// PyTorch's NCHW tensors, and transposed on the way in when C > 1. All activations and scratch
// are allocated once for max_batch; a step allocates nothing. Not thread-safe: one per replica.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/augment.h"
#include "model/model.h"
#include "model/resnet/batch_norm.h"
#include "model/resnet/conv2d.h"

namespace gradsync {

struct ResNetShape {
  int channels = 1, height = 28, width = 28;  // the input image, C x H x W
  int classes = 10;
  int blocks_per_stage = 1;
  int stage_width = 16;  // channels of the first stage; the second and third have 2x and 4x
};

class ResNet final : public Model {
 public:
  struct Layer {
    // torchvision's module names: "conv1" (the stem, with bn1), "layer2.0.conv1" (with bn1),
    // "layer2.0.downsample", "fc".
    std::string name;
    std::size_t begin, end;  // range of params() / grads()
  };
  using BatchStatsReducer = resnet::BatchStatsReducer;

  ResNet(ResNetShape shape, int max_batch);
  ~ResNet() override;

  // Convolutions Kaiming-normal (fan_out, ReLU gain: std sqrt(2 / (Cout k k))) as torchvision's
  // ResNet; batch norms gamma 1, beta 0, running mean 0, variance 1; the linear layer as
  // nn.Linear (U(-1/sqrt(C), 1/sqrt(C)) for W and b). From `seed` alone; buffers() reset.
  void init_params(std::uint64_t seed) override;

  // param_count() of a ResNet of `shape`, counted without building one.
  static std::size_t parameter_count(const ResNetShape& shape);

  std::span<float> params() override { return params_; }
  std::span<float> grads() override { return grads_; }
  std::span<const float> params() const { return params_; }
  std::size_t param_count() const override { return params_.size(); }
  const std::vector<Layer>& layers() const { return layers_; }
  const ResNetShape& shape() const { return shape_; }

  // Running mean and variance of every batch norm: train-mode steps move them, evaluate() reads
  // them. What a strategy broadcasts from rank 0 (DDP's broadcast_buffers) and a checkpoint must
  // keep beside the parameters; the same address for the model's lifetime.
  std::span<float> buffers() override { return buffers_; }
  std::span<const float> buffers() const { return buffers_; }

  // SyncBatchNorm's hook (the contract is batch_norm.h's): set, every train-mode batch norm hands
  // it its statistics to be summed across ranks, in forward and in backward. Null: local
  // statistics, as BatchNorm2d.
  void set_batch_stats_reducer(BatchStatsReducer reducer) override {
    batch_stats_reducer_ = std::move(reducer);
  }

  // Training-time augmentation (model/augment.h): set enabled, forward_backward() crops and
  // flips each sample by (augmentation.seed, the epoch of set_epoch(), its dataset index) as it
  // gathers the batch; logits() and evaluate() read the samples as they are. Off by default.
  void set_augmentation(Augmentation augmentation) { augmentation_ = augmentation; }
  void set_epoch(std::int64_t epoch) override { epoch_ = epoch; }

  // Train mode: batch statistics, running statistics updated. Writes grad_scale times the
  // gradient of the mean loss into grads() (added when `accumulate`); returns the mean loss.
  // indices.size() must be in [1, max_batch].
  double forward_backward(const Dataset& data, std::span<const std::int64_t> indices,
                          float grad_scale = 1.0f, bool accumulate = false) override;

  // Each layer's range, last layer first (see Model).
  void set_grad_ready_callback(GradReadyCallback callback) override {
    grad_ready_ = std::move(callback);
  }

  // Eval mode over the whole dataset (in chunks of max_batch): parameters and buffers unchanged.
  Evaluation evaluate(const Dataset& data) override;

  // The logits [classes x batch] (column-major) of `indices` in train mode (batch statistics,
  // running statistics updated, as a PyTorch module in train()) or eval mode. Valid until the
  // next call.
  std::span<const float> logits(const Dataset& data, std::span<const std::int64_t> indices,
                                bool training);

  // Floating-point operations of one training step on `batch` samples: the products only
  // (forward, weight gradients, input gradients but the stem's), 2 per multiply-add.
  double step_flop(int batch) const;

  // Output pixels per convolution chunk (0, the default: by the cache budget of conv2d.cpp).
  // Tests set a few pixels, so that chunks end inside images and cross from one to the next.
  void set_conv_chunk_pixels(int pixels);

 private:
  struct ConvBn;
  struct Block;

  // The batch's inputs into input_, augmented when `augment` and augmentation_ is enabled.
  void gather(const Dataset& data, std::span<const std::int64_t> indices, bool augment);
  void forward(int batch, bool training);
  void conv_bn_forward(ConvBn& layer, int batch, const float* x, bool training);
  void backward(int batch, bool accumulate);
  // The batch norm of `layer` backward from dy (masked by `relu_out` when a ReLU followed it),
  // into dz at g_z; grads of gamma and beta written.
  void bn_backward(ConvBn& layer, int batch, const float* g, const float* relu_out, float* g_z,
                   bool accumulate);
  void layer_ready(std::size_t layer);
  std::pair<double, std::int64_t> loss(const Dataset& data, std::span<const std::int64_t> indices,
                                       bool want_grad, float grad_scale);

  ResNetShape shape_;
  int max_batch_;
  std::vector<Layer> layers_;
  std::unique_ptr<ConvBn> stem_;
  std::vector<Block> blocks_;
  std::size_t fc_weight_ = 0, fc_bias_ = 0;
  int fc_in_ = 0;
  resnet::FlatBuffer params_, grads_, buffers_;
  resnet::FlatBuffer input_;
  resnet::FlatBuffer pooled_, logits_, d_logits_, d_pooled_, fc_transposed_;
  std::vector<resnet::FlatBuffer> grad_work_;  // backward's gradient tensors, each the largest
  std::vector<double> sums_;                   // 2C doubles of the batch norm at hand
  resnet::ConvScratch scratch_;
  std::vector<std::int32_t> batch_labels_;
  std::vector<std::int64_t> eval_indices_;
  GradReadyCallback grad_ready_;
  BatchStatsReducer batch_stats_reducer_;
  Augmentation augmentation_;
  std::int64_t epoch_ = 0;
  std::vector<float> augment_scratch_;  // one image, (H, W, C)
};

}  // namespace gradsync
