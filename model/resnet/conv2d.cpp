#include "model/resnet/conv2d.h"

#include <algorithm>

#include "common/error.h"
#include "model/kernels/cpu_kernels.h"
#include "model/resnet/batch_norm.h"

namespace gradsync::resnet {
namespace {

// Floats of one chunk's col: 192 KiB, a fifth of a Zen 4 or Skylake-SP core's L2, beside the
// weight (at most 64 x 576 floats, 144 KiB, in the network's last stage) and the chunk's output.
// Measured on the ResNet step at batch 64 and 128 (bench/micro/resnet_step.cpp): 24K to 96K
// floats are within a few percent of each other; outside that range, the products' calls get
// too short or col spills to L3.
constexpr std::int64_t kColBudgetFloats = 48 * 1024;

// A 1x1 convolution of stride 1 reads its input as it lies: col would be a copy of x.
bool reads_input_as_col(const ConvShape& s) { return s.kernel == 1 && s.stride == 1 && s.pad == 0; }

// Walks output pixels p0, p0 + 1, ... in (sample, row, column) order.
struct PixelWalk {
  PixelWalk(const ConvShape& s, std::int64_t p0) : shape(s) {
    const std::int64_t plane = std::int64_t{s.out_h} * s.out_w;
    n = p0 / plane;
    const int r = static_cast<int>(p0 % plane);
    ho = r / s.out_w;
    wo = r % s.out_w;
  }
  void next() {
    if (++wo < shape.out_w) return;
    wo = 0;
    if (++ho < shape.out_h) return;
    ho = 0;
    ++n;
  }
  const ConvShape& shape;
  std::int64_t n;
  int ho, wo;
};

// col[:, j] for output pixels p0 .. p0 + count: for each kernel row, its `kernel` input pixels
// (neighbours in memory, so one copy of kernel * Cin floats when all lie inside the image),
// zeros where the window hangs over the padding.
void im2col(const ConvShape& s, const float* x, std::int64_t p0, int count, float* col) {
  const int cin = s.in_channels, row = s.kernel * cin, k = s.k();
  PixelWalk at(s, p0);
  for (int j = 0; j < count; ++j, at.next()) {
    float* dst = col + std::int64_t{j} * k;
    const int wi0 = at.wo * s.stride - s.pad;
    const bool inside_w = wi0 >= 0 && wi0 + s.kernel <= s.in_w;
    for (int kh = 0; kh < s.kernel; ++kh, dst += row) {
      const int hi = at.ho * s.stride - s.pad + kh;
      if (hi < 0 || hi >= s.in_h) {
        std::fill_n(dst, row, 0.f);
        continue;
      }
      const std::int64_t line = (at.n * s.in_h + hi) * s.in_w;  // pixel index of (n, hi, 0)
      if (inside_w) {
        std::copy_n(x + (line + wi0) * cin, row, dst);
        continue;
      }
      for (int kw = 0; kw < s.kernel; ++kw) {
        const int wi = wi0 + kw;
        if (wi < 0 || wi >= s.in_w) {
          std::fill_n(dst + kw * cin, cin, 0.f);
        } else {
          std::copy_n(x + (line + wi) * cin, cin, dst + kw * cin);
        }
      }
    }
  }
}

// The adjoint of im2col: adds each column's values back onto the input pixels they came from
// (a pixel seen by several windows gets the sum); the padding's share is dropped.
void col2im_add(const ConvShape& s, const float* col, std::int64_t p0, int count, float* g_x) {
  const int cin = s.in_channels, row = s.kernel * cin, k = s.k();
  PixelWalk at(s, p0);
  for (int j = 0; j < count; ++j, at.next()) {
    const float* src = col + std::int64_t{j} * k;
    const int wi0 = at.wo * s.stride - s.pad;
    for (int kh = 0; kh < s.kernel; ++kh, src += row) {
      const int hi = at.ho * s.stride - s.pad + kh;
      if (hi < 0 || hi >= s.in_h) continue;
      const std::int64_t line = (at.n * s.in_h + hi) * s.in_w;
      const int kw_begin = std::max(0, -wi0), kw_end = std::min(s.kernel, s.in_w - wi0);
      if (kw_begin >= kw_end) continue;
      // Kernel columns kw_begin .. kw_end are one contiguous run of input pixels.
      float* dst = g_x + (line + wi0 + kw_begin) * cin;
      const float* from = src + kw_begin * cin;
      const int n = (kw_end - kw_begin) * cin;
      for (int i = 0; i < n; ++i) dst[i] += from[i];
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
  const std::size_t floats =
      static_cast<std::size_t>(chunk_for(shape, shape.out_pixels(max_batch))) * shape.k();
  if (col.size() < floats) col.resize(floats);
  if (dcol.size() < floats) dcol.resize(floats);
  if (transposed.size() < shape.weight_count()) transposed.resize(shape.weight_count());
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
      im2col(s, x, p0, count, scratch.col.data());
      col = scratch.col.data();
    }
    float* out = z + p0 * cout;
    gemm_nn(cout, count, k, w, cout, col, k, out, cout);
    if (sums != nullptr) add_channel_sums(cout, count, out, sums);
  }
}

void conv_backward(const ConvShape& s, int batch, const float* x, const float* w, const float* g_z,
                   float* g_w, bool accumulate, float* g_x, ConvScratch& scratch) {
  const std::int64_t pixels = s.out_pixels(batch);
  const int chunk = scratch.chunk_for(s, pixels);
  const int k = s.k(), cout = s.out_channels;
  GRADSYNC_CHECK(scratch.col.size() >= static_cast<std::size_t>(chunk) * k,
                 "conv_backward: scratch not reserved for this layer");
  for (std::int64_t p0 = 0; p0 < pixels; p0 += chunk) {
    const int count = static_cast<int>(std::min<std::int64_t>(chunk, pixels - p0));
    const float* col = x + p0 * s.in_channels;
    if (!reads_input_as_col(s)) {
      im2col(s, x, p0, count, scratch.col.data());
      col = scratch.col.data();
    }
    const float* g = g_z + p0 * cout;
    // dW[Cout x K] = dZ * col^T, summed over the chunks: the first overwrites unless the
    // caller accumulates micro-batches.
    gemm_nt(cout, k, count, g, cout, col, k, g_w, cout, accumulate || p0 > 0);
    if (g_x == nullptr) continue;
    if (reads_input_as_col(s)) {
      gemm_tn(k, count, cout, w, cout, g, cout, g_x + p0 * s.in_channels, k,
              scratch.transposed.data(), true);
    } else {
      // dcol[K x chunk] = W^T * dZ, then back onto the input pixels.
      gemm_tn(k, count, cout, w, cout, g, cout, scratch.dcol.data(), k, scratch.transposed.data());
      col2im_add(s, scratch.dcol.data(), p0, count, g_x);
    }
  }
}

}  // namespace gradsync::resnet
