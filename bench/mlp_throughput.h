// `gradsync bench mlp`: training throughput of the CPU MLP on one thread (or, with
// device "gpu", of the CUDA MLP on one GPU), measured the way bench/torch_mlp.py
// measures PyTorch: a fixed pool of random batches already in memory (on the GPU: uploaded
// once), then forward + backward + SGD-with-momentum steps for a fixed time.
#pragma once

#include <string>

#include "bench/timed_steps.h"

namespace gradsync {

// Returns the result line: "gradsync: samples/s=... steps=... seconds=... batch=... threads=1
// path=avx512|avx2|portable gemm=onednn:...|openblas:...|own|eigen isa=... gflops=... peak_gflops=... peak_share=...%" (the share of
// the path's instruction set's single-core peak, measured beside the run), or on a GPU "gradsync: samples/s=... device=cuda:0 gpu=<name>"
// (or one JSON object with options.json). device "gpu" in a build without CUDA, or without a
// visible GPU, throws a one-line ConfigError naming --device.
std::string run_mlp_bench(const MlpBenchOptions& options);
}  // namespace gradsync
