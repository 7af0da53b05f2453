// Which devices count as "no GPU here", and the device a thread works on: guards restore only
// a device the thread chose, so that no rank leaves a context on GPU 0 it does not use. The
// rules that need no device run everywhere; the rest skip without enough GPUs.
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <thread>

#include "common/error.h"
#include "gpu_test_support.h"
#include "model/cuda/cuda_device.h"

namespace {

using gradsync::cuda::chosen_device;
using gradsync::cuda::DeviceGuard;
using gradsync::cuda::means_no_device;
using gradsync::cuda::set_device;

int current_device() {
  int device = -1;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  return device;
}

// Runs `body` on a fresh thread: one that has never chosen a device, as a rank's or a replica's
// thread starts. (doctest's checks are thread-safe.)
template <typename F>
void on_fresh_thread(F&& body) {
  std::thread(std::forward<F>(body)).join();
}

}  // namespace

TEST_CASE("cuda device: only 'no device' and 'no driver at all' mean a host without GPUs") {
  CHECK(means_no_device(cudaErrorNoDevice, 12040));
  CHECK(means_no_device(cudaErrorNoDevice, 0));
  // No libcuda: the runtime says "insufficient driver" and reports driver version 0.
  CHECK(means_no_device(cudaErrorInsufficientDriver, 0));
  // A driver that is there but older than the runtime: GPUs are present and unusable.
  CHECK_FALSE(means_no_device(cudaErrorInsufficientDriver, 12040));
  CHECK_FALSE(means_no_device(cudaErrorInsufficientDriver, -1));
  CHECK_FALSE(means_no_device(cudaErrorSystemDriverMismatch, 13000));
  CHECK_FALSE(means_no_device(cudaErrorDevicesUnavailable, 13000));
}

TEST_CASE("cuda device: a device that cannot be selected fails the guard, and changes nothing") {
  on_fresh_thread([] {
    CHECK(chosen_device() == -1);
    {
      const DeviceGuard guard(999, std::nothrow);
      CHECK_FALSE(guard.ok());
    }
    CHECK_THROWS_AS(DeviceGuard(999), gradsync::Error);
    CHECK(chosen_device() == -1);
  });
}

TEST_CASE("cuda device: set_device makes the device the thread's own") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  on_fresh_thread([] {
    set_device(0);
    CHECK(chosen_device() == 0);
    CHECK(current_device() == 0);
    {
      // Already current: the guard neither selects nor restores anything.
      const DeviceGuard guard(0);
      CHECK(guard.ok());
      CHECK(current_device() == 0);
    }
    CHECK(current_device() == 0);
  });
  CHECK(chosen_device() != 0);  // per thread: this one chose nothing there
}

TEST_CASE("cuda device: guards restore the chosen device, never an unchosen thread's 0") {
  GRADSYNC_SKIP_WITHOUT_GPUS(2);
  // A thread that never chose: cudaGetDevice says 0 without a context on GPU 0; restoring it
  // would create one. The guarded device stays current instead.
  on_fresh_thread([] {
    { const DeviceGuard guard(1); }
    CHECK(current_device() == 1);
    CHECK(chosen_device() == -1);
  });
  // A thread that chose GPU 1 gets it back after a guard on GPU 0.
  on_fresh_thread([] {
    set_device(1);
    {
      const DeviceGuard guard(0);
      CHECK(current_device() == 0);
    }
    CHECK(current_device() == 1);
  });
}
