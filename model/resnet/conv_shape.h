// The geometry of one 2-D convolution: channels, a square kernel with "same" padding, stride,
// and the input and output image sizes. Plain data, no Eigen: resnet_ops.inl, compiled once per
// instruction set, reads it (its fields only, so that no inline function of this header is
// built with another set's flags).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradsync::resnet {

struct ConvShape {
  int in_channels = 0, out_channels = 0;
  int kernel = 0, stride = 1, pad = 0;
  int in_h = 0, in_w = 0, out_h = 0, out_w = 0;

  // pad = kernel / 2, torchvision's choice for 3x3 and 1x1; output size as PyTorch's,
  // floor((in + 2 pad - kernel) / stride) + 1.
  static ConvShape make(int in_channels, int out_channels, int kernel, int stride, int in_h,
                        int in_w);
  int k() const { return kernel * kernel * in_channels; }  // rows of col, columns of W
  std::size_t weight_count() const { return static_cast<std::size_t>(k()) * out_channels; }
  std::int64_t in_pixels(int batch) const { return std::int64_t{batch} * in_h * in_w; }
  std::int64_t out_pixels(int batch) const { return std::int64_t{batch} * out_h * out_w; }
  // Multiply-adds of the forward product for `batch` samples.
  double macs(int batch) const { return double(out_pixels(batch)) * k() * out_channels; }
};

}  // namespace gradsync::resnet
