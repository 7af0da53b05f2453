// Which CUDA devices this process sees, the device a thread works on, and a scope that makes
// one of them current.
//
//   if (cuda_device_count() == 0) { ... skip or refuse ... }   // throws only for unusable GPUs
//   set_device(model_device);       // once, on a thread that trains: its own device from now on
//   DeviceGuard on(model_device);   // cudaSetDevice(model_device) until the scope ends
//
// The current device is per host thread, so every public entry point of a GPU object that may
// be called from a thread other than the one that created it opens a DeviceGuard first.
//
// Why guards restore only a device the thread chose: on a thread that never called
// cudaSetDevice, cudaGetDevice answers 0 without any context existing, and since CUDA 12
// cudaSetDevice(0) creates device 0's primary context (about 0.5 GiB). A guard that "restored"
// that 0 would leave such a context on GPU 0 from every rank whose GPU is another one.
#pragma once

#include <new>
#include <string>

namespace gradsync::cuda {

// Visible devices; 0 when this host has none to use: no NVIDIA driver installed at all, no
// device, or CUDA_VISIBLE_DEVICES hides them all. Throws gradsync::Error with the runtime's
// reason when a driver is there but the devices cannot be used (a driver older than this CUDA
// runtime, a driver/library mismatch, devices unavailable): a GPU machine whose GPUs cannot
// be reached must say so, not pass for a machine without GPUs.
int cuda_device_count();

// cudaGetDeviceCount's `error` (a cudaError_t), given cudaDriverGetVersion's `driver_version`:
// true when it means "no device on this host" (cudaErrorNoDevice; cudaErrorInsufficientDriver
// with driver version 0, which is how the runtime reports that no driver is installed at all),
// false for a failure to reach devices that are there (the same error with a real, too old,
// driver version, or any other error). Pure: the rule cuda_device_count() applies.
bool means_no_device(int error, int driver_version);

// Why cuda_device_count() is 0 or throws, for messages: the runtime's own words ("no
// CUDA-capable device is detected", "CUDA driver version is insufficient ..."), naming a
// missing driver as such, or "" when devices are visible.
std::string no_device_reason();

// Throws gradsync::Error naming `device` and the count when it is not a visible device.
void require_device(int device, const std::string& what);

// Makes `device` current on the calling thread and records it as the thread's own: the device
// DeviceGuards on this thread restore when they end. Called once where a thread starts its GPU
// work (make_model does, on the thread that builds and trains a GPU model: a worker process's
// main thread, each dp replica's thread). Throws gradsync::Error when it cannot be selected.
void set_device(int device);

// The device set_device() chose on this thread; -1 when it never chose one.
int chosen_device();

// Makes `device` current for a scope. Finding it current already, it does nothing (no call,
// nothing to restore). Otherwise it selects it, and at the end restores the thread's chosen
// device (set_device), or leaves `device` current on a thread that never chose one: restoring
// cudaGetDevice's default 0 there would create a context on GPU 0 (see the top of this file).
class DeviceGuard {
 public:
  // Throws gradsync::Error when `device` cannot be selected.
  explicit DeviceGuard(int device);
  // For destructors and polling: never throws; ok() says whether `device` is current.
  DeviceGuard(int device, std::nothrow_t) noexcept;
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  bool ok() const { return ok_; }

 private:
  // Selects `device` unless current: cudaSetDevice's cudaError_t (0: success), cleared.
  int select(int device) noexcept;

  int restore_ = -1;  // the device to make current again at the end; -1: none
  bool ok_ = false;
};

}  // namespace gradsync::cuda
