// Owning buffers of CUDA memory: DeviceBuffer<T> (cudaMalloc, on the device current at
// construction) and PinnedBuffer<T> (cudaMallocHost: page-locked host memory, which
// cudaMemcpyAsync can copy without staging and so truly overlaps with kernels).
//
//   DeviceBuffer<float> grads(n);          // uninitialised; n == 0 allocates nothing
//   grads.zero(stream);                    // cudaMemsetAsync
//   PinnedBuffer<std::int64_t> staged(batch);
//
// Move-only. Freeing happens in the destructor, with the buffer's own device current (the
// thread may have another one current by then): cudaFree waits for that device to finish work
// that may still use the memory, so a buffer may be destroyed right after its last use is
// enqueued. Allocation failures throw gradsync::Error naming the device and the size.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include "common/error.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/cuda_device.h"

namespace gradsync::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count_ == 0) return;
    GRADSYNC_CUDA_CHECK(cudaGetDevice(&device_));
    GRADSYNC_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), bytes()));
  }
  ~DeviceBuffer() {
    if (data_ == nullptr) return;
    DeviceGuard on(device_, std::nothrow);
    cudaFree(data_);
    cudaGetLastError();  // unreportable here; not left for the next checked call to report
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        count_(std::exchange(other.count_, 0)),
        device_(other.device_) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    std::swap(device_, other.device_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  std::span<T> span() const { return {data_, count_}; }
  void zero(cudaStream_t stream) {
    if (count_ > 0) GRADSYNC_CUDA_CHECK(cudaMemsetAsync(data_, 0, bytes(), stream));
  }
  // The whole buffer into `out` (host memory, size() values) once `stream`'s work so far is done.
  // `what` names the call in the error for a wrong size.
  void copy_to_host(std::span<T> out, cudaStream_t stream, const char* what) const {
    GRADSYNC_CHECK(out.size() == count_, std::string(what) + ": size != param_count()");
    DeviceGuard on(device_);
    GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream));
    GRADSYNC_CUDA_CHECK(cudaMemcpy(out.data(), data_, bytes(), cudaMemcpyDeviceToHost));
  }
  // `in` (host memory, size() values) into the whole buffer, on `stream`, then waited for: a plain
  // cudaMemcpy from pageable memory may return before its DMA lands, and the non-blocking
  // streams that read the buffer next would not wait.
  void copy_from_host(std::span<const T> in, cudaStream_t stream, const char* what) {
    GRADSYNC_CHECK(in.size() == count_, std::string(what) + ": size != param_count()");
    DeviceGuard on(device_);
    GRADSYNC_CUDA_CHECK(
        cudaMemcpyAsync(data_, in.data(), bytes(), cudaMemcpyHostToDevice, stream));
    GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
  int device_ = 0;  // where data_ was allocated
};

template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t count) : count_(count) {
    if (count_ > 0) {
      GRADSYNC_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), count_ * sizeof(T)));
    }
  }
  ~PinnedBuffer() {
    if (data_ == nullptr) return;
    cudaFreeHost(data_);
    cudaGetLastError();  // unreportable here; not left for the next checked call to report
  }
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  T* data() const { return data_; }
  std::size_t size() const { return count_; }
  std::span<T> span() const { return {data_, count_}; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace gradsync::cuda
