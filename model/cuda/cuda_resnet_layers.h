// The CUDA ResNet's layers (cuda_resnet.h's ConvBn and Block), shared by its two source files:
// cuda_resnet.cpp (construction, batches, the public calls) and cuda_resnet_passes.cpp (forward,
// backward and their cuBLAS products). Private to model/cuda/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "model/cuda/device_buffer.h"
#include "model/cuda/resnet_kernels.h"
#include "model/resnet/conv_shape.h"

namespace gradsync::cuda {

// A convolution and the batch norm after it: one layer of params(), one range for the buckets,
// as the CPU ResNet's ConvBn.
struct ConvBnLayer {
  resnet::ConvShape conv;
  std::size_t weight = 0;       // W [Cout x K] in params()
  std::size_t gamma = 0;        // gamma, then beta, C each, after W
  std::size_t running = 0;      // running mean, then running variance, C each, in buffers()
  std::size_t layer = 0;        // index into layers()
  DeviceBuffer<float> z;        // the convolution's output, which the norm's backward reads
  DeviceBuffer<float> out;      // relu(bn(z)) for the stem and conv1; empty for the others
  DeviceBuffer<float> factors;  // mean, scale, shift, a, b, c: C each
  DeviceBuffer<double> invstd;  // C
  DeviceBuffer<double> sums;    // 2C: the statistics of forward, then of backward
  std::int64_t count = 0;       // values per channel of the last forward, every rank's

  int channels() const { return conv.out_channels; }
  kernels::BnFactors bn() const {
    const auto c = static_cast<std::size_t>(channels());
    float* f = factors.data();
    return {f, invstd.data(), f + c, f + 2 * c, f + 3 * c, f + 4 * c, f + 5 * c};
  }
};

struct ResidualBlock {
  ConvBnLayer conv1, conv2;
  std::optional<ConvBnLayer> down;  // the projection shortcut; none: the identity
  DeviceBuffer<float> out;          // relu(bn2(z2) + shortcut(x))
};

}  // namespace gradsync::cuda
