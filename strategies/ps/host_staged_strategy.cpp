#include "strategies/ps/host_staged_strategy.h"

#include <string>

#include "common/error.h"
#ifdef GRADSYNC_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "common/stopwatch.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/cuda_device.h"
#include "model/cuda/cuda_handles.h"
#include "model/cuda/cuda_mlp.h"
#include "model/cuda/device_buffer.h"
#endif

namespace gradsync {

#ifdef GRADSYNC_HAVE_CUDA
namespace {

class HostStagedStrategy final : public SyncStrategy {
 public:
  HostStagedStrategy(std::unique_ptr<SyncStrategy> inner, int device, cudaStream_t producer)
      : inner_(std::move(inner)), device_(device), producer_(producer) {
    cuda::DeviceGuard on(device_);
    copies_ = cuda::make_stream();
    produced_ = cuda::make_event();
  }

  std::string_view name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  StepStats last_step_stats() const override { return stats_; }
  Optimizer* optimizer() override { return inner_->optimizer(); }
  void abort(const std::string& reason) override { inner_->abort(reason); }

  void init(std::span<float> params) override {
    cuda::DeviceGuard on(device_);
    host_params_ = cuda::PinnedBuffer<float>(params.size());
    host_grads_ = cuda::PinnedBuffer<float>(params.size());
    to_host(params, host_params_.span(), 0, params.size());
    GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(copies_.get()));
    inner_->init(host_params_.span());  // rank 0 sends, the others pull: copy back either way
    to_device(params);
  }

  void gradient_ready(std::span<float> grads, std::size_t begin, std::size_t end) override {
    cuda::DeviceGuard on(device_);
    if (!step_started_) {
      step_started_ = true;
      staged_begin_ = grads.size();
    }
    // Ranges arrive back to front and contiguous (Model's contract), so what is staged is
    // always [staged_begin_, size).
    GRADSYNC_CHECK(end == staged_begin_ && begin < end,
                   "gradient ranges must arrive contiguous, from the end of the buffer");
    if (producer_ != nullptr) {
      GRADSYNC_CUDA_CHECK(cudaEventRecord(produced_.get(), producer_));
      GRADSYNC_CUDA_CHECK(cudaStreamWaitEvent(copies_.get(), produced_.get(), 0));
    }
    to_host(grads, host_grads_.span(), begin, end);
    staged_begin_ = begin;
  }

  void synchronize(std::span<float> grads, std::span<float> params) override {
    cuda::DeviceGuard on(device_);
    Stopwatch staging;
    // Without gradient_ready calls (no hook, or accumulation's earlier micro-batches only),
    // the whole buffer is still to copy; forward_backward has finished it by now.
    const std::size_t rest = step_started_ ? staged_begin_ : grads.size();
    if (rest > 0) to_host(grads, host_grads_.span(), 0, rest);
    step_started_ = false;
    GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(copies_.get()));
    double staged_s = staging.seconds();
    inner_->synchronize(host_grads_.span(), host_params_.span());
    staging.restart();
    to_device(params);
    staged_s += staging.seconds();
    stats_ = inner_->last_step_stats();
    stats_.communicate_s += staged_s;  // device <-> host copies are this strategy's traffic
  }

  void finish(std::span<float> grads, std::span<float> params) override {
    cuda::DeviceGuard on(device_);
    to_host(grads, host_grads_.span(), 0, grads.size());
    GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(copies_.get()));
    inner_->finish(host_grads_.span(), host_params_.span());
    to_device(params);
  }

 private:
  void to_host(std::span<float> device, std::span<float> host, std::size_t begin, std::size_t end) {
    if (end <= begin) return;
    GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(host.data() + begin, device.data() + begin,
                                        (end - begin) * sizeof(float), cudaMemcpyDeviceToHost,
                                        copies_.get()));
  }
  // Returns once the parameters are on the device: the next forward may run on any stream.
  void to_device(std::span<float> params) {
    GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(params.data(), host_params_.data(), params.size_bytes(),
                                        cudaMemcpyHostToDevice, copies_.get()));
    GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(copies_.get()));
  }

  std::unique_ptr<SyncStrategy> inner_;
  int device_;
  cudaStream_t producer_;
  cuda::PinnedBuffer<float> host_params_;
  cuda::PinnedBuffer<float> host_grads_;
  // After the pinned buffers, so destroyed first: the copies end before the buffers are freed.
  cuda::Stream copies_;
  cuda::Event produced_;
  bool step_started_ = false;
  std::size_t staged_begin_ = 0;
  StepStats stats_;
};

}  // namespace
#endif

std::unique_ptr<SyncStrategy> adapt_to_model_device(std::unique_ptr<SyncStrategy> strategy,
                                                    Model& model) {
  if (model.device() < 0 || strategy->name() != "ps") return strategy;
#ifdef GRADSYNC_HAVE_CUDA
  return std::make_unique<HostStagedStrategy>(std::move(strategy), model.device(),
                                              model_stream(model));
#else
  throw Error("ps with a model on CUDA device " + std::to_string(model.device()) +
              ": this gradsync was built without CUDA");
#endif
}

}  // namespace gradsync
