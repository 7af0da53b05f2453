// A Dataset's features and labels uploaded to one device once, so a training step moves only
// its batch indices (8 bytes a sample) to the GPU and gathers the batch there.
//
//   DeviceDatasetCache cache(2);
//   const DeviceDataset& train = cache.get(data, stream);   // uploads on first sight only
//
// The cache is keyed on the Dataset's address and size: it assumes, as every gradsync caller
// does, that a Dataset is not modified while a model that has seen it is alive. It holds the
// `capacity` most recently used sets (a model sees its training and its test set).
// Labels are checked on upload (each in [0, classes)), since the device kernels cannot throw.
// Not thread-safe: one cache per model. Uploads are synchronous with respect to the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <list>

#include "model/cuda/device_buffer.h"
#include "model/dataset.h"

namespace gradsync::cuda {

struct DeviceDataset {
  const Dataset* source = nullptr;
  std::int64_t size = 0;
  int dim = 0;
  DeviceBuffer<float> features;       // size x dim, row-major, as in Dataset
  DeviceBuffer<std::int32_t> labels;  // size
};

class DeviceDatasetCache {
 public:
  explicit DeviceDatasetCache(std::size_t capacity, int classes)
      : capacity_(capacity), classes_(classes) {}
  const DeviceDataset& get(const Dataset& data, cudaStream_t stream);

 private:
  std::size_t capacity_;
  int classes_;
  std::list<DeviceDataset> entries_;  // most recently used first
};

}  // namespace gradsync::cuda
