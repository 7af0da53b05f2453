// BufferStaging: where a strategy's communicator can read a model's batch-norm state: the
// running statistics (Model::buffers()) it broadcasts, and SyncBatchNorm's per-channel sums it
// all-reduces (Model::BatchStatsReducer).
//
// Both are host memory for every model, the GPU ResNet's too (model/model.h: strategies and
// checkpoints read and write the statistics as plain floats, the reducer is handed host spans),
// while the communicator of a GPU model (NCCL, or a host backend staged through
// strategies/allreduce/host_staged_communicator.h) takes device memory only. For a model on a
// device they therefore go through a device buffer, grown to the largest span seen: copied up,
// reduced or broadcast there, copied back. A few KiB (ResNet-8: 672 floats of running
// statistics, 129 of sums for its widest norm), as DDP's broadcast_buffers and SyncBatchNorm
// send them. For a model in host memory the span is handed over where it is.
//
//   BufferStaging staging(model.device());
//   comm.broadcast(staging.upload(model.buffers()), /*root=*/0);   // collective
//   staging.download(model.buffers());
//
// The copies are synchronous on the device's legacy default stream, waited for both ways: a
// few KiB, where an event hand-off would save nothing. Not thread-safe (one per strategy, or
// per reducer); the span upload() returns is valid until the next upload(), which may grow the
// buffer.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

namespace gradsync {

class BufferStaging {
 public:
  BufferStaging();  // host memory, nothing staged
  // device < 0: host memory. device >= 0: a buffer on that CUDA device (a build without CUDA
  // refuses it; such a build has no GPU models).
  explicit BufferStaging(int device);
  ~BufferStaging();
  BufferStaging(BufferStaging&&) noexcept;
  BufferStaging& operator=(BufferStaging&&) noexcept;

  // What the communicator is handed: `host` itself, or the device copy of it, landed when this
  // returns (the values must be final on the host: forward_backward has returned, or the model
  // waited for its stream before calling its reducer).
  std::span<float> upload(std::span<float> host);
  // The device copy back into `host` (the span last uploaded) once the collective is done;
  // nothing for host memory.
  void download(std::span<float> host);

 private:
  struct Device;
  std::unique_ptr<Device> device_;  // null: host memory
};

}  // namespace gradsync
