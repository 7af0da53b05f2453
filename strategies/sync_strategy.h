// SyncStrategy: how a rank's gradients become updated parameters. The one worker loop
// (worker/worker_loop.h) calls it and knows nothing else about the strategy:
//
//   strategy.attach_buffers(buffers)      // running statistics, if the model has any
//   strategy.init(params)                 // all replicas start equal
//   for each step:
//     loss = model.forward_backward(batch)       // fills grads
//     strategy.synchronize(grads, params)        // params now updated on this rank
//     record(strategy.last_step_stats())
//
// Where the optimizer runs is the strategy's business (locally, on replica 0, on the server
// shards). `params` and `grads` are this rank's flat buffers; they stay valid and at the same
// address from init() until the strategy is destroyed, so a strategy may keep pointers to them.
// Under zero stage 3 the model holds neither (model/layer_storage.h: each layer's parameters
// and gradient come from the strategy's shards while the layer runs), and both spans are empty;
// stage 2 without compression leaves `grads` empty the same way.
// One object per rank; a rank calls it from one thread. synchronize() blocks until this rank's
// parameters are updated; a strategy that waits on other ranks has a timeout and throws
// gradsync::TimeoutError naming the rank it waited for.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/checkpoint_file.h"
#include "common/step_stats.h"
#include "common/trace_span.h"
#include "model/optimizer/optimizer.h"

namespace gradsync {

class SyncStrategy {
 public:
  virtual ~SyncStrategy() = default;

  virtual std::string_view name() const = 0;
  virtual int rank() const = 0;
  // The model's running statistics (Model::buffers(): batch norm's running mean and variance;
  // empty for a model without them), handed over once before init() and valid as `params` are.
  // State, not parameters: never averaged. What happens to them is the recipe's: `dp` copies
  // replica 0's to the others every step (DataParallel); `allreduce` broadcasts rank 0's at
  // init and, with comm.broadcast_buffers, after every step (DDP); a strategy that ignores them
  // (the default: `single`, `ps`) leaves each rank its own.
  virtual void attach_buffers(std::span<float> /*buffers*/) {}
  virtual void init(std::span<float> params) = 0;
  virtual void synchronize(std::span<float> grads, std::span<float> params) = 0;

  // Called during the backward pass of the last micro-batch of a step, each time a range
  // [begin, end) of the gradient buffer is final, in the order backward produces them (last
  // layer first). A strategy that overlaps communication with backward starts reducing here;
  // synchronize() follows once backward is done. Default: nothing to overlap.
  virtual void gradient_ready(std::span<float> /*grads*/, std::size_t /*begin*/,
                              std::size_t /*end*/) {}
  // Called once after this rank's last step. A strategy whose peers may still be training
  // (uneven inputs) keeps serving their collectives here until every rank is done, then
  // leaves every rank with the same parameters. Default: nothing to do.
  virtual void finish(std::span<float> /*grads*/, std::span<float> /*params*/) {}

  // communicate / wait seconds and bytes of the last synchronize(). compute_s holds only
  // compute the strategy itself did (an optimizer update); the loop adds forward/backward.
  virtual StepStats last_step_stats() const = 0;

  // The last step's communication as it really ran, for the trace's communication track: each
  // collective or message exchange with its own start and end, which may lie within backward
  // (overlap). Valid until the next gradient_ready() or synchronize(). Default: none; the
  // loop's "synchronize" span on the compute track still shows the time spent.
  virtual std::span<const TraceSpan> last_step_spans() const { return {}; }

  // Where every rank holds part of the state (zero), each writes its own parts of a checkpoint:
  // this rank's parts (index in the step folder, and the part with its range, parameters from
  // `params`, momentum and optimizer steps; the writer fills in the step and the model), and
  // how many parts the checkpoint has in all. Default: none; rank 0 writes the whole buffer from
  // the model and optimizer().
  struct OwnParts {
    int parts = 0;
    std::vector<std::pair<int, CheckpointPart>> mine;
  };
  virtual std::optional<OwnParts> own_checkpoint_parts(std::span<const float> /*params*/) const {
    return std::nullopt;
  }

  // The optimizer this rank updates parameters with, for checkpoints; null where the update
  // runs elsewhere (ps: on the server shards; dp: replicas other than 0). Valid after init().
  virtual Optimizer* optimizer() { return nullptr; }

  // Called when this rank fails (`reason`: why): wakes every wait of the strategy (this rank's
  // and, in-process, its peers') with an error, so no one is left blocked, and where the
  // transport can, tells the other ranks why this one is leaving.
  virtual void abort(const std::string& /*reason*/) {}
};

}  // namespace gradsync
