// BatchStatsExchange: SyncBatchNorm for the CUDA ResNet. Hands each batch norm's statistics to
// the model's BatchStatsReducer (model/model.h) in exactly the form the CPU's BatchNorm hands
// them (model/resnet/batch_norm.h): forward [sum (C), sum of squares (C), count], backward
// [sum of dy (C), sum of dy * xhat (C), count], floats in host memory; the reducer leaves
// every rank's sum there. The sums come off the device, are reduced, and go back for the
// kernels, so a GPU rank normalises by the global batch exactly as a CPU rank does.
//
//   BatchStatsExchange sync(max_channels);  sync.set_reducer(reducer);  // null: local statistics
//   // forward, after kernels::channel_sums into `sums` (device, 2C doubles):
//   const std::int64_t count = sync.forward(channels, pixels, sums, stream);
//   // backward, after kernels::bn_backward_sums and bn_backward_factors:
//   const float* reduced = sync.backward(channels, pixels, count, dsums, invstd, stream);
//   kernels::bn_backward_factors_reduced(channels, reduced, gamma, factors, stream);
//
// Each call waits for `stream` (the reducer is a blocking collective over host values): the
// price of SyncBatchNorm, two small round trips per batch norm per step, as in PyTorch. The
// reducer is called on the calling thread; every rank must reach the same batch norms in the
// same order. Not thread-safe: one per model.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <utility>

#include "model/cuda/device_buffer.h"
#include "model/model.h"

namespace gradsync::cuda {

class BatchStatsExchange {
 public:
  // `max_channels`: the widest batch norm of the model.
  explicit BatchStatsExchange(int max_channels);

  void set_reducer(Model::BatchStatsReducer reducer) { reducer_ = std::move(reducer); }
  bool active() const { return static_cast<bool>(reducer_); }
  // The reducer, taken out (prepare's throwaway step runs without one) and put back.
  Model::BatchStatsReducer take_reducer() { return std::exchange(reducer_, nullptr); }

  // Reduces `sums` (device, 2C doubles of this rank's `count` values per channel) in place,
  // rounded through floats as the CPU's exchange; returns the values per channel over every rank.
  std::int64_t forward(int channels, std::int64_t count, double* sums, cudaStream_t stream);

  // From this rank's backward sums (device: dsums 2C, invstd C), the reduced exchange in device
  // memory (2C + 1 floats, valid until the next call); its count must be `forward_count`, what
  // forward returned for the same norm.
  const float* backward(int channels, std::int64_t count, std::int64_t forward_count,
                        const double* dsums, const double* invstd, cudaStream_t stream);

 private:
  // exchange_host_[0, n) through the reducer; n = 2C + 1.
  void reduce(std::size_t n);

  Model::BatchStatsReducer reducer_;
  PinnedBuffer<double> sums_host_;     // 2C: the device's sums, then the reduced ones going back
  PinnedBuffer<double> invstd_host_;   // C
  PinnedBuffer<float> exchange_host_;  // 2C + 1: what the reducer is handed
  DeviceBuffer<float> exchange_;       // 2C + 1: the reduced backward exchange, for the kernel
};

}  // namespace gradsync::cuda
