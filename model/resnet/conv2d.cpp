#include "model/resnet/conv2d.h"

#include <algorithm>

#include "common/error.h"
#include "model/kernels/cpu_kernels.h"
#include "model/resnet/batch_norm.h"
#include "model/resnet/resnet_ops.h"

namespace gradsync::resnet {
namespace {

// Floats of one chunk's col: 192 KiB, a fifth of a Zen 4 or Skylake-SP core's L2, beside the
// weight (at most 64 x 576 floats, 144 KiB, in the network's last stage) and the chunk's output.
// Measured on the ResNet-8 step at batch 64 (bench/micro/resnet_step.cpp, a 2-core Zen 4): 24K
// to 192K floats all within the run-to-run noise (about 5%).
constexpr std::int64_t kColBudgetFloats = 48 * 1024;

// A 1x1 convolution of stride 1 reads its input as it lies: col would be a copy of x.
bool reads_input_as_col(const ConvShape& s) { return s.kernel == 1 && s.stride == 1 && s.pad == 0; }

// A stride-1 convolution's input gradient is itself a convolution, of dZ with the kernel turned
// half a circle and its channels swapped (same size and padding): im2col of dZ and one product,
// cheaper than col2im's scatter of K values onto every pixel.
bool transposes_as_conv(const ConvShape& s) { return s.stride == 1 && !reads_input_as_col(s); }

ConvShape transposed(const ConvShape& s) {
  return ConvShape::make(s.out_channels, s.in_channels, s.kernel, 1, s.out_h, s.out_w);
}

// W'[ci, (kh', kw', co)] = W[co, (k-1-kh', k-1-kw', ci)]: since pad = (k-1)/2, output pixel
// (i, j) of the forward took input (i + kh - pad, ...), so input pixel (i, j) received from
// output (i + kh' - pad, ...) through W's tap (k-1-kh', ...).
void flip_weights(const ConvShape& s, const float* w, float* flipped) {
  const int k = s.kernel, cin = s.in_channels, cout = s.out_channels;
  for (int kh = 0; kh < k; ++kh) {
    for (int kw = 0; kw < k; ++kw) {
      const float* tap = w + std::int64_t{(k - 1 - kh) * k + (k - 1 - kw)} * cin * cout;
      float* out = flipped + std::int64_t{kh * k + kw} * cout * cin;
      for (int co = 0; co < cout; ++co) {
        for (int ci = 0; ci < cin; ++ci)
          out[std::int64_t{co} * cin + ci] = tap[std::int64_t{ci} * cout + co];
      }
    }
  }
}

// The adjoint of flip_weights' layout change: g_w[co, (kh, kw, ci)] (+)= flipped[ci, (k-1-kh,
// k-1-kw, co)].
void unflip_weights(const ConvShape& s, const float* flipped, float* g_w, bool accumulate) {
  const int k = s.kernel, cin = s.in_channels, cout = s.out_channels;
  for (int kh = 0; kh < k; ++kh) {
    for (int kw = 0; kw < k; ++kw) {
      float* tap = g_w + std::int64_t{kh * k + kw} * cin * cout;
      const float* in = flipped + std::int64_t{(k - 1 - kh) * k + (k - 1 - kw)} * cout * cin;
      for (int ci = 0; ci < cin; ++ci) {
        for (int co = 0; co < cout; ++co) {
          const float v = in[std::int64_t{co} * cin + ci];
          float& out = tap[std::int64_t{ci} * cout + co];
          out = accumulate ? out + v : v;
        }
      }
    }
  }
}

}  // namespace

ConvShape ConvShape::make(int in_channels, int out_channels, int kernel, int stride, int in_h,
                          int in_w) {
  GRADSYNC_CHECK(in_channels >= 1 && out_channels >= 1, "convolution channels must be positive");
  GRADSYNC_CHECK(kernel >= 1 && kernel % 2 == 1, "convolution kernel must be odd");
  GRADSYNC_CHECK(stride >= 1 && in_h >= 1 && in_w >= 1, "convolution stride and size positive");
  ConvShape s;
  s.in_channels = in_channels;
  s.out_channels = out_channels;
  s.kernel = kernel;
  s.stride = stride;
  s.pad = kernel / 2;
  s.in_h = in_h;
  s.in_w = in_w;
  // PyTorch's floor((in + 2 pad - kernel) / stride) + 1.
  s.out_h = (in_h + 2 * s.pad - kernel) / stride + 1;
  s.out_w = (in_w + 2 * s.pad - kernel) / stride + 1;
  return s;
}

int ConvScratch::chunk_for(const ConvShape& shape, std::int64_t out_pixels) const {
  std::int64_t chunk = chunk_pixels;
  if (chunk <= 0) {
    // A multiple of 16 pixels (the products' register blocks divide it), at least 64.
    chunk = std::max<std::int64_t>(64, kColBudgetFloats / shape.k() / 16 * 16);
  }
  return static_cast<int>(std::max<std::int64_t>(1, std::min(chunk, out_pixels)));
}

void ConvScratch::reserve(const ConvShape& shape, int max_batch) {
  auto at_least = [](FlatBuffer& buffer, std::size_t floats) {
    if (buffer.size() < floats) buffer.resize(floats);
  };
  const std::size_t floats =
      static_cast<std::size_t>(chunk_for(shape, shape.out_pixels(max_batch))) * shape.k();
  at_least(col, floats);
  at_least(dcol, floats);
  at_least(weights, shape.weight_count());
  at_least(flipped_grad, shape.weight_count());
  if (transposes_as_conv(shape)) {
    const ConvShape t = transposed(shape);
    at_least(col, static_cast<std::size_t>(chunk_for(t, t.out_pixels(max_batch))) * t.k());
  }
}

void conv_forward(const ConvShape& s, int batch, const float* x, const float* w, float* z,
                  ConvScratch& scratch, double* sums) {
  const std::int64_t pixels = s.out_pixels(batch);
  const int chunk = scratch.chunk_for(s, pixels);
  const int k = s.k(), cout = s.out_channels;
  GRADSYNC_CHECK(scratch.col.size() >= static_cast<std::size_t>(chunk) * k,
                 "conv_forward: scratch not reserved for this layer");
  for (std::int64_t p0 = 0; p0 < pixels; p0 += chunk) {
    const int count = static_cast<int>(std::min<std::int64_t>(chunk, pixels - p0));
    const float* col = x + p0 * s.in_channels;
    if (!reads_input_as_col(s)) {
      resnet_ops().im2col(s, x, p0, count, scratch.col.data());
      col = scratch.col.data();
    }
    float* out = z + p0 * cout;
    gemm_nn(cout, count, k, w, cout, col, k, out, cout);
    if (sums != nullptr) add_channel_sums(cout, count, out, sums);
  }
}

void conv_backward(const ConvShape& s, int batch, const float* x, const float* w, const float* g_z,
                   float* g_w, bool accumulate, float* g_x, bool add_to_g_x, ConvScratch& scratch) {
  const int cin = s.in_channels, cout = s.out_channels;
  if (g_x != nullptr && transposes_as_conv(s)) {
    // Stride 1: one col serves both gradients. col = im2col of dZ for the transposed
    // convolution (transposed()), chunked over input pixels;
    //   dX  = W' * col, W' the flipped kernel: each input pixel written by one product, so
    //         it adds to g_x, or overwrites it, in the product itself;
    //   dW' = X * col^T, the weight gradient in W's flipped layout: dW[co, (kh, kw, ci)] =
    //         sum over q of x[ci, q] dz[co, q - (kh - pad, kw - pad)], and that shifted dz is
    //         col's row (k-1-kh, k-1-kw, co) at input pixel q.
    // which spares the backward im2col of x, a third of the im2col work of these layers.
    const ConvShape t = transposed(s);
    flip_weights(s, w, scratch.weights.data());
    const std::int64_t pixels = t.out_pixels(batch);
    const int chunk = scratch.chunk_for(t, pixels), k = t.k();
    GRADSYNC_CHECK(scratch.col.size() >= static_cast<std::size_t>(chunk) * k,
                   "conv_backward: scratch not reserved for this layer");
    for (std::int64_t p0 = 0; p0 < pixels; p0 += chunk) {
      const int count = static_cast<int>(std::min<std::int64_t>(chunk, pixels - p0));
      resnet_ops().im2col(t, g_z, p0, count, scratch.col.data());
      gemm_nt(cin, k, count, x + p0 * cin, cin, scratch.col.data(), k, scratch.flipped_grad.data(),
              cin, p0 > 0);
      gemm_nn(cin, count, k, scratch.weights.data(), cin, scratch.col.data(), k, g_x + p0 * cin,
              cin, add_to_g_x);
    }
    unflip_weights(s, scratch.flipped_grad.data(), g_w, accumulate);
    return;
  }
  const std::int64_t pixels = s.out_pixels(batch);
  const int chunk = scratch.chunk_for(s, pixels), k = s.k();
  GRADSYNC_CHECK(scratch.col.size() >= static_cast<std::size_t>(chunk) * k,
                 "conv_backward: scratch not reserved for this layer");
  // Strided (or without input gradient, or 1x1): the input gradient, where wanted, by
  // W^T * dZ chunk by chunk beside the weight gradient, then col2im (1x1 stride 1: none).
  if (g_x != nullptr && !add_to_g_x && !reads_input_as_col(s)) {
    std::fill_n(g_x, s.in_pixels(batch) * cin, 0.f);
  }
  for (std::int64_t p0 = 0; p0 < pixels; p0 += chunk) {
    const int count = static_cast<int>(std::min<std::int64_t>(chunk, pixels - p0));
    const float* col = x + p0 * cin;
    if (!reads_input_as_col(s)) {
      resnet_ops().im2col(s, x, p0, count, scratch.col.data());
      col = scratch.col.data();
    }
    const float* g = g_z + p0 * cout;
    // dW[Cout x K] = dZ * col^T, summed over the chunks: the first overwrites unless the
    // caller accumulates micro-batches.
    gemm_nt(cout, k, count, g, cout, col, k, g_w, cout, accumulate || p0 > 0);
    if (g_x == nullptr) continue;
    if (reads_input_as_col(s)) {
      gemm_tn(k, count, cout, w, cout, g, cout, g_x + p0 * cin, k, scratch.weights.data(),
              add_to_g_x);
    } else {
      gemm_tn(k, count, cout, w, cout, g, cout, scratch.dcol.data(), k, scratch.weights.data());
      resnet_ops().col2im_add(s, scratch.dcol.data(), p0, count, g_x);
    }
  }
}

}  // namespace gradsync::resnet
