// A 2-D convolution without bias on NHWC activations, by im2col and the products of
// model/kernels/ (oneDNN's or OpenBLAS's sgemm where installed, else gradsync's own).
//
//   ConvShape shape = ConvShape::make(16, 32, 3, 2, 28, 28);   // 3x3, stride 2, pad 1: 14x14
//   conv_forward(shape, batch, x, w, z, scratch, sums);        // z = w * im2col(x)
//   conv_backward(shape, batch, x, w, g_z, g_w, false, g_x, false, scratch);
//
// Layouts. An activation of C channels is the column-major matrix [C x N*H*W]: one column per
// pixel, pixels in (sample, row, column) order, channels contiguous (NHWC). The weight is the
// column-major matrix [Cout x K], K = kernel * kernel * Cin in (kh, kw, cin) order (HWIO with
// Cout fastest), so that the forward product is Z[Cout x P] = W * col[K x P], where column p of
// col holds the K input values output pixel p sees: for each kernel row, the `kernel` input
// pixels of that row are neighbours in memory, so one copy of kernel * Cin floats fills them.
//
// The products run on chunks of output pixels (across sample boundaries: a chunk is any range of
// columns), each chunk's col sized to stay in the L2 cache beside the weight, so that im2col
// writes it and the products read it there. Backward recomputes each chunk's col rather than
// keeping the whole batch's, which would be K times the activation. The input gradient of a
// stride-1 convolution is the convolution of dZ with the flipped kernel (im2col of dZ, one
// product into g_x), and that col of dZ gives the weight gradient too (dW' = X * col^T in the
// flipped layout), so such a layer's backward runs one im2col; a strided layer's input gradient
// is col2im(W^T * dZ), a scatter-add, beside dW = dZ * im2col(x)^T. im2col and col2im run
// on resnet_ops.h's per-instruction-set loops.
//
// Not thread-safe (the scratch is shared); allocates nothing once the scratch is sized.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/resnet/conv_shape.h"

namespace gradsync::resnet {

using FlatBuffer = std::vector<float, Eigen::aligned_allocator<float>>;

// The col matrices of one chunk and the transposition scratch of gemm_tn, shared by every layer
// of a model: sized by reserve() for the largest layer.
struct ConvScratch {
  // Output pixels per chunk: 0 chooses by the cache budget (kColBudgetFloats); tests set a small
  // value to cross sample boundaries inside chunks.
  int chunk_pixels = 0;
  FlatBuffer col, dcol;
  FlatBuffer weights;       // W flipped for a stride-1 input gradient, or gemm_tn's transposition
  FlatBuffer flipped_grad;  // a stride-1 weight gradient in the flipped layout

  int chunk_for(const ConvShape& shape, std::int64_t out_pixels) const;
  void reserve(const ConvShape& shape, int max_batch);
};

// z[Cout x P] = W * im2col(x), overwritten. With `sums` (2 * Cout doubles), adds each channel's
// sum of z to sums[c] and its sum of squares to sums[Cout + c] while the chunk is in cache: the
// statistics of a batch norm that follows.
void conv_forward(const ConvShape& shape, int batch, const float* x, const float* w, float* z,
                  ConvScratch& scratch, double* sums);

// g_w = (or += when `accumulate`) g_z * im2col(x)^T; and when g_x is not null, the gradient
// with respect to x written to g_x, or added to it when `add_to_g_x` (a residual block's input
// takes both branches' gradients).
void conv_backward(const ConvShape& shape, int batch, const float* x, const float* w,
                   const float* g_z, float* g_w, bool accumulate, float* g_x, bool add_to_g_x,
                   ConvScratch& scratch);

}  // namespace gradsync::resnet
