#include "model/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include "common/error.h"
#include "model/cuda/cuda_check.h"

namespace gradsync::cuda {
namespace {

// The device set_device() made this thread's own; -1 until it is called.
thread_local int chosen = -1;

// cudaDriverGetVersion: 0 when no driver is installed, -1 when even that cannot be asked.
int driver_version() {
  int version = 0;
  if (cudaDriverGetVersion(&version) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return version;
}

// "13.0" from the runtime's 13000.
std::string cuda_version_text(int code) {
  return std::to_string(code / 1000) + "." + std::to_string(code % 1000 / 10);
}

// cudaGetDeviceCount's failure in words, with the versions when the driver is too old: the
// line a user needs to see that the driver, not the GPU, is the problem.
std::string describe(cudaError_t error) {
  std::string text = std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
  if (error != cudaErrorInsufficientDriver) return text;
  const int driver = driver_version();
  if (driver == 0) return "no NVIDIA driver is installed: the runtime reports " + text;
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  if (driver > 0) {
    text += " (the driver supports CUDA " + cuda_version_text(driver) + ", gradsync's runtime is " +
            cuda_version_text(runtime) + ")";
  }
  return text;
}

}  // namespace

bool means_no_device(int error, int driver_version) {
  if (error == cudaErrorNoDevice) return true;
  // Without libcuda at all the runtime reports an insufficient driver, and driver version 0.
  return error == cudaErrorInsufficientDriver && driver_version == 0;
}

int cuda_device_count() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaSuccess) return count;
  cudaGetLastError();  // not sticky, but not left for the next checked call to report
  if (means_no_device(error, driver_version())) return 0;
  throw Error("CUDA devices are present but cannot be used: " + describe(error));
}

std::string no_device_reason() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return describe(error);
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

void set_device(int device) {
  GRADSYNC_CUDA_CHECK(cudaSetDevice(device));
  chosen = device;
}

int chosen_device() { return chosen; }

int DeviceGuard::select(int device) noexcept {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();
    current = -1;
  }
  if (current == device) return cudaSuccess;  // nothing changes, so nothing to restore
  const cudaError_t error = cudaSetDevice(device);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return error;
  }
  // Only a device the thread chose is restored: it has its context already, while the 0 an
  // unchosen thread's cudaGetDevice reports may have none, and selecting it would make one.
  restore_ = chosen;
  return cudaSuccess;
}

DeviceGuard::DeviceGuard(int device) {
  const int error = select(device);
  ok_ = error == cudaSuccess;
  if (!ok_) {
    throw_cuda_error(static_cast<cudaError_t>(error), "cudaSetDevice(device)", __FILE__, __LINE__);
  }
}

DeviceGuard::DeviceGuard(int device, std::nothrow_t) noexcept
    : ok_(select(device) == cudaSuccess) {}

DeviceGuard::~DeviceGuard() {
  // Restoring cannot fail for a device that was current a moment ago; a destructor must not
  // throw in any case.
  if (restore_ >= 0) cudaSetDevice(restore_);
}

}  // namespace gradsync::cuda
