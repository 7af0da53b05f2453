// A multi-layer perceptron (Linear -> ReLU -> ... -> Linear) with softmax cross-entropy, on
// Eigen, over ONE flat parameter buffer and ONE flat gradient buffer.
//
// Layout of both buffers, layer by layer in forward order: W_l (out x in, column-major, so a
// layer is `Z = W * X` with samples as columns), then b_l (out). Every strategy works on those
// flat buffers: a bucket, a parameter-server key range or an all-reduce is a range of them.
//
// All activations and scratch matrices are allocated once for `max_batch`; a step allocates
// nothing. The parameter and gradient buffers are counted in the process's model-state ledger
// (common/model_state_memory.h) for the model's lifetime, activations and scratch are not; so
// an Mlp is move-only. Not thread-safe: one Mlp per replica.
//
// Handed a LayerStorage (ZeRO stage 3, model/layer_storage.h), the Mlp holds no parameter or
// gradient buffer at all: each layer's weights are acquired before its forward and again before
// its backward and released after, each layer's gradient goes into the storage's layer buffer
// and is reported final at once (the storage reduces it while the input gradient is computed).
// Given one that holds gradients only (stage 2), it keeps its parameters and hands each layer's
// gradient over alike. Made with MlpBuffers other than kFull, it never allocates the buffers
// the storage will hold (they would be the ledger's peak); init_params then waits for it.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "common/model_state_memory.h"
#include "common/random.h"
#include "model/dataset.h"
#include "model/model.h"

namespace gradsync {

struct LayerRange {
  std::size_t weight_offset, bias_offset;  // into params() / grads()
  int in, out;
  std::size_t end() const { return bias_offset + static_cast<std::size_t>(out); }
};

// What an Mlp allocates: both full buffers; the parameters only (its gradients will go to a
// LayerStorage that holds gradients only: ZeRO stage 2); nothing (ZeRO stage 3).
enum class MlpBuffers { kFull, kParamsOnly, kNone };

class Mlp final : public Model {
 public:
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;

  // widths = {input, hidden..., classes}; at least {input, classes}.
  // Other than kFull, set_layer_storage() must follow before any step.
  Mlp(std::vector<int> widths, int max_batch, MlpBuffers buffers = MlpBuffers::kFull);
  // The layers' ranges in the flat buffers for `widths`, checked as the constructor checks
  // them, without allocating a model (whose buffers the model-state ledger would count).
  static std::vector<LayerRange> layout(const std::vector<int>& widths);

  // PyTorch's nn.Linear default: W, b ~ U(-1/sqrt(in), 1/sqrt(in)), from `seed` alone.
  void init_params(std::uint64_t seed) override;

  std::span<float> params() override { return params_; }
  std::span<float> grads() override { return grads_; }
  std::span<const float> params() const { return params_; }
  std::size_t param_count() const override { return layers_.back().end(); }
  const std::vector<LayerRange>& layers() const { return layers_; }
  // Per layer: W, column-major out x in, so row-major in x out; then b, 1-D.
  std::vector<TensorShape> tensors() const override;
  const std::vector<int>& widths() const { return widths_; }
  // Floating-point operations of one training step on `batch` samples, counted exactly: the
  // products only (forward 2·P·B, weight gradients 2·P·B, input gradients 2·P_l·B of every layer
  // but the first, P the weights); 77.5 MFLOP for 784-256-256-10 at batch 64.
  double step_flop(int batch) const;

  // Gathers `indices` of `data` into the input matrix, runs forward and backward, and writes
  // grad_scale times the gradient of the mean loss over the batch into grads(): overwriting
  // them, or adding to them when `accumulate` (micro-batches of one optimizer step, with
  // grad_scale = 1/k). Returns the mean loss. indices.size() must be in [1, max_batch].
  double forward_backward(const Dataset& data, std::span<const std::int64_t> indices,
                          float grad_scale = 1.0f, bool accumulate = false) override;

  // Each layer's range, last layer first (see Model).
  void set_grad_ready_callback(GradReadyCallback callback) override {
    grad_ready_ = std::move(callback);
  }

  std::vector<LayerSpan> layer_spans() const override;
  bool set_layer_storage(LayerStorage* storage) override;
  bool layer_stored() const override { return params_stored_; }
  void copy_params_to_host(std::span<float> out) override;
  void copy_params_from_host(std::span<const float> in) override;

  // Test loss and accuracy over the whole dataset (in chunks of max_batch); parameters unchanged.
  Evaluation evaluate(const Dataset& data) override;

 private:
  // Aligned to Eigen's widest packet: vectorised loops then split every range into the same
  // head, body and tail on every run and every replica, so equal inputs give bit-equal
  // gradients. With malloc's 16-byte alignment the split, and so the float summation order,
  // would depend on where the heap happened to put the buffer.
  using FlatBuffer = std::vector<float, Eigen::aligned_allocator<float>>;
  // The same, counted as model state (params_ and grads_).
  using StateBuffer = TrackedBuffer<float, Eigen::aligned_allocator<float>>;

  void gather(const Dataset& data, std::span<const std::int64_t> indices);
  void forward(int batch, LayerPass pass = LayerPass::kForward);
  // Layer l's weights (W, then b) for `pass`: a view of params_, or acquired from the storage;
  // release_layer gives the storage's back.
  const float* layer_params(std::size_t l, LayerPass pass);
  void release_layer(std::size_t l);
  // init_params's draw of layer l, in the order of the flat buffer.
  static void draw_layer(const LayerRange& layer, SplitMix64& rng, float* out);
  // Softmax cross-entropy on the logits of `batch` columns; leaves d(loss)/d(logits) in
  // delta_.back() when `want_grad`, and returns the summed loss and the correct count.
  std::pair<double, std::int64_t> softmax_cross_entropy(const Dataset& data,
                                                        std::span<const std::int64_t> indices,
                                                        int batch, bool want_grad,
                                                        float grad_scale = 1.0f);

  std::vector<int> widths_;
  int max_batch_;
  std::vector<LayerRange> layers_;
  StateBuffer params_{ModelState::kParams};
  StateBuffer grads_{ModelState::kGrads};
  std::vector<Matrix> activations_;  // [0] = input, [l+1] = output of layer l (ReLU'd)
  std::vector<Matrix> deltas_;       // [l] = d(loss)/d(pre-activation of layer l)
  FlatBuffer transposed_weight_;     // W^T of one layer: gemm_tn's scratch for the input gradient
  std::vector<std::int64_t> eval_indices_;
  std::vector<std::int32_t> batch_labels_;  // the labels of the batch's samples, checked
  GradReadyCallback grad_ready_;
  MlpBuffers made_ = MlpBuffers::kFull;
  bool params_stored_ = false;       // the storage holds the parameters: params_ is empty
  bool grads_stored_ = false;        // the storage takes the gradients: grads_ is empty
  LayerStorage* storage_ = nullptr;
  std::optional<std::uint64_t> pending_seed_;  // init_params before the storage came
};

}  // namespace gradsync
