// The ResNet step's loops around the products: im2col and col2im, and batch norm's passes.
// Memory-bound, they run on the same per-CPU path as the products (model/kernels/cpu_kernels.h:
// avx512, avx2 or portable, from cpuid or GRADSYNC_KERNELS): resnet_ops.inl is compiled once
// per path (resnet_ops_<path>.cpp, with that path's flags in model/CMakeLists.txt), and
// resnet_ops() hands out the table of the path in force. Built for AVX-512 they took 7% off
// the step against the build's SSE2 baseline.
//
// Activations are NHWC: C channels contiguous per pixel (conv2d.h). Like the kernels' elementwise
// parts, the loops are compiled without multiply-add contraction, so every path gives the same
// bits. Thread-safe; they allocate nothing.
#pragma once

#include <cstdint>

#include "model/resnet/conv_shape.h"

namespace gradsync::resnet {

struct ResnetOps {
  // col[:, j] = the K = kernel^2 * Cin inputs output pixel p0 + j sees, zeros over the padding.
  void (*im2col)(const ConvShape& s, const float* x, std::int64_t p0, int count, float* col);
  // Its adjoint: adds col[:, j] back onto the input pixels it came from.
  void (*col2im_add)(const ConvShape& s, const float* col, std::int64_t p0, int count, float* g_x);
  // The batch_norm.h passes of the same names, with the norm's per-channel factors spelled out.
  void (*add_channel_sums)(int channels, std::int64_t pixels, const float* z, double* sums);
  void (*bn_apply)(int channels, std::int64_t pixels, const float* z, const float* mean,
                   const float* scale, const float* shift, bool relu, float* out);
  void (*bn_add_relu)(int channels, std::int64_t pixels, const float* z, const float* mean,
                      const float* scale, const float* shift, const float* residual, float* out);
  void (*bn_bn_add_relu)(int channels, std::int64_t pixels, const float* z, const float* mean,
                         const float* scale, const float* shift, const float* z_down,
                         const float* mean_down, const float* scale_down, const float* shift_down,
                         float* out);
  void (*relu_mask)(std::int64_t n, const float* activation, float* g);
  void (*add_backward_sums)(int channels, std::int64_t pixels, const float* g, const float* mask,
                            const float* z, const float* mean, double* dsums);
  void (*bn_backward_apply)(int channels, std::int64_t pixels, const float* g, const float* mask,
                            const float* z, const float* mean, const float* a, const float* b,
                            const float* c, float* g_z);
};

// The table of cpu_path()'s path.
const ResnetOps& resnet_ops();

// Each path's table (resnet_ops_<path>.cpp); avx512 and avx2 exist on x86-64 builds only.
const ResnetOps& resnet_ops_portable();
const ResnetOps& resnet_ops_avx2();
const ResnetOps& resnet_ops_avx512();

}  // namespace gradsync::resnet
