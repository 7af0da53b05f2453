#include "model/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "common/error.h"
#include "common/random.h"
#include "model/kernels/cpu_kernels.h"

namespace gradsync {

std::vector<LayerRange> Mlp::layout(const std::vector<int>& widths) {
  GRADSYNC_CHECK(widths.size() >= 2, "an MLP needs at least an input and an output width");
  std::vector<LayerRange> layers;
  std::size_t offset = 0;
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    const int in = widths[l], out = widths[l + 1];
    GRADSYNC_CHECK(in >= 1 && out >= 1, "layer widths must be positive");
    LayerRange layer{offset, offset + static_cast<std::size_t>(in) * out, in, out};
    offset = layer.end();
    layers.push_back(layer);
  }
  return layers;
}

Mlp::Mlp(std::vector<int> widths, int max_batch, MlpBuffers buffers)
    : widths_(std::move(widths)), max_batch_(max_batch), made_(buffers) {
  layers_ = layout(widths_);
  GRADSYNC_CHECK(max_batch_ >= 1, "max_batch must be positive");
  const std::size_t offset = layers_.back().end();
  params_stored_ = buffers == MlpBuffers::kNone;
  grads_stored_ = buffers != MlpBuffers::kFull;
  if (!params_stored_) params_.resize(offset, 0.f);
  if (!grads_stored_) grads_.resize(offset, 0.f);
  for (int width : widths_) activations_.emplace_back(width, max_batch_);
  std::size_t largest_weight = 0;
  for (std::size_t l = 1; l < widths_.size(); ++l) {
    deltas_.emplace_back(widths_[l], max_batch_);
    largest_weight =
        std::max(largest_weight, layers_[l - 1].bias_offset - layers_[l - 1].weight_offset);
  }
  transposed_weight_.resize(largest_weight);
  batch_labels_.resize(static_cast<std::size_t>(max_batch_));
}

void Mlp::draw_layer(const LayerRange& layer, SplitMix64& rng, float* out) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(layer.in));
  for (std::size_t i = 0; i < layer.end() - layer.weight_offset; ++i) {
    out[i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
  }
}

void Mlp::init_params(std::uint64_t seed) {
  SplitMix64 rng(seed);
  if (!params_stored_) {
    for (const LayerRange& layer : layers_) draw_layer(layer, rng, params_.data() + layer.weight_offset);
    return;
  }
  if (storage_ == nullptr) {  // drawn once the storage comes: no full buffer meanwhile
    pending_seed_ = seed;
    return;
  }
  // One layer at a time, drawn in the flat buffer's order (the same values as above): a
  // gathered layer's worth of parameters, as the storage holds while a layer runs.
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const LayerRange& layer = layers_[l];
    StateBuffer drawn(ModelState::kParams, layer.end() - layer.weight_offset);
    draw_layer(layer, rng, drawn.data());
    storage_->store_params(l, drawn);
  }
}

std::vector<LayerSpan> Mlp::layer_spans() const {
  std::vector<LayerSpan> spans;
  for (const LayerRange& layer : layers_) spans.push_back({layer.weight_offset, layer.end()});
  return spans;
}

bool Mlp::set_layer_storage(LayerStorage* storage) {
  GRADSYNC_CHECK(storage != nullptr, "set_layer_storage: null storage");
  GRADSYNC_CHECK(storage_ == nullptr, "set_layer_storage: the Mlp has a storage already");
  GRADSYNC_CHECK(storage->holds_params() || made_ != MlpBuffers::kNone,
                 "set_layer_storage: an Mlp made without parameters needs a storage for them");
  storage_ = storage;
  grads_stored_ = true;
  grads_.clear();  // made kFull: the gradients go from now on
  if (!storage->holds_params()) return true;
  if (!params_stored_) {
    // Made with full parameters: the storage takes the values, and the buffer goes.
    params_stored_ = true;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      storage_->store_params(l, std::span<const float>(params_.data() + layers_[l].weight_offset,
                                                       layers_[l].end() - layers_[l].weight_offset));
    }
    params_.clear();
  } else if (pending_seed_) {
    init_params(*std::exchange(pending_seed_, std::nullopt));
  }
  return true;
}

void Mlp::copy_params_to_host(std::span<float> out) {
  if (!params_stored_) return Model::copy_params_to_host(out);
  GRADSYNC_CHECK(out.size() == param_count(), "copy_params_to_host: size != param_count()");
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const float* w = layer_params(l, LayerPass::kRead);
    std::copy(w, w + (layers_[l].end() - layers_[l].weight_offset),
              out.begin() + std::ptrdiff_t(layers_[l].weight_offset));
    release_layer(l);
  }
}

void Mlp::copy_params_from_host(std::span<const float> in) {
  if (!params_stored_) return Model::copy_params_from_host(in);
  GRADSYNC_CHECK(in.size() == param_count(), "copy_params_from_host: size != param_count()");
  GRADSYNC_CHECK(storage_ != nullptr, "copy_params_from_host: the Mlp waits for its storage");
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    storage_->store_params(l, in.subspan(layers_[l].weight_offset,
                                         layers_[l].end() - layers_[l].weight_offset));
  }
}

const float* Mlp::layer_params(std::size_t l, LayerPass pass) {
  if (!params_stored_) return params_.data() + layers_[l].weight_offset;
  GRADSYNC_CHECK(storage_ != nullptr, "an Mlp made layer_stored runs only once given its storage");
  return storage_->acquire_params(l, pass).data();
}

void Mlp::release_layer(std::size_t l) {
  if (params_stored_) storage_->release_params(l);
}

void Mlp::gather(const Dataset& data, std::span<const std::int64_t> indices) {
  GRADSYNC_CHECK(data.dim == widths_.front(), "dataset width does not match the model input");
  // Samples are rows of the dataset and columns of the input: one contiguous copy each.
  Matrix& input = activations_.front();
  for (std::size_t j = 0; j < indices.size(); ++j) {
    std::memcpy(input.col(static_cast<Eigen::Index>(j)).data(), data.sample(indices[j]).data(),
                sizeof(float) * static_cast<std::size_t>(data.dim));
  }
}

void Mlp::forward(int batch, LayerPass pass) {
  const int last = static_cast<int>(layers_.size()) - 1;
  for (int l = 0; l <= last; ++l) {
    auto in = activations_[l].leftCols(batch);
    auto out = activations_[l + 1].leftCols(batch);
    const LayerRange& r = layers_[l];
    const float* w = layer_params(std::size_t(l), pass);
    gemm_nn(r.out, batch, r.in, w, r.out, in.data(), r.in, out.data(), r.out);
    bias_activation(r.out, batch, w + (r.bias_offset - r.weight_offset), out.data(), r.out,
                    l < last);
    release_layer(std::size_t(l));
  }
}

std::pair<double, std::int64_t> Mlp::softmax_cross_entropy(const Dataset& data,
                                                           std::span<const std::int64_t> indices,
                                                           int batch, bool want_grad,
                                                           float grad_scale) {
  const int classes = widths_.back();
  for (int j = 0; j < batch; ++j) {
    const int label = data.labels[static_cast<std::size_t>(indices[j])];
    GRADSYNC_CHECK(label >= 0 && label < classes, "label outside the model's classes");
    batch_labels_[static_cast<std::size_t>(j)] = label;
  }
  // d(mean loss)/dz = (softmax(z) - onehot(label)) / batch
  const auto result = gradsync::softmax_cross_entropy(
      classes, batch, activations_.back().data(), classes, batch_labels_.data(),
      grad_scale / static_cast<float>(batch), want_grad ? deltas_.back().data() : nullptr, classes);
  return {result.loss_sum, result.correct};
}

double Mlp::forward_backward(const Dataset& data, std::span<const std::int64_t> indices,
                             float grad_scale, bool accumulate) {
  const int batch = static_cast<int>(indices.size());
  GRADSYNC_CHECK(batch >= 1 && batch <= max_batch_, "batch size outside [1, max_batch]");
  gather(data, indices);
  forward(batch);
  const double loss_sum = softmax_cross_entropy(data, indices, batch, true, grad_scale).first;

  for (int l = static_cast<int>(layers_.size()) - 1; l >= 0; --l) {
    auto delta = deltas_[l].leftCols(batch);
    auto in = activations_[l].leftCols(batch);
    const LayerRange& r = layers_[l];
    // Gathered again before backward, as FSDP does, though layer 0's input gradient is not
    // computed: each layer is gathered twice a step, whatever its place.
    const float* w = layer_params(std::size_t(l), LayerPass::kBackward);
    GRADSYNC_CHECK(!grads_stored_ || storage_ != nullptr,
                   "an Mlp made without gradients trains only once given its storage");
    float* g = grads_stored_ ? storage_->layer_grads(std::size_t(l)).data()
                             : grads_.data() + r.weight_offset;
    // The storage's layer buffer holds this micro-batch alone: it accumulates the reduced shard.
    const bool add = accumulate && !grads_stored_;
    gemm_nt(r.out, r.in, batch, delta.data(), r.out, in.data(), r.in, g, r.out, add);
    bias_gradient(r.out, batch, delta.data(), r.out, g + (r.bias_offset - r.weight_offset), add);
    // Reported before the input gradient is computed, so that its reduction overlaps that.
    if (grads_stored_) {
      storage_->gradient_final(std::size_t(l), accumulate);
    } else if (grad_ready_) {
      grad_ready_(r.weight_offset, r.end());
    }
    if (l == 0) {  // nobody needs the gradient with respect to the input
      release_layer(0);
      break;
    }
    auto prev = deltas_[l - 1].leftCols(batch);
    gemm_tn(r.in, batch, r.out, w, r.out, delta.data(), r.out, prev.data(), r.in,
            transposed_weight_.data());
    release_layer(std::size_t(l));
    // ReLU's derivative: pass the gradient where the activation was positive.
    relu_backward(r.in, batch, in.data(), r.in, prev.data(), r.in);
  }
  return loss_sum / batch;
}

std::vector<TensorShape> Mlp::tensors() const {
  std::vector<TensorShape> shapes;
  for (const LayerRange& layer : layers_) {
    shapes.push_back({layer.weight_offset, static_cast<std::size_t>(layer.in),
                      static_cast<std::size_t>(layer.out)});
    shapes.push_back({layer.bias_offset, static_cast<std::size_t>(layer.out), 1});
  }
  return shapes;
}

double Mlp::step_flop(int batch) const {
  double flop = 0;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const double weights = static_cast<double>(layers_[l].in) * layers_[l].out;
    flop += (l == 0 ? 4.0 : 6.0) * weights * batch;
  }
  return flop;
}

Evaluation Mlp::evaluate(const Dataset& data) {
  Evaluation result;
  eval_indices_.resize(static_cast<std::size_t>(max_batch_));
  double loss_sum = 0;
  std::int64_t correct = 0;
  for (std::int64_t start = 0; start < data.size; start += max_batch_) {
    const int batch = static_cast<int>(std::min<std::int64_t>(max_batch_, data.size - start));
    for (int j = 0; j < batch; ++j) eval_indices_[j] = start + j;
    std::span<const std::int64_t> indices(eval_indices_.data(), static_cast<std::size_t>(batch));
    gather(data, indices);
    forward(batch, LayerPass::kRead);
    const auto [loss, right] = softmax_cross_entropy(data, indices, batch, false);
    loss_sum += loss;
    correct += right;
  }
  result.samples = data.size;
  if (data.size > 0) {
    result.loss = loss_sum / static_cast<double>(data.size);
    result.accuracy = static_cast<double>(correct) / static_cast<double>(data.size);
  }
  return result;
}

}  // namespace gradsync
