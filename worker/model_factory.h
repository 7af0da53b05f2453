// The model a configuration names (model.kind), built for one replica, on the device the
// configuration names (device: cpu | gpu).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/config.h"
#include "model/model.h"

namespace gradsync {

// `widths` is RunPlan::widths (the MLP's input, hidden and output widths from the data);
// `max_batch` the largest batch forward_backward will see. Parameters are initialised from
// train.seed, the same on every replica and on either device.
//
// `device`: the CUDA ordinal for device: gpu, normally model_device(config, replica); ignored
// for device: cpu. A caller that passes none gets gpu refused: it has not set up its strategy
// (optimizer, communicator) for device buffers either. device: gpu with model.kind mlp builds
// the CUDA MLP (model/cuda/cuda_mlp.h), with resnet the CUDA ResNet (model/cuda/cuda_resnet.h);
// the synthetic model only sleeps and stays on the CPU, so it is refused on gpu, as is zero,
// whose shards are host memory. Refusals are one-line ConfigErrors naming the key, checked in
// this order: a build without CUDA, the model kind, zero, comm.uneven_inputs under allreduce,
// no visible GPU, no device chosen, an ordinal that is not visible. A GPU model's device becomes the calling thread's own
// (cuda::set_device): build it on the thread that trains it.
std::unique_ptr<Model> make_model(const Config& config, const std::vector<int>& widths,
                                  int max_batch, std::optional<int> device = std::nullopt);

// Throws the refusal a device: gpu run would meet on this build and machine (no CUDA, a model
// kind or option the GPU path lacks, no visible GPU, dp with fewer GPUs than replicas, NCCL
// allreduce with more workers than GPUs: `gradsync run` starts every rank on this host), before
// anything is made: run_preset checks every run before it makes the results folder. Nothing
// for device: cpu. GPUs that are there but unusable (a driver too old) throw gradsync::Error.
void check_device_available(const Config& config);

// Whether the run's GPU buffers are reduced over NCCL: dp on gpu, and allreduce on gpu with
// comm.backend auto (nccl for device buffers) or nccl. NCCL bypasses gradsync's sockets.
bool reduces_over_nccl(const Config& config);

// NCCL puts one rank on one GPU (two on one device fail inside ncclCommInitRank, "Duplicate
// GPU detected"): throws a one-line ConfigError (key workers) when an allreduce run over NCCL
// has more ranks on this host (`local_ranks`: workers under `gradsync run`, LOCAL_WORLD_SIZE
// or its launcher's equivalent otherwise) than the `visible` GPUs. Nothing for other runs:
// ps workers stage through host memory and may share a GPU; dp: check_dp_on_gpus.
void check_gpu_per_rank(const Config& config, int local_ranks, int visible);

// The CUDA ordinal a replica's model uses: -1 for device: cpu; for gpu, `replica` under `dp`
// (one process over G GPUs, replica r on GPU r), else LOCAL_RANK (torchrun / mpirun / srun
// names; 0 when unset): one GPU per worker process; 0 when the process sees only one GPU (a
// launcher that hands each process its own, as srun --gpus-per-task=1 does, or workers that
// share it). Workers that do not reduce over NCCL (ps; allreduce over tcp or gloo) take
// LOCAL_RANK modulo the visible GPUs, so that more of them than GPUs share them.
int model_device(const Config& config, int replica = 0);

// The parameter count make_model's model will have, without allocating it.
std::int64_t model_parameters(const Config& config, const std::vector<int>& widths);

// Whether this build has the CUDA model (GRADSYNC_HAVE_CUDA), and how many GPUs this process
// sees (0 without CUDA, a driver or a device). visible_gpus() throws gradsync::Error, with the
// runtime's reason, when GPUs are there but unusable (cuda::cuda_device_count).
bool gpu_compiled_in();
int visible_gpus();

}  // namespace gradsync
