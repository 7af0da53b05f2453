#include "model/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include "common/error.h"
#include "model/cuda/cuda_check.h"

namespace gradsync::cuda {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

std::string no_device_reason() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
  }
  return count == 0 ? "no CUDA device is visible (CUDA_VISIBLE_DEVICES?)" : "";
}

void require_device(int device, const std::string& what) {
  const int count = cuda_device_count();
  if (count == 0) throw Error(what + ": no CUDA device is visible (" + no_device_reason() + ")");
  if (device < 0 || device >= count) {
    throw Error(what + ": CUDA device " + std::to_string(device) + " is not visible (" +
                std::to_string(count) + " device(s): 0.." + std::to_string(count - 1) + ")");
  }
}

DeviceGuard::DeviceGuard(int device) {
  GRADSYNC_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) GRADSYNC_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::DeviceGuard(int device, std::nothrow_t) noexcept {
  if (cudaGetDevice(&previous_) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
  }
}

DeviceGuard::~DeviceGuard() {
  // Restoring cannot fail for a device that was current a moment ago; a destructor must not
  // throw in any case.
  if (previous_ >= 0) cudaSetDevice(previous_);
}

}  // namespace gradsync::cuda
