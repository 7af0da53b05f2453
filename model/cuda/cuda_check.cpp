#include "model/cuda/cuda_check.h"

#include "common/error.h"

namespace gradsync::cuda {
namespace {

// __FILE__ is absolute in CMake builds; the part from the source tree's top folder is enough.
std::string short_path(const char* file) {
  std::string path = file;
  // The folders whose files check CUDA calls.
  for (const char* top : {"/model/", "/strategies/", "/bench/", "/tests/"}) {
    const auto at = path.rfind(top);
    if (at != std::string::npos) return path.substr(at + 1);
  }
  return path;
}

}  // namespace

std::string current_device_label() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so it does not leak into the next check
    return "cuda:?";
  }
  return "cuda:" + std::to_string(device);
}

void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line) {
  cudaGetLastError();  // non-sticky errors would otherwise be reported again by the next check
  throw Error("CUDA error on " + current_device_label() + " in " + call + " (" + short_path(file) +
              ":" + std::to_string(line) + "): " + cudaGetErrorName(error) + ": " +
              cudaGetErrorString(error));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error("cuBLAS error on " + current_device_label() + " in " + call + " (" +
              short_path(file) + ":" + std::to_string(line) + "): " + cublasGetStatusName(status) +
              ": " + cublasGetStatusString(status));
}

}  // namespace gradsync::cuda
