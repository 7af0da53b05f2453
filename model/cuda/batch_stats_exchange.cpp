#include "model/cuda/batch_stats_exchange.h"

#include "common/error.h"
#include "model/cuda/cuda_check.h"

namespace gradsync::cuda {

BatchStatsExchange::BatchStatsExchange(int max_channels) {
  const auto c = static_cast<std::size_t>(max_channels);
  sums_host_ = PinnedBuffer<double>(2 * c);
  invstd_host_ = PinnedBuffer<double>(c);
  exchange_host_ = PinnedBuffer<float>(2 * c + 1);
  exchange_ = DeviceBuffer<float>(2 * c + 1);
}

void BatchStatsExchange::reduce(std::size_t n) {
  GRADSYNC_CHECK(reducer_ != nullptr, "batch stats exchange without a reducer");
  reducer_(std::span<float>(exchange_host_.data(), n));
}

std::int64_t BatchStatsExchange::forward(int channels, std::int64_t count, double* sums,
                                         cudaStream_t stream) {
  const auto c = static_cast<std::size_t>(channels);
  GRADSYNC_CHECK(2 * c <= sums_host_.size(), "batch stats exchange: a norm wider than the model's");
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(sums_host_.data(), sums, 2 * c * sizeof(double),
                                      cudaMemcpyDeviceToHost, stream));
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream));
  float* exchange = exchange_host_.data();
  for (std::size_t i = 0; i < 2 * c; ++i) exchange[i] = static_cast<float>(sums_host_.data()[i]);
  exchange[2 * c] = static_cast<float>(count);
  reduce(2 * c + 1);
  const float reduced = exchange[2 * c];
  GRADSYNC_CHECK(reduced > 1, "batch norm in training needs more than one value per channel");
  // Back as doubles: the kernel rounds them to float again, which leaves a float unchanged.
  for (std::size_t i = 0; i < 2 * c; ++i) sums_host_.data()[i] = exchange[i];
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(sums, sums_host_.data(), 2 * c * sizeof(double),
                                      cudaMemcpyHostToDevice, stream));
  // Counts up to 2^24 are exact in the float the reducer summed.
  return static_cast<std::int64_t>(reduced);
}

const float* BatchStatsExchange::backward(int channels, std::int64_t count,
                                          std::int64_t forward_count, const double* dsums,
                                          const double* invstd, cudaStream_t stream) {
  const auto c = static_cast<std::size_t>(channels);
  GRADSYNC_CHECK(2 * c <= sums_host_.size(), "batch stats exchange: a norm wider than the model's");
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(sums_host_.data(), dsums, 2 * c * sizeof(double),
                                      cudaMemcpyDeviceToHost, stream));
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(invstd_host_.data(), invstd, c * sizeof(double),
                                      cudaMemcpyDeviceToHost, stream));
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream));
  float* exchange = exchange_host_.data();
  const double* dsum = sums_host_.data();
  // BatchNorm::backward_factors' exchange, with its roundings.
  for (std::size_t i = 0; i < c; ++i) {
    exchange[i] = static_cast<float>(dsum[i]);
    exchange[c + i] = static_cast<float>(dsum[c + i] * invstd_host_.data()[i]);
  }
  exchange[2 * c] = static_cast<float>(count);
  reduce(2 * c + 1);
  GRADSYNC_CHECK(exchange[2 * c] == static_cast<float>(forward_count),
                 "batch norm: the reduced backward count differs from the forward's");
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(exchange_.data(), exchange, (2 * c + 1) * sizeof(float),
                                      cudaMemcpyHostToDevice, stream));
  return exchange_.data();
}

}  // namespace gradsync::cuda
