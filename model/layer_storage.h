// LayerStorage: parameter and gradient storage that a sharding strategy owns, handed to a model
// that can run layer by layer on it (ZeRO stage 3, FSDP's full shard). The model then holds no
// full parameter or gradient buffer: before each layer's forward and again before its backward
// it acquires that layer's parameters (the storage all-gathers them, and may prefetch the next
// layer's), releases them after (the storage frees them), writes each layer's gradient into a
// layer-sized buffer the storage hands out, and reports it final (the storage reduce-scatters it
// and frees the buffer).
//
//   model.set_layer_storage(&storage);                  // false: the model cannot (resnet, ...)
//   // inside the model, layer l of forward:
//   std::span<const float> w = storage->acquire_params(l, LayerPass::kForward);
//   ... compute ...
//   storage->release_params(l);
//   // layer l of backward:
//   std::span<float> g = storage->layer_grads(l);      // overwritten by the model
//   ... compute ...
//   storage->gradient_final(l, accumulate);             // micro-batch > 0 of a step: add
//
// A storage that holds the gradients only (holds_params() false: ZeRO stage 2) leaves the
// parameters with the model; only the gradient half applies.
//
// Layers are the model's Model::layer_spans(), each a range of the flat layout every other
// strategy and every checkpoint sees. Every call that gathers or reduces is collective: every
// rank must make the same calls in the same order (forward, backward, evaluation, reading the
// full parameters), or the ranks wait on each other until the communicator's timeout. Spans
// stay valid until the matching release_params / gradient_final. One storage per rank, called
// from the rank's training thread only.
#pragma once

#include <cstddef>
#include <span>

namespace gradsync {

// Which pass acquires a layer: what the storage may prefetch next (forward and reading the
// following layer, backward the preceding one). kRead is any forward that is not a training
// step's (evaluation, reading the full parameters), so a storage can keep its traffic out of
// the step's.
enum class LayerPass { kForward, kBackward, kRead };

class LayerStorage {
 public:
  virtual ~LayerStorage() = default;

  // False: the storage takes the gradients only (ZeRO stage 2); the model keeps its full
  // parameters and never calls the parameter half below.
  virtual bool holds_params() const { return true; }

  // Layer `layer`'s full parameters, in the flat layout's order; may block on a gather.
  virtual std::span<const float> acquire_params(std::size_t layer, LayerPass pass) = 0;
  virtual void release_params(std::size_t layer) = 0;
  // Sets layer `layer`'s full parameters (initialisation, a resumed checkpoint): the storage
  // keeps its part of them. Collective.
  virtual void store_params(std::size_t layer, std::span<const float> values) = 0;

  // A buffer for layer `layer`'s gradient, layer-sized, contents unspecified.
  virtual std::span<float> layer_grads(std::size_t layer) = 0;
  // The gradient in layer_grads(layer) is this micro-batch's; the storage reduces it and adds
  // it to what the step's earlier micro-batches left (`accumulate`) or starts afresh. The span
  // is the storage's again.
  virtual void gradient_final(std::size_t layer, bool accumulate) = 0;
};

}  // namespace gradsync
