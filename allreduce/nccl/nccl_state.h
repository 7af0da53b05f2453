// Inside allreduce/nccl/: what NcclCommunicator and its Work handles (nccl_work.cpp) share:
// the communicator's State (which a Work keeps alive, so it may outlive the communicator), the
// device guard, and the CUDA and NCCL call checks. Not for use outside this folder.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "allreduce/communicator.h"
#include "common/error.h"
#include "model/cuda/cuda_device.h"

namespace gradsync::nccl {

// The communicator's state (its own struct rather than NcclCommunicator's member, so that this
// header needs nothing of nccl_communicator.h, which nccl_communicator.cpp completes with it).
struct State {
  int rank = 0;
  int size = 1;
  int device = 0;
  std::chrono::milliseconds timeout{60000};
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaStream_t producer = nullptr;
  cudaEvent_t producer_done = nullptr;  // re-recorded at every issue; a wait captures its state
  float* barrier_scratch = nullptr;     // one float on the device for barrier()
  std::uint64_t sequence = 0;           // collectives issued so far
  CommCounters counters;
  bool aborted = false;
  std::mutex failure_mutex;
  std::string failure;  // the first failure; every later call rethrows it

  std::string where() const { return "NCCL on cuda:" + std::to_string(device); }

  // Aborting releases NCCL's kernels and proxy threads stuck on a peer that will not come.
  void abort_comm() {
    if (comm != nullptr && !aborted) {
      aborted = true;
      ncclCommAbort(comm);
      comm = nullptr;  // freed by the abort: nothing may reach it any more
    }
  }
  void fail(const std::string& message) {
    std::lock_guard lock(failure_mutex);
    if (failure.empty()) failure = message;
  }
  void throw_if_failed() {
    std::lock_guard lock(failure_mutex);
    if (!failure.empty()) throw Error(failure);
  }
  std::string nccl_message(ncclResult_t result) const {
    std::string text = ncclGetErrorString(result);
    const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
    if (last != nullptr && *last != '\0') text += " (" + std::string(last) + ")";
    return text;
  }
};

// Selects the communicator's device for the calling thread, by cuda::DeviceGuard's rule: it
// restores only a device the thread chose, never the 0 an unchosen thread reports, which would
// create a context on GPU 0 for a rank whose GPU is another one.
class OnDevice {
 public:
  explicit OnDevice(int device) : guard_(device, std::nothrow) {
    if (!guard_.ok()) {
      throw Error("NCCL on cuda:" + std::to_string(device) + ": cudaSetDevice failed");
    }
  }

 private:
  cuda::DeviceGuard guard_;
};

inline void check_cuda(cudaError_t error, const char* call, const State& state) {
  if (error == cudaSuccess) return;
  cudaGetLastError();
  throw Error(state.where() + ": " + call + ": " + cudaGetErrorName(error) + ": " +
              cudaGetErrorString(error));
}

// A non-blocking communicator may answer ncclInProgress while it finishes a call in the
// background; nothing else may be called on it until that settles (NCCL's rule), so wait for
// it, within the deadline.
inline ncclResult_t settle(State& state, ncclResult_t result,
                           std::chrono::steady_clock::time_point deadline) {
  while (result == ncclInProgress) {
    if (std::chrono::steady_clock::now() > deadline) return ncclInProgress;
    std::this_thread::yield();
    ncclCommGetAsyncError(state.comm, &result);
  }
  return result;
}

// A handle on one issued collective: complete once `done` (recorded on the communicator's
// stream after the NCCL call) has fired. Owns `done`; a null `done` is a collective of nothing,
// complete at once. `what` ("collective #3 allreduce of 1000 floats") names it in errors.
std::shared_ptr<Work> make_work(std::shared_ptr<State> state, cudaEvent_t done, std::string what);

}  // namespace gradsync::nccl
