#include "strategies/allreduce/buffer_staging.h"

#include <string>

#include "common/error.h"
#ifdef GRADSYNC_HAVE_CUDA
#include "model/cuda/cuda_device.h"
#include "model/cuda/device_buffer.h"
#endif

namespace gradsync {

#ifdef GRADSYNC_HAVE_CUDA
struct BufferStaging::Device {
  cuda::DeviceBuffer<float> buffer;
};
#else
struct BufferStaging::Device {};
#endif

BufferStaging::BufferStaging(int device, std::size_t floats) {
  if (device < 0) return;
#ifdef GRADSYNC_HAVE_CUDA
  cuda::DeviceGuard on(device);
  device_ = std::make_unique<Device>(Device{cuda::DeviceBuffer<float>(floats)});
#else
  (void)floats;
  throw Error("buffer staging: a model on cuda:" + std::to_string(device) +
              " in a build without CUDA");
#endif
}

BufferStaging::BufferStaging() = default;
BufferStaging::~BufferStaging() = default;
BufferStaging::BufferStaging(BufferStaging&&) noexcept = default;
BufferStaging& BufferStaging::operator=(BufferStaging&&) noexcept = default;

std::span<float> BufferStaging::upload(std::span<float> host) {
  if (!device_) return host;
#ifdef GRADSYNC_HAVE_CUDA
  // The legacy stream, waited for: nothing else is queued on it.
  device_->buffer.copy_from_host(host, nullptr, "buffer staging (running statistics)");
  return device_->buffer.span();
#else
  return host;
#endif
}

void BufferStaging::download(std::span<float> host) {
  if (!device_) return;
#ifdef GRADSYNC_HAVE_CUDA
  device_->buffer.copy_to_host(host, nullptr, "buffer staging (running statistics)");
#else
  (void)host;
#endif
}

}  // namespace gradsync
