// Model: what the worker loop trains. One flat parameter buffer and one flat gradient buffer,
// whose ranges are what every strategy moves (a bucket, a key range, an all-reduce).
//
//   model.init_params(seed);                              // the same on every replica
//   loss = model.forward_backward(data, batch_indices);   // fills grads()
//   model.evaluate(test)                                  // loss and accuracy, params unchanged
//
// Implementations: Mlp (model/mlp.h), a real network; ResNet (model/resnet/resnet.h), with batch
// norm; SyntheticModel (model/synthetic_model.h), a stand-in with a chosen size and compute time.
// Buffers stay at the same address for the model's lifetime. Not thread-safe: one per replica.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/error.h"
#include "model/dataset.h"
#include "model/layer_storage.h"

namespace gradsync {

struct Evaluation {
  double loss = 0;      // mean loss
  double accuracy = 0;  // fraction of argmax == label (0 for a model without classes)
  std::int64_t samples = 0;
};

// One parameter tensor as a range of the flat buffers, seen as a row-major rows x cols matrix:
// what a low-rank gradient compression (PowerSGD) approximates. A bias or any 1-D tensor has
// cols == 1.
struct TensorShape {
  std::size_t offset = 0;
  std::size_t rows = 0;
  std::size_t cols = 1;
  std::size_t size() const { return rows * cols; }
  std::size_t end() const { return offset + size(); }
  bool matrix() const { return rows > 1 && cols > 1; }
};

// One layer's range [begin, end) of the flat buffers: what a LayerStorage gathers and reduces
// as a unit.
struct LayerSpan {
  std::size_t begin = 0, end = 0;
  std::size_t size() const { return end - begin; }
};

class Model {
 public:
  using GradReadyCallback = std::function<void(std::size_t begin, std::size_t end)>;
  // SyncBatchNorm's hook: handed per-channel statistics of the local batch, leaves their sum
  // over every rank in place (the contract is model/resnet/batch_norm.h's).
  using BatchStatsReducer = std::function<void(std::span<float> sums)>;

  virtual ~Model() = default;

  virtual void init_params(std::uint64_t seed) = 0;
  virtual std::span<float> params() = 0;
  virtual std::span<float> grads() = 0;
  virtual std::size_t param_count() const = 0;

  // Runs forward and backward on `indices` of `data` and writes grad_scale times the gradient
  // of the mean loss into grads(): overwriting them, or adding to them when `accumulate`
  // (micro-batches of one optimizer step). Returns the mean loss.
  virtual double forward_backward(const Dataset& data, std::span<const std::int64_t> indices,
                                  float grad_scale = 1.0f, bool accumulate = false) = 0;

  // Called during backward with each layer's range [begin, end) of grads() as soon as it is
  // final (last layer first), so a strategy can start reducing it while backward continues.
  virtual void set_grad_ready_callback(GradReadyCallback callback) = 0;

  // Where params() and grads() live: -1 for host memory, else the CUDA device ordinal. Code that
  // reads or writes parameter values outside a strategy (checkpoints, tests) goes through
  // copy_params_to_host / copy_params_from_host, which work for either.
  virtual int device() const { return -1; }
  // Both spans hold exactly param_count() floats.
  virtual void copy_params_to_host(std::span<float> out) {
    GRADSYNC_CHECK(out.size() == param_count(), "copy_params_to_host: size != param_count()");
    std::copy(params().begin(), params().end(), out.begin());
  }
  virtual void copy_params_from_host(std::span<const float> in) {
    GRADSYNC_CHECK(in.size() == param_count(), "copy_params_from_host: size != param_count()");
    std::copy(in.begin(), in.end(), params().begin());
  }

  // Pays before the timed loop what the first step on `data` would otherwise pay once: a GPU
  // model uploads the data set and loads its kernels (about 0.1 s on an H100, against 0.2 ms a
  // step). Changes no parameter, gradient that a step reads, or optimizer state.
  virtual void prepare(const Dataset& /*data*/) {}

  // The parameter tensors in buffer order, covering params() exactly; by default one 1-D
  // tensor of the whole buffer (a model without matrices to approximate).
  virtual std::vector<TensorShape> tensors() const { return {{0, param_count(), 1}}; }

  // State that is not a parameter: batch norm's running mean and variance, which train-mode
  // steps move and evaluate() reads. No gradient, never averaged: strategies copy or broadcast
  // them from replica 0 (DataParallel, DDP's broadcast_buffers), checkpoints keep them. In host
  // memory, at the same address for the model's lifetime. Empty by default: a model without
  // running statistics (the MLP, the synthetic model).
  virtual std::span<float> buffers() { return {}; }
  // Set (non-null), every train-mode batch norm hands `reducer` its statistics to be summed
  // across ranks, in forward and in backward, so that it normalises by the global batch's
  // (SyncBatchNorm); every rank must then run the same layers. Null: local statistics. Default:
  // nothing to reduce (no batch norm).
  virtual void set_batch_stats_reducer(BatchStatsReducer /*reducer*/) {}

  // The epoch of the training batches that follow (the worker loop sets it before every step,
  // as PyTorch's DistributedSampler.set_epoch): what seeds data augmentation, with train.seed
  // and each sample's index (model/augment.h). Default: ignored (a model that augments nothing).
  virtual void set_epoch(std::int64_t /*epoch*/) {}

  // The layers in forward order, covering the flat buffers, for a model that can run on a
  // LayerStorage (model/layer_storage.h); empty for one that cannot (the default).
  virtual std::vector<LayerSpan> layer_spans() const { return {}; }
  // From now on the parameters and gradients live in `storage`, layer by layer (ZeRO stage 3):
  // params() and grads() are empty, and every read of the parameters (forward, evaluate,
  // copy_params_to_host) and every write (init_params, copy_params_from_host) is collective
  // over the storage's ranks. `storage` must outlive every such call. Returns false, changing
  // nothing, for a model that cannot (the default).
  virtual bool set_layer_storage(LayerStorage* /*storage*/) { return false; }
  // Whether the parameters live in a LayerStorage: every rank must then evaluate alike.
  virtual bool layer_stored() const { return false; }

  // Whether evaluate() measures anything a user reads (a synthetic model has no test set).
  virtual bool evaluates() const { return true; }
  virtual Evaluation evaluate(const Dataset& data) = 0;
};

}  // namespace gradsync
