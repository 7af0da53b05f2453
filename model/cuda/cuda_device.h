// Which CUDA devices this process sees, and a scope that makes one of them current.
//
//   if (cuda_device_count() == 0) { ... skip or refuse ... }   // never throws
//   DeviceGuard on(model_device);   // cudaSetDevice(model_device) until the scope ends
//
// The current device is per host thread, so every public entry point of a GPU object that may
// be called from a thread other than the one that created it opens a DeviceGuard first.
#pragma once

#include <new>
#include <string>

namespace gradsync::cuda {

// Visible devices; 0 when there is no driver, no device, or CUDA_VISIBLE_DEVICES hides them all.
int cuda_device_count();

// Why cuda_device_count() is 0, for messages: the runtime's own words ("no CUDA-capable device
// is detected", "CUDA driver version is insufficient ..."), or "" when devices are visible.
std::string no_device_reason();

// Throws gradsync::Error naming `device` and the count when it is not a visible device.
void require_device(int device, const std::string& what);

class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  // For destructors: never throws; a device that cannot be selected is simply not.
  DeviceGuard(int device, std::nothrow_t) noexcept;
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace gradsync::cuda
