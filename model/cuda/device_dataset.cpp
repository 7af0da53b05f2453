#include "model/cuda/device_dataset.h"

#include <string>

#include "common/error.h"

namespace gradsync::cuda {

const DeviceDataset& DeviceDatasetCache::get(const Dataset& data, cudaStream_t stream) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->source == &data && it->size == data.size && it->dim == data.dim) {
      entries_.splice(entries_.begin(), entries_, it);
      return entries_.front();
    }
  }
  const auto n = static_cast<std::size_t>(data.size);
  GRADSYNC_CHECK(
      data.features.size() == n * static_cast<std::size_t>(data.dim) && data.labels.size() == n,
      "dataset buffers do not match its size and dim");
  for (std::size_t i = 0; i < n; ++i) {
    if (data.labels[i] < 0 || data.labels[i] >= classes_) {
      throw DataError(data.name, "label " + std::to_string(data.labels[i]) + " of sample " +
                                     std::to_string(i) + " is outside the model's " +
                                     std::to_string(classes_) + " classes");
    }
  }
  if (entries_.size() >= capacity_) entries_.pop_back();
  // Free before allocating: the evicted set's memory may be what the new one needs.
  DeviceDataset entry;
  entry.source = &data;
  entry.size = data.size;
  entry.dim = data.dim;
  entry.features = DeviceBuffer<float>(data.features.size());
  entry.labels = DeviceBuffer<std::int32_t>(data.labels.size());
  // Once per dataset, so simply wait for it: a step never pays for it again.
  if (entry.features.size() > 0) {
    GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(entry.features.data(), data.features.data(),
                                        entry.features.bytes(), cudaMemcpyHostToDevice, stream));
  }
  if (entry.labels.size() > 0) {
    GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(entry.labels.data(), data.labels.data(),
                                        entry.labels.bytes(), cudaMemcpyHostToDevice, stream));
  }
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream));
  entries_.push_front(std::move(entry));
  return entries_.front();
}

}  // namespace gradsync::cuda
