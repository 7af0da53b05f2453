#include <chrono>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "allreduce/nccl/nccl_state.h"
#include "common/error.h"

namespace gradsync::nccl {
namespace {

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<State> state, cudaEvent_t done, std::string what)
      : state_(std::move(state)), done_(done), what_(std::move(what)) {}
  // The event calls below run on the communicator's device: on a thread with no device chosen
  // (or another one current), a CUDA call would otherwise create a context on GPU 0.
  ~NcclWork() override {
    if (done_ == nullptr) return;
    cuda::DeviceGuard on(state_->device, std::nothrow);
    // Legal while the event is pending: its resources go when it completes.
    cudaEventDestroy(done_);
  }

  bool completed() const override {
    if (done_ == nullptr || complete_) return true;
    cuda::DeviceGuard on(state_->device, std::nothrow);  // polled: never throws
    return cudaEventQuery(done_) == cudaSuccess;
  }

  void wait(std::chrono::milliseconds timeout) override {
    if (done_ == nullptr || complete_) return;
    State& s = *state_;
    const OnDevice on(s.device);
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + timeout;
    for (int polls = 0;; ++polls) {
      s.throw_if_failed();  // another Work of this communicator failed: this one never will end
      const cudaError_t query = cudaEventQuery(done_);
      if (query == cudaSuccess) {
        complete_ = true;
        return;
      }
      if (query != cudaErrorNotReady) {
        cudaGetLastError();
        fail_and_throw<Error>(std::string("CUDA error while waiting: ") + cudaGetErrorName(query) +
                              ": " + cudaGetErrorString(query));
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(s.comm, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        fail_and_throw<Error>("NCCL error: " + s.nccl_message(async));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        fail_and_throw<TimeoutError>(
            "not complete after " + std::to_string(timeout.count()) +
            " ms; NCCL cannot tell which rank is late (any of the " + std::to_string(s.size) +
            " ranks that has not issued this collective); the communicator was aborted");
      }
      // Spin briefly for the short collectives of a training step, then stop burning a core.
      if (polls < 2000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  }

 private:
  template <typename E>
  [[noreturn]] void fail_and_throw(const std::string& problem) {
    State& s = *state_;
    // The failure is recorded before the abort, as abort() does: a Work waiting beside this one
    // then stops at throw_if_failed() with this reason, rather than querying the aborted
    // communicator and recording its "invalid argument" as the cause.
    if constexpr (std::is_same_v<E, TimeoutError>) {
      TimeoutError error(s.rank, s.where(), what_, problem);
      s.fail(error.what());
      s.abort_comm();
      throw error;
    } else {
      const std::string message = "rank " + std::to_string(s.rank) + " (" + s.where() +
                                  ") during " + what_ + ": " + problem;
      s.fail(message);
      s.abort_comm();
      throw Error(message);
    }
  }

  std::shared_ptr<State> state_;
  cudaEvent_t done_;
  std::string what_;
  bool complete_ = false;
};

}  // namespace

std::shared_ptr<Work> make_work(std::shared_ptr<State> state, cudaEvent_t done, std::string what) {
  return std::make_shared<NcclWork>(std::move(state), done, std::move(what));
}

}  // namespace gradsync::nccl
