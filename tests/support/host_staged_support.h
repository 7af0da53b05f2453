// What the host-staged communicator's tests share (tests/unit/test_host_staged_*.cpp): the
// staged communicator over a host backend, device buffers filled, read and written from the
// host, and a producer stream held busy so that a collective issued behind it must wait for it.
//
//   gradsync::cuda::Stream producer = gradsync::cuda::make_stream();
//   auto comm = staged(store, r, n, "tcp", producer.get());
//   auto device = garbage(length);                      // NaN: what a copy made too early reads
//   produce_late(producer.get(), &kHoldMs, values, source, device.data());
//   comm->allreduce(device.span(), ReduceOp::kAvg);     // must have waited for the producer
//   CHECK(download(device.span()) == expected);
//
// Every call here makes CUDA calls on the current device: callers hold a DeviceGuard on GPU 0
// and skip without a GPU (gpu_test_support.h). The names live in their own namespace
// (gradsync::testing::host_staged): tests/support/gloo_checks.h has a noisy_data of its own.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "allreduce/communicator.h"
#include "allreduce/make_communicator.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/device_buffer.h"
#include "strategies/allreduce/host_staged_communicator.h"

namespace gradsync::testing::host_staged {

using namespace std::chrono_literals;
using gradsync::Communicator;

// The host backends this build has: tcp always, gloo where libgloo-dev was found.
inline std::vector<std::string> host_backends() {
  std::vector<std::string> names = {"tcp"};
#ifdef GRADSYNC_HAVE_GLOO
  names.push_back("gloo");
#endif
  return names;
}

// One rank's staged communicator: the host communicator of `backend` (device -1), wrapped for
// buffers on GPU 0 with `producer` as the stream whose work each collective waits for.
inline std::shared_ptr<Communicator> staged(gradsync::Store& store, int rank, int size,
                                            const std::string& backend, cudaStream_t producer,
                                            std::chrono::milliseconds timeout = 20s) {
  gradsync::CommunicatorOptions options;
  options.backend = backend;
  options.tcp.timeout = timeout;
  return gradsync::make_host_staged_communicator(
      gradsync::make_communicator(store, rank, size, options), 0, producer);
}

// Per rank, 0.1 (r + 1) / (i + 3): sums that are not whole numbers. With two ranks any order
// of the sum gives the same float, and halving it is exact, so the host computes the result.
inline std::vector<float> noisy_data(int rank, std::size_t length) {
  std::vector<float> data(length);
  for (std::size_t i = 0; i < length; ++i) data[i] = 0.1f * float(rank + 1) / float(i + 3);
  return data;
}

// A producer stream that is busy for `ms` and then writes `values` into `device`: a collective
// issued right after reads garbage unless it waits for the stream. `source` is pinned, so the
// write is truly asynchronous, and must stay alive until the stream has run it.
inline void CUDART_CB hold_stream(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<const int*>(ms)));
}
inline void produce_late(cudaStream_t producer, const int* ms, const std::vector<float>& values,
                         gradsync::cuda::PinnedBuffer<float>& source, float* device) {
  GRADSYNC_CUDA_CHECK(cudaLaunchHostFunc(producer, hold_stream, const_cast<int*>(ms)));
  if (values.empty()) return;
  std::copy(values.begin(), values.end(), source.data());
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(device, source.data(), values.size() * sizeof(float),
                                      cudaMemcpyHostToDevice, producer));
}

// Device memory filled with NaN (all bits set): what a copy that ran too early would read.
inline gradsync::cuda::DeviceBuffer<float> garbage(std::size_t count) {
  gradsync::cuda::DeviceBuffer<float> buffer(count);
  if (count > 0) GRADSYNC_CUDA_CHECK(cudaMemset(buffer.data(), 0xff, buffer.bytes()));
  GRADSYNC_CUDA_CHECK(cudaDeviceSynchronize());
  return buffer;
}

inline std::vector<float> download(std::span<const float> device) {
  std::vector<float> host(device.size());
  if (!host.empty()) {
    GRADSYNC_CUDA_CHECK(
        cudaMemcpy(host.data(), device.data(), device.size_bytes(), cudaMemcpyDeviceToHost));
  }
  return host;
}

inline void upload(std::span<float> device, const std::vector<float>& host) {
  if (host.empty()) return;
  GRADSYNC_CUDA_CHECK(
      cudaMemcpy(device.data(), host.data(), device.size_bytes(), cudaMemcpyHostToDevice));
  GRADSYNC_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace gradsync::testing::host_staged
