// Error checking for CUDA runtime and cuBLAS calls: a failure throws gradsync::Error naming the
// call, the device it ran on, the error and where in gradsync it happened, e.g.
//
//   GRADSYNC_CUDA_CHECK(cudaMalloc(&p, bytes));
//   -> "CUDA error on cuda:0 in cudaMalloc(&p, bytes) (model/cuda/device_buffer.h:41):
//       cudaErrorMemoryAllocation: out of memory"
//
// Kernel launches are checked with GRADSYNC_CUDA_CHECK(cudaGetLastError()) right after them;
// errors that surface later (an illegal address inside a kernel) are reported by the next
// synchronising call, which is checked the same way. Library code never aborts (docs/errors.md).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

namespace gradsync::cuda {

// "cuda:N" for the calling thread's current device, "cuda:?" when even that cannot be asked.
std::string current_device_label();

[[noreturn]] void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);

}  // namespace gradsync::cuda

#define GRADSYNC_CUDA_CHECK(call)                                                          \
  do {                                                                                     \
    const cudaError_t gradsync_cuda_error_ = (call);                                       \
    if (gradsync_cuda_error_ != cudaSuccess) {                                             \
      ::gradsync::cuda::throw_cuda_error(gradsync_cuda_error_, #call, __FILE__, __LINE__); \
    }                                                                                      \
  } while (0)

#define GRADSYNC_CUBLAS_CHECK(call)                                                             \
  do {                                                                                          \
    const cublasStatus_t gradsync_cublas_status_ = (call);                                      \
    if (gradsync_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                     \
      ::gradsync::cuda::throw_cublas_error(gradsync_cublas_status_, #call, __FILE__, __LINE__); \
    }                                                                                           \
  } while (0)
