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

// Copies n floats (a kernel row of im2col: 3 to a few hundred). Fixed-size pieces, which the
// compiler inlines as vector moves: a call to memmove per kernel row (its size known only at run
// time) cost more than the copy itself, a sixth of the step.
inline void copy_floats(const float* src, int n, float* dst) {
  for (; n >= 16; n -= 16, src += 16, dst += 16) __builtin_memcpy(dst, src, 64);
  if (n & 8) __builtin_memcpy(dst, src, 32), src += 8, dst += 8;
  if (n & 4) __builtin_memcpy(dst, src, 16), src += 4, dst += 4;
  if (n & 2) __builtin_memcpy(dst, src, 8), src += 2, dst += 2;
  if (n & 1) *dst = *src;
}

inline void zero_floats(int n, float* dst) {
  for (; n >= 16; n -= 16, dst += 16) __builtin_memset(dst, 0, 64);
  for (; n > 0; --n) *dst++ = 0.f;
}

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
        zero_floats(row, dst);
        continue;
      }
      const std::int64_t line = (at.n * s.in_h + hi) * s.in_w;  // pixel index of (n, hi, 0)
      if (inside_w) {
        copy_floats(x + (line + wi0) * cin, row, dst);
        continue;
      }
      for (int kw = 0; kw < s.kernel; ++kw) {
        const int wi = wi0 + kw;
        if (wi < 0 || wi >= s.in_w) {
          zero_floats(cin, dst + kw * cin);
        } else {
          copy_floats(x + (line + wi) * cin, cin, dst + kw * cin);
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
      im2col(s, x, p0, count, scratch.col.data());
      col = scratch.col.data();
    }
    float* out = z + p0 * cout;
    gemm_nn(cout, count, k, w, cout, col, k, out, cout);
    if (sums != nullptr) add_channel_sums(cout, count, out, sums);
  }
}

void conv_backward(const ConvShape& s, int batch, const float* x, const float* w, const float* g_z,
                   float* g_w, bool accumulate, float* g_x, bool add_to_g_x, ConvScratch& scratch) {
  const std::int64_t pixels = s.out_pixels(batch);
  const int chunk = scratch.chunk_for(s, pixels);
  const int k = s.k(), cin = s.in_channels, cout = s.out_channels;
  GRADSYNC_CHECK(scratch.col.size() >= static_cast<std::size_t>(chunk) * k,
                 "conv_backward: scratch not reserved for this layer");
  // The input gradient by W^T * dZ and col2im, chunk by chunk beside the weight gradient: where
  // it is not a convolution of its own (strided), or needs no col (1x1, stride 1).
  const bool by_col2im = g_x != nullptr && !transposes_as_conv(s);
  if (by_col2im && !add_to_g_x && !reads_input_as_col(s)) {
    std::fill_n(g_x, s.in_pixels(batch) * cin, 0.f);
  }
  for (std::int64_t p0 = 0; p0 < pixels; p0 += chunk) {
    const int count = static_cast<int>(std::min<std::int64_t>(chunk, pixels - p0));
    const float* col = x + p0 * cin;
    if (!reads_input_as_col(s)) {
      im2col(s, x, p0, count, scratch.col.data());
      col = scratch.col.data();
    }
    const float* g = g_z + p0 * cout;
    // dW[Cout x K] = dZ * col^T, summed over the chunks: the first overwrites unless the
    // caller accumulates micro-batches.
    gemm_nt(cout, k, count, g, cout, col, k, g_w, cout, accumulate || p0 > 0);
    if (!by_col2im) continue;
    if (reads_input_as_col(s)) {
      gemm_tn(k, count, cout, w, cout, g, cout, g_x + p0 * cin, k, scratch.weights.data(),
              add_to_g_x);
    } else {
      gemm_tn(k, count, cout, w, cout, g, cout, scratch.dcol.data(), k, scratch.weights.data());
      col2im_add(s, scratch.dcol.data(), p0, count, g_x);
    }
  }
  if (g_x == nullptr || by_col2im) return;
  // Stride 1: dX is dZ convolved with the flipped kernel (transposed()), each input pixel
  // written by one product, so it adds to g_x, or overwrites it, in the product itself.
  const ConvShape t = transposed(s);
  flip_weights(s, w, scratch.weights.data());
  const std::int64_t in_pixels = t.out_pixels(batch);
  const int in_chunk = scratch.chunk_for(t, in_pixels);
  for (std::int64_t p0 = 0; p0 < in_pixels; p0 += in_chunk) {
    const int count = static_cast<int>(std::min<std::int64_t>(in_chunk, in_pixels - p0));
    im2col(t, g_z, p0, count, scratch.col.data());
    gemm_nn(cin, count, t.k(), scratch.weights.data(), cin, scratch.col.data(), t.k(),
            g_x + p0 * cin, cin, add_to_g_x);
  }
}

}  // namespace gradsync::resnet
