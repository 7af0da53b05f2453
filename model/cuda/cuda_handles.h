// Owning CUDA handles: a non-blocking stream, a timing-free event and a cuBLAS handle, each
// created on the calling thread's current device and released with that device current.
//
//   cuda::DeviceGuard on(device);
//   cuda::Stream stream = cuda::make_stream();              // cudaStreamNonBlocking
//   cuda::Cublas blas = cuda::make_cublas(stream.get());    // bound to that stream
//   cuda::Event done = cuda::make_event();
//
// Why: an object that creates two handles and then fails on a third would otherwise leak the
// first two (its destructor never runs); as members these release whatever was made. Creation
// throws gradsync::Error (GRADSYNC_CUDA_CHECK's message); release never throws. A Stream waits
// for its own work before it goes, so nothing it still runs outlives it. Move-only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <utility>

namespace gradsync::cuda {

namespace detail {
void release_stream(cudaStream_t stream) noexcept;  // synchronise, then destroy
void release_event(cudaEvent_t event) noexcept;
void release_cublas(cublasHandle_t handle) noexcept;
}  // namespace detail

template <typename Handle, void (*Release)(Handle) noexcept>
class OwnedHandle {
 public:
  OwnedHandle() = default;
  OwnedHandle(Handle handle, int device) : handle_(handle), device_(device) {}
  ~OwnedHandle() { reset(); }
  OwnedHandle(OwnedHandle&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_) {}
  OwnedHandle& operator=(OwnedHandle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
      device_ = other.device_;
    }
    return *this;
  }
  OwnedHandle(const OwnedHandle&) = delete;
  OwnedHandle& operator=(const OwnedHandle&) = delete;

  Handle get() const { return handle_; }
  void reset() noexcept;

 private:
  Handle handle_ = nullptr;
  int device_ = -1;
};

// Instantiated once, in cuda_handles.cpp, for exactly these three.
extern template class OwnedHandle<cudaStream_t, detail::release_stream>;
extern template class OwnedHandle<cudaEvent_t, detail::release_event>;
extern template class OwnedHandle<cublasHandle_t, detail::release_cublas>;

using Stream = OwnedHandle<cudaStream_t, detail::release_stream>;
using Event = OwnedHandle<cudaEvent_t, detail::release_event>;
using Cublas = OwnedHandle<cublasHandle_t, detail::release_cublas>;

Stream make_stream();
Event make_event();
// Plain FP32 products (no TF32 tensor-op shortcut, as PyTorch's default), on `stream`.
Cublas make_cublas(cudaStream_t stream);

}  // namespace gradsync::cuda
