// `gradsync bench mlp --device gpu`: the CUDA MLP's training throughput at a given batch, with
// the same pool, model and optimizer settings as the CPU benchmark (mlp_throughput.h; both use
// timed_steps.h) and as `bench/torch_mlp.py --device cuda`, so the two run the same work on the
// same GPU.
// With cuda_graphs (the default) a step is CudaMlp::train_step: forward, backward, the update
// and the loss read-back as one CUDA graph launch, then one wait. Without, it is
// forward_backward (which waits for its stream: the loss reaches the host, as loss.item()
// would) and DeviceSgd::step (which waits for the update). Both give the same parameters bit
// for bit; the difference is launch overhead, which dominates at small batches.
#pragma once

#include <string>

#include "bench/timed_steps.h"

namespace gradsync {

// The result line "gradsync: samples/s=... steps=... seconds=... batch=... device=cuda:N
// graphs=on|off gpu=<name>", or JSON ("graphs": true|false) with options.json. Throws ConfigError
// naming --device without CUDA or without a visible GPU.
std::string run_gpu_mlp_bench(const MlpBenchOptions& options);

}  // namespace gradsync
