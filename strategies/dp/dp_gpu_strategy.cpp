#include "strategies/dp/dp_gpu_strategy.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include "allreduce/in_memory_store.h"
#include "allreduce/nccl/nccl_communicator.h"
#include "common/error.h"
#include "common/stopwatch.h"
#include "model/cuda/cuda_device.h"
#include "model/cuda/device_sgd.h"
#include "strategies/buffer_staging.h"

namespace gradsync {
namespace {

struct DpGpuGroup {
  int replicas = 1;
  SgdOptions sgd;
  std::chrono::milliseconds timeout{60000};
  InMemoryStore store;  // the replicas' NCCL rendezvous
  std::atomic<bool> aborted{false};
  std::mutex reason_mutex;
  std::string reason;

  std::string read_reason() {
    std::lock_guard lock(reason_mutex);
    return reason;
  }
};

// The CUDA device that holds `data`; throws when it is host memory: the GPU dp needs every
// replica's model on a GPU.
int device_of(const float* data, int replica) {
  // Asked from replica r's GPU (model_device places replica r on GPU r): any CUDA call on a
  // thread with no device chosen would otherwise create a context on GPU 0. A no-op where the
  // replica's thread made its model there (make_model set that device).
  const cuda::DeviceGuard on(replica, std::nothrow);
  cudaPointerAttributes attributes{};
  const cudaError_t error = cudaPointerGetAttributes(&attributes, data);
  if (error != cudaSuccess) cudaGetLastError();
  if (error != cudaSuccess ||
      (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged)) {
    throw Error("dp on GPUs: replica " + std::to_string(replica) +
                "'s parameters are not in GPU memory (its model must be built with device: gpu)");
  }
  return attributes.device;
}

class DpGpuReplica final : public SyncStrategy {
 public:
  DpGpuReplica(std::shared_ptr<DpGpuGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  ~DpGpuReplica() override {
    // A replica that finished while another failed (after the last collective: a checkpoint
    // or the final evaluation) must not finalise: that waits for the failed replica's
    // communicator, which was aborted. Abort this one too.
    if (comm_ && group_->aborted) abort_comm(group_->read_reason());
  }

  std::string_view name() const override { return "dp"; }
  int rank() const override { return rank_; }
  StepStats last_step_stats() const override { return stats_; }
  Optimizer* optimizer() override { return sgd_.get(); }
  // Running statistics (the GPU ResNet's, host memory): DataParallel replicates module 0's
  // buffers with its parameters every forward, so they follow replica 0's after every step.
  void attach_buffers(std::span<float> buffers) override { buffers_ = buffers; }

  void init(std::span<float> params) override {
    DpGpuGroup& g = *group_;
    NcclOptions options;
    options.device = device_of(params.data(), rank_);
    options.timeout = g.timeout;
    options.store_prefix = "dp";
    comm_ = NcclCommunicator::create(g.store, rank_, g.replicas, options);
    if (rank_ == 0) sgd_ = std::make_unique<DeviceSgd>(params.size(), g.sgd, options.device);
    // DataParallel replicates module 0: every replica starts from replica 0's parameters.
    wait(comm_->broadcast_async(params, 0));
    if (!buffers_.empty()) {
      staging_ = BufferStaging(options.device);
      wait(comm_->broadcast_async(staging_.upload(buffers_), 0));
      staging_.download(buffers_);
    }
  }

  void synchronize(std::span<float> grads, std::span<float> params) override {
    stats_ = StepStats{};
    const std::uint64_t bytes = params.size_bytes();
    Stopwatch phase;
    // The gradients are final: forward_backward returned after its stream finished.
    auto reduced = comm_->reduce_async(grads, ReduceOp::kAvg, 0);
    if (rank_ == 0) {
      wait(reduced);
      Stopwatch update;
      sgd_->step(params, grads);
      stats_.compute_s = update.seconds();
      const std::uint64_t others = bytes * static_cast<std::uint64_t>(group_->replicas - 1);
      stats_.bytes_received = others;
      stats_.bytes_sent = others;
    } else {
      stats_.bytes_sent = bytes;      // its gradient, reduced onto replica 0
      stats_.bytes_received = bytes;  // the parameters replica 0 broadcasts
    }
    // Issued after the update on replica 0 (it waited for it); the others' broadcast simply
    // waits on their devices until replica 0's data arrives.
    wait(comm_->broadcast_async(params, 0));
    if (rank_ != 0) wait(reduced);
    if (!buffers_.empty()) {
      // After the parameters: replica 0's statistics of this step's forward, final since its
      // forward_backward returned; a replica's own are what it overwrites here.
      wait(comm_->broadcast_async(staging_.upload(buffers_), 0));
      staging_.download(buffers_);
      const std::uint64_t moved =
          buffers_.size_bytes() * static_cast<std::uint64_t>(rank_ == 0 ? group_->replicas - 1 : 1);
      (rank_ == 0 ? stats_.bytes_sent : stats_.bytes_received) += moved;
    }
    stats_.communicate_s = phase.seconds() - stats_.compute_s;
  }

  void abort(const std::string& reason) override {
    DpGpuGroup& g = *group_;
    {
      std::lock_guard lock(g.reason_mutex);
      if (g.reason.empty()) g.reason = reason;
    }
    g.aborted = true;
    // Only this replica's thread uses its communicator, and it is here, not in a collective.
    if (comm_) abort_comm(reason);
    comm_.reset();
  }

 private:
  // Aborted, not finalised: finalising waits for the other replicas' communicators.
  void abort_comm(const std::string& reason) {
    comm_->abort("dp replica " + std::to_string(rank_) + ": " + reason);
  }

  // Work::wait, but woken by a peer's abort: NCCL would otherwise keep this replica waiting
  // for a contribution that will never come, until the timeout.
  void wait(const std::shared_ptr<Work>& work) {
    DpGpuGroup& g = *group_;
    const auto deadline = std::chrono::steady_clock::now() + g.timeout;
    while (!work->completed()) {
      std::string problem;
      if (g.aborted) {
        problem = g.read_reason();
      } else if (std::chrono::steady_clock::now() > deadline) {
        problem = "the step's reduce/broadcast did not complete within " +
                  std::to_string(g.timeout.count()) + " ms (NCCL cannot tell which of the " +
                  std::to_string(g.replicas) + " replicas is late)";
      }
      if (!problem.empty()) {
        const int device = comm_->device();
        bool timed_out = false;
        {
          std::lock_guard lock(g.reason_mutex);
          if (!g.aborted) {
            // This replica is the first to give up: the others stop waiting now, not at
            // their own deadlines.
            g.reason = "replica " + std::to_string(rank_) + ": " + problem;
            g.aborted = true;
            timed_out = true;
          } else {
            problem = g.reason;  // another replica gave up first: its reason is the cause
          }
        }
        // Thrown at once, so the first cause is caught first (train_in_process reports the
        // first failure); the caller's abort() then aborts this replica's communicator.
        if (!timed_out) throw Error("dp replica " + std::to_string(rank_) + ": " + problem);
        throw TimeoutError(rank_, "dp on cuda:" + std::to_string(device), "dp step", problem);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    work->wait(g.timeout);  // complete: returns at once, or rethrows an NCCL failure
  }

  std::shared_ptr<DpGpuGroup> group_;
  int rank_;
  std::unique_ptr<NcclCommunicator> comm_;
  std::unique_ptr<DeviceSgd> sgd_;
  std::span<float> buffers_;
  BufferStaging staging_;
  StepStats stats_;
};

}  // namespace

std::vector<std::unique_ptr<SyncStrategy>> make_dp_gpu_group(int replicas, const SgdOptions& sgd,
                                                             std::chrono::milliseconds timeout) {
  GRADSYNC_CHECK(replicas >= 1, "dp needs at least one replica");
  auto group = std::make_shared<DpGpuGroup>();
  group->replicas = replicas;
  group->sgd = sgd;
  group->timeout = timeout;
  std::vector<std::unique_ptr<SyncStrategy>> out;
  for (int r = 0; r < replicas; ++r) out.push_back(std::make_unique<DpGpuReplica>(group, r));
  return out;
}

}  // namespace gradsync
