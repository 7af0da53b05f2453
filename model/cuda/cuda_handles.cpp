#include "model/cuda/cuda_handles.h"

#include "model/cuda/cuda_check.h"
#include "model/cuda/cuda_device.h"

namespace gradsync::cuda {
namespace {

int current_device() {
  int device = 0;
  GRADSYNC_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

}  // namespace

namespace detail {

// A failure here cannot be reported; it is cleared, so that the next checked call does not
// report it as its own (the runtime keeps a non-sticky error until someone reads it).
void release_stream(cudaStream_t stream) noexcept {
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  cudaGetLastError();
}

void release_event(cudaEvent_t event) noexcept {
  cudaEventDestroy(event);
  cudaGetLastError();
}

void release_cublas(cublasHandle_t handle) noexcept {
  cublasDestroy(handle);
  cudaGetLastError();
}

void release_graph(cudaGraph_t graph) noexcept {
  cudaGraphDestroy(graph);
  cudaGetLastError();
}

void release_graph_exec(cudaGraphExec_t exec) noexcept {
  cudaGraphExecDestroy(exec);
  cudaGetLastError();
}

}  // namespace detail

template <typename Handle, void (*Release)(Handle) noexcept>
void OwnedHandle<Handle, Release>::reset() noexcept {
  if (handle_ == nullptr) return;
  DeviceGuard on(device_, std::nothrow);
  Release(std::exchange(handle_, nullptr));
}

template class OwnedHandle<cudaStream_t, detail::release_stream>;
template class OwnedHandle<cudaEvent_t, detail::release_event>;
template class OwnedHandle<cublasHandle_t, detail::release_cublas>;
template class OwnedHandle<cudaGraph_t, detail::release_graph>;
template class OwnedHandle<cudaGraphExec_t, detail::release_graph_exec>;

Stream make_stream() {
  const int device = current_device();
  cudaStream_t stream = nullptr;
  GRADSYNC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return Stream(stream, device);
}

Event make_event() {
  const int device = current_device();
  cudaEvent_t event = nullptr;
  GRADSYNC_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return Event(event, device);
}

Cublas make_cublas(cudaStream_t stream) {
  const int device = current_device();
  cublasHandle_t raw = nullptr;
  GRADSYNC_CUBLAS_CHECK(cublasCreate(&raw));
  Cublas handle(raw, device);  // owned from here: released if configuring it fails
  GRADSYNC_CUBLAS_CHECK(cublasSetStream(raw, stream));
  GRADSYNC_CUBLAS_CHECK(cublasSetMathMode(raw, CUBLAS_DEFAULT_MATH));
  return handle;
}

GraphExec capture_graph(cudaStream_t stream, const std::function<void()>& enqueue) {
  const int device = current_device();
  GRADSYNC_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue();
  } catch (...) {
    // A stream left capturing would fail every later call on it: end the capture, drop the
    // partial graph and the error that ending an invalidated capture reports.
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);
    if (partial != nullptr) cudaGraphDestroy(partial);
    cudaGetLastError();
    throw;
  }
  cudaGraph_t raw_graph = nullptr;
  // Fails (cudaErrorStreamCaptureInvalidated and the like) when a call during the capture
  // was not capturable; the stream is out of capture mode either way.
  GRADSYNC_CUDA_CHECK(cudaStreamEndCapture(stream, &raw_graph));
  Graph graph(raw_graph, device);  // the executable graph is a copy: this one goes at scope end
  cudaGraphExec_t raw_exec = nullptr;
  GRADSYNC_CUDA_CHECK(cudaGraphInstantiate(&raw_exec, graph.get(), 0));
  return GraphExec(raw_exec, device);
}

}  // namespace gradsync::cuda
