// `dp` on G GPUs of one process: DataParallel's pattern with device buffers. Replica r runs on
// its own thread with its model on CUDA device r (one GPU per replica: NCCL cannot put two
// ranks of a communicator on one device).
//
// Every step: the G gradients are reduced (averaged) onto replica 0's device with one NCCL
// reduce, replica 0 applies DeviceSgd there, and one NCCL broadcast copies its parameters back
// to every replica. Replica 0 receives (G-1)*S and sends (G-1)*S, the same traffic and the same
// serial bottleneck as the CPU `dp` (strategies/dp/dp_strategy.h), now over NVLink / PCIe. At
// init replica 0's parameters are broadcast, as DataParallel replicates module 0. A model with
// running statistics (the GPU ResNet's, host memory) has replica 0's broadcast after them, at
// init and every step, through a device buffer (strategies/buffer_staging.h).
//
// make_dp_gpu_group() returns the G per-replica strategies; each must be driven by its own
// thread. The replicas' NCCL communicators meet through an in-memory Store of the group. Every
// wait is bounded by `timeout`; a replica that fails calls abort(), which makes the others'
// waits throw its reason instead of timing out. Needs a build with CUDA and NCCL.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "model/optimizer/sgd_options.h"
#include "strategies/sync_strategy.h"

namespace gradsync {

std::vector<std::unique_ptr<SyncStrategy>> make_dp_gpu_group(int replicas, const SgdOptions& sgd,
                                                             std::chrono::milliseconds timeout);

}  // namespace gradsync
