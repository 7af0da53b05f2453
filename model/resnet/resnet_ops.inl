// The loops of resnet_ops.h, written once and compiled once per path by resnet_ops_<path>.cpp,
// each with its instruction set's flags (model/CMakeLists.txt). The includer defines
// GRADSYNC_RESNET_OPS_TABLE, the name of the path's table function.
// As in model/kernels/step_ops.inl: everything in an anonymous namespace, and no standard
// template or inline function of another header instantiated here (no std::max, no ConvShape
// member function), so that no copy built for one instruction set is merged with another's at
// link time; no floating-point contraction, so all paths give the same bits.
#include <cstdint>

#include "model/resnet/resnet_ops.h"

namespace gradsync::resnet {
namespace {

// Keeps a NaN in x, as the kernels' ReLU: a diverging run must show in its loss.
inline float relu(float x) { return x < 0.f ? 0.f : x; }

// Copies n floats (a kernel row of im2col: 3 to a few hundred) in fixed-size pieces, which the
// compiler turns into vector moves: a memmove call per kernel row, its size known only at run
// time, cost more than the copy itself (a sixth of the step).
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

// Walks output pixels p0, p0 + 1, ... in (sample, row, column) order.
struct PixelWalk {
  PixelWalk(const ConvShape& s, std::int64_t p0) : out_h(s.out_h), out_w(s.out_w) {
    const std::int64_t plane = std::int64_t{s.out_h} * s.out_w;
    n = p0 / plane;
    const int r = static_cast<int>(p0 % plane);
    ho = r / s.out_w;
    wo = r % s.out_w;
  }
  void next() {
    if (++wo < out_w) return;
    wo = 0;
    if (++ho < out_h) return;
    ho = 0;
    ++n;
  }
  int out_h, out_w;
  std::int64_t n;
  int ho, wo;
};

// For each kernel row, its `kernel` input pixels are neighbours in memory: one copy of
// kernel * Cin floats where the whole window row lies inside the image.
void im2col(const ConvShape& s, const float* x, std::int64_t p0, int count, float* col) {
  const int cin = s.in_channels, row = s.kernel * cin, k = s.kernel * row;
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

// A pixel seen by several windows gets the sum; the padding's share is dropped.
void col2im_add(const ConvShape& s, const float* col, std::int64_t p0, int count, float* g_x) {
  const int cin = s.in_channels, row = s.kernel * cin, k = s.kernel * row;
  PixelWalk at(s, p0);
  for (int j = 0; j < count; ++j, at.next()) {
    const float* src = col + std::int64_t{j} * k;
    const int wi0 = at.wo * s.stride - s.pad;
    const int kw_begin = wi0 < 0 ? -wi0 : 0;
    const int kw_end = s.in_w - wi0 < s.kernel ? s.in_w - wi0 : s.kernel;
    for (int kh = 0; kh < s.kernel; ++kh, src += row) {
      const int hi = at.ho * s.stride - s.pad + kh;
      if (hi < 0 || hi >= s.in_h || kw_begin >= kw_end) continue;
      // Kernel columns kw_begin .. kw_end are one contiguous run of input pixels.
      const std::int64_t line = (at.n * s.in_h + hi) * s.in_w;
      float* dst = g_x + (line + wi0 + kw_begin) * cin;
      const float* from = src + kw_begin * cin;
      const int n = (kw_end - kw_begin) * cin;
      for (int i = 0; i < n; ++i) dst[i] += from[i];
    }
  }
}

// Each pass walks pixels and, inside, the C channels of one pixel: contiguous, so the inner loop
// vectorises over channels, the per-channel factors loaded from L1.

void add_channel_sums(int channels, std::int64_t pixels, const float* z, double* sums) {
  double* sq = sums + channels;
  for (std::int64_t p = 0; p < pixels; ++p, z += channels) {
    for (int c = 0; c < channels; ++c) {
      const double v = z[c];
      sums[c] += v;
      sq[c] += v * v;
    }
  }
}

void bn_apply(int channels, std::int64_t pixels, const float* z, const float* mean,
              const float* scale, const float* shift, bool relu_after, float* out) {
  for (std::int64_t p = 0; p < pixels; ++p, z += channels, out += channels) {
    for (int c = 0; c < channels; ++c) {
      const float y = (z[c] - mean[c]) * scale[c] + shift[c];
      out[c] = relu_after ? relu(y) : y;
    }
  }
}

void bn_add_relu(int channels, std::int64_t pixels, const float* z, const float* mean,
                 const float* scale, const float* shift, const float* residual, float* out) {
  for (std::int64_t p = 0; p < pixels; ++p, z += channels, residual += channels, out += channels) {
    for (int c = 0; c < channels; ++c) {
      out[c] = relu((z[c] - mean[c]) * scale[c] + shift[c] + residual[c]);
    }
  }
}

void bn_bn_add_relu(int channels, std::int64_t pixels, const float* z, const float* mean,
                    const float* scale, const float* shift, const float* z_down,
                    const float* mean_down, const float* scale_down, const float* shift_down,
                    float* out) {
  for (std::int64_t p = 0; p < pixels; ++p, z += channels, z_down += channels, out += channels) {
    for (int c = 0; c < channels; ++c) {
      const float r = (z_down[c] - mean_down[c]) * scale_down[c] + shift_down[c];
      out[c] = relu((z[c] - mean[c]) * scale[c] + shift[c] + r);
    }
  }
}

void relu_mask(std::int64_t n, const float* activation, float* g) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float dy = g[i];
    g[i] = activation[i] > 0.f ? dy : 0.f;
  }
}

void add_backward_sums(int channels, std::int64_t pixels, const float* g, const float* mask,
                       const float* z, const float* mean, double* dsums) {
  double* gx = dsums + channels;
  for (std::int64_t p = 0; p < pixels; ++p, g += channels, z += channels) {
    if (mask == nullptr) {
      for (int c = 0; c < channels; ++c) {
        const double d = g[c];
        dsums[c] += d;
        gx[c] += d * (z[c] - mean[c]);
      }
      continue;
    }
    for (int c = 0; c < channels; ++c) {
      const double d = g[c] * static_cast<float>(mask[c] > 0.f);  // (GCC vectorises no select here)
      dsums[c] += d;
      gx[c] += d * (z[c] - mean[c]);
    }
    mask += channels;
  }
}

void bn_backward_apply(int channels, std::int64_t pixels, const float* g, const float* mask,
                       const float* z, const float* mean, const float* a, const float* b,
                       const float* c0, float* g_z) {
  for (std::int64_t p = 0; p < pixels; ++p, g += channels, z += channels, g_z += channels) {
    if (mask == nullptr) {
      for (int c = 0; c < channels; ++c) g_z[c] = a[c] * g[c] + b[c] * (z[c] - mean[c]) + c0[c];
      continue;
    }
    for (int c = 0; c < channels; ++c) {
      const float d = g[c] * static_cast<float>(mask[c] > 0.f);
      g_z[c] = a[c] * d + b[c] * (z[c] - mean[c]) + c0[c];
    }
    mask += channels;
  }
}

}  // namespace

const ResnetOps& GRADSYNC_RESNET_OPS_TABLE() {
  static const ResnetOps table = {im2col,    col2im_add,        add_channel_sums,
                                  bn_apply,  bn_add_relu,       bn_bn_add_relu,
                                  relu_mask, add_backward_sums, bn_backward_apply};
  return table;
}

}  // namespace gradsync::resnet
