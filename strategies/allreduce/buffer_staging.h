// BufferStaging: where a strategy's communicator can read a model's running statistics
// (Model::buffers(), batch norm's running mean and variance) for their broadcast.
//
// Those statistics are host memory for every model, the GPU ResNet's too (model/model.h: the
// strategies and checkpoints read and write them as plain floats), while the communicator of a
// GPU model (NCCL, or a host backend staged through host_staged_communicator.h) takes device
// memory only. For a model on a device they therefore go through a device buffer of their
// size: copied up, broadcast there, copied back. A few KiB a step (ResNet-8: 864 floats), as
// DDP's broadcast_buffers sends them every forward. For a model in host memory the span is
// broadcast where it is.
//
//   BufferStaging staging(model.device(), model.buffers().size());
//   comm.broadcast(staging.upload(model.buffers()), /*root=*/0);   // collective
//   staging.download(model.buffers());
#pragma once

#include <cstddef>
#include <memory>
#include <span>

namespace gradsync {

class BufferStaging {
 public:
  BufferStaging();  // host memory, nothing staged
  // device < 0: host memory. device >= 0: a buffer of `floats` floats on that CUDA device (a
  // build without CUDA refuses it; such a build has no GPU models).
  BufferStaging(int device, std::size_t floats);
  ~BufferStaging();
  BufferStaging(BufferStaging&&) noexcept;
  BufferStaging& operator=(BufferStaging&&) noexcept;

  // What the communicator is handed: `host` itself, or the device copy of it (copied
  // synchronously: the statistics are final when this is called, forward_backward having
  // returned, and the communicator's stream reads them after the host did).
  std::span<float> upload(std::span<float> host);
  // The device copy back into `host` once the collective is done (nothing for host memory).
  void download(std::span<float> host);

 private:
  struct Device;
  std::unique_ptr<Device> device_;
};

}  // namespace gradsync
