// Owning CUDA handles: a non-blocking stream, a timing-free event, a cuBLAS handle and an
// executable CUDA graph, each created on the calling thread's current device and released with
// that device current.
//
//   cuda::DeviceGuard on(device);
//   cuda::Stream stream = cuda::make_stream();              // cudaStreamNonBlocking
//   cuda::Cublas blas = cuda::make_cublas(stream.get());    // bound to that stream
//   cuda::Event done = cuda::make_event();
//   cuda::GraphExec step = cuda::capture_graph(stream.get(), [&] { /* enqueue on stream */ });
//   GRADSYNC_CUDA_CHECK(cudaGraphLaunch(step.get(), stream.get()));
//
// Why: an object that creates two handles and then fails on a third would otherwise leak the
// first two (its destructor never runs); as members these release whatever was made. Creation
// throws gradsync::Error (GRADSYNC_CUDA_CHECK's message); release never throws. A Stream waits
// for its own work before it goes, so nothing it still runs outlives it. Move-only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <functional>
#include <utility>

namespace gradsync::cuda {

namespace detail {
void release_stream(cudaStream_t stream) noexcept;  // synchronise, then destroy
void release_event(cudaEvent_t event) noexcept;
void release_cublas(cublasHandle_t handle) noexcept;
void release_graph(cudaGraph_t graph) noexcept;
void release_graph_exec(cudaGraphExec_t exec) noexcept;  // freed once an in-flight launch ends
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

// Instantiated once, in cuda_handles.cpp, for exactly these five.
extern template class OwnedHandle<cudaStream_t, detail::release_stream>;
extern template class OwnedHandle<cudaEvent_t, detail::release_event>;
extern template class OwnedHandle<cublasHandle_t, detail::release_cublas>;
extern template class OwnedHandle<cudaGraph_t, detail::release_graph>;
extern template class OwnedHandle<cudaGraphExec_t, detail::release_graph_exec>;

using Stream = OwnedHandle<cudaStream_t, detail::release_stream>;
using Event = OwnedHandle<cudaEvent_t, detail::release_event>;
using Cublas = OwnedHandle<cublasHandle_t, detail::release_cublas>;
using Graph = OwnedHandle<cudaGraph_t, detail::release_graph>;
using GraphExec = OwnedHandle<cudaGraphExec_t, detail::release_graph_exec>;

Stream make_stream();
Event make_event();
// Plain FP32 products (no TF32 tensor-op shortcut, as PyTorch's default), on `stream`.
Cublas make_cublas(cudaStream_t stream);

// Records what `enqueue` puts on `stream` (which must be idle and not already capturing) into a
// graph, without running it, and instantiates it for cudaGraphLaunch. The capture is
// thread-local (cudaStreamCaptureModeThreadLocal): `enqueue` may only enqueue asynchronous work
// on `stream` (kernels, cuBLAS calls, cudaMemcpyAsync from pinned memory, cudaMemsetAsync), and a
// synchronising call on this thread fails the capture; other threads are unaffected. A replay
// does the recorded work with the recorded arguments: the same buffer addresses, sizes and
// scalars. If `enqueue` throws, or the capture fails, the capture is ended (the stream is usable
// again) and the error propagates.
GraphExec capture_graph(cudaStream_t stream, const std::function<void()>& enqueue);

}  // namespace gradsync::cuda
