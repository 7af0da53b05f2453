#include "bench/nccl_bench.h"

#include "common/error.h"
#ifdef GRADSYNC_HAVE_NCCL
#include "allreduce/nccl/nccl_communicator.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/cuda_device.h"
#include "model/cuda/device_buffer.h"
#endif

namespace gradsync {

#ifdef GRADSYNC_HAVE_NCCL
namespace {

// One rank: its communicator on GPU `rank` and device mirrors of the host buffers.
class NcclRank final : public BenchRank {
 public:
  NcclRank(const CollectiveOp& op, std::unique_ptr<NcclCommunicator> comm)
      : op_(op), comm_(std::move(comm)) {}

  void barrier() override { comm_->barrier(); }

  void run(RankBuffers& buffers, bool in_place) override { run_many(buffers, in_place, 1); }

  void run_many(RankBuffers& /*buffers*/, bool in_place, int times) override {
    std::shared_ptr<Work> last;
    for (int k = 0; k < times; ++k) last = issue(in_place);
    // One stream, in order: the last one done means all are.
    if (last) last->wait(comm_->timeout());
  }

  void load(RankBuffers& buffers) override {
    cuda::DeviceGuard on(comm_->device());
    copy_in(in_, buffers.in);
    copy_in(out_, buffers.out);
  }

  void unload(RankBuffers& buffers) override {
    cuda::DeviceGuard on(comm_->device());
    GRADSYNC_CUDA_CHECK(
        cudaMemcpy(buffers.out.data(), out_.data(), out_.bytes(), cudaMemcpyDeviceToHost));
  }

 private:
  // The composed forms (collective_ops.h: broadcast out of place, allgather in place) copy on
  // the communicator's stream, so the copy is ordered before the collective without a host
  // wait, and timed with it. Allreduce out of place is NCCL's own.
  std::shared_ptr<Work> issue(bool in_place) {
    cuda::DeviceGuard on(comm_->device());
    if (op_.name == "allreduce") {
      if (!in_place) return comm_->allreduce_into_async(in_.span(), out_.span(), ReduceOp::kSum);
      return comm_->allreduce_async(out_.span(), ReduceOp::kSum);
    }
    if (op_.name == "broadcast") {
      if (!in_place && comm_->rank() == 0) copy(out_.data(), in_.data(), in_.bytes());
      return comm_->broadcast_async(out_.span(), 0);
    }
    if (in_place) copy(in_.data(), out_.data() + comm_->rank() * in_.size(), in_.bytes());
    return comm_->allgather_async(in_.span(), out_.span());
  }

  void copy(float* to, const float* from, std::size_t bytes) {
    GRADSYNC_CUDA_CHECK(
        cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, comm_->stream()));
  }

  // Reallocates only when the row's size changes. The device is synchronised before and after:
  // a cudaMemcpy from pageable memory may return before its DMA lands, and the communicator's
  // non-blocking stream would not wait for it.
  static void copy_in(cuda::DeviceBuffer<float>& device, const std::vector<float>& host) {
    GRADSYNC_CUDA_CHECK(cudaDeviceSynchronize());
    if (device.size() != host.size()) device = cuda::DeviceBuffer<float>(host.size());
    if (!host.empty()) {
      GRADSYNC_CUDA_CHECK(
          cudaMemcpy(device.data(), host.data(), device.bytes(), cudaMemcpyHostToDevice));
    }
    GRADSYNC_CUDA_CHECK(cudaDeviceSynchronize());
  }

  const CollectiveOp& op_;
  std::unique_ptr<NcclCommunicator> comm_;
  cuda::DeviceBuffer<float> in_;
  cuda::DeviceBuffer<float> out_;
};

}  // namespace

GpuSweep nccl_sweep_setup(int& ranks) {
  const int visible = cuda::cuda_device_count();
  if (visible == 0) {
    throw ConfigError("bench", "--device",
                      "gpu: no CUDA device is visible (" + cuda::no_device_reason() + ")");
  }
  if (ranks <= 0) ranks = visible;
  if (ranks > visible) {
    throw ConfigError("bench", "--ranks",
                      std::to_string(ranks) + " ranks need " + std::to_string(ranks) +
                          " GPUs (one rank per GPU: NCCL " +
                          "cannot put two ranks on one device); " + std::to_string(visible) +
                          " visible");
  }
  return {"NCCL " + NcclCommunicator::version() + ", GPUs 0.." + std::to_string(ranks - 1) +
          ", one rank per GPU"};
}

std::unique_ptr<BenchRank> make_nccl_rank(const CollectiveOp& op, Store& store, int rank, int size,
                                          std::chrono::milliseconds timeout) {
  NcclOptions options;
  options.device = rank;
  options.timeout = timeout;
  options.store_prefix = "bench/nccl";
  return std::make_unique<NcclRank>(op, NcclCommunicator::create(store, rank, size, options));
}

#else

GpuSweep nccl_sweep_setup(int& /*ranks*/) {
  throw ConfigError("bench", "--device",
                    "gpu needs a gradsync built with CUDA and NCCL (this build has no NCCL)");
}

std::unique_ptr<BenchRank> make_nccl_rank(const CollectiveOp& /*op*/, Store& /*store*/,
                                          int /*rank*/, int /*size*/,
                                          std::chrono::milliseconds /*timeout*/) {
  throw ConfigError("bench", "--device",
                    "gpu needs a gradsync built with CUDA and NCCL (this build has no NCCL)");
}

#endif

}  // namespace gradsync
