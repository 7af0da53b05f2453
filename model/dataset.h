// An in-memory classification dataset: one contiguous row-major float matrix of features
// (sample i is features[i*dim .. (i+1)*dim)) and one label per sample.
//
// Samples are stored contiguously so that a batch is gathered with one memcpy per sample
// straight into the model's column-major input matrix (column j = sample j).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gradsync {

struct Dataset {
  std::string name;  // for logs: "fashion-mnist/train", "synthetic/test", ...
  std::int64_t size = 0;
  int dim = 0;
  int classes = 0;
  std::vector<float> features;       // size * dim
  std::vector<std::int32_t> labels;  // size, each in [0, classes)

  std::span<const float> sample(std::int64_t i) const {
    return {features.data() + i * dim, static_cast<std::size_t>(dim)};
  }
};

struct TrainTest {
  Dataset train;
  Dataset test;
};

}  // namespace gradsync
