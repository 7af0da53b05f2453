// HostStagedStrategy: runs a host-memory strategy (`ps`: ZeroMQ frames come from host memory)
// for a model whose buffers live on a GPU, through pinned host copies of both buffers.
//
//   backward:     each gradient range the model reports ready is copied device -> pinned host
//                 on a copy stream that first waits (by event, not by the host) for the model's
//                 stream; the copies overlap the rest of backward
//   synchronize:  whatever was not yet copied is, the copies are awaited, the inner strategy
//                 runs on the host buffers (push, pull), the new parameters are copied back to
//                 the device; it returns once they are there
//
// Host buffers: page-locked, allocated once at init (2 * model bytes). The inner strategy's
// gradient_ready is not forwarded: its host range may still be in flight at that moment.
// Waits are the inner strategy's; the copies themselves are local and unbounded in time
// only as much as the GPU is. One object per rank; not thread-safe.
//
// adapt_to_model_device(strategy, model) is what make_strategies applies to a worker process's
// strategy: it wraps `ps` when the model is on a GPU and returns every other case unchanged
// (allreduce reduces device buffers through its communicator: NCCL, or tcp and gloo staged
// through host memory by strategies/allreduce/host_staged_communicator.h; a CPU model needs
// nothing).
#pragma once

#include <memory>

#include "model/model.h"
#include "strategies/sync_strategy.h"

namespace gradsync {

std::unique_ptr<SyncStrategy> adapt_to_model_device(std::unique_ptr<SyncStrategy> strategy,
                                                    Model& model);

}  // namespace gradsync
