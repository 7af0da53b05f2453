// A double-precision reference of model/resnet/'s network for tests/unit/test_resnet.cpp: direct
// loops over NHWC activations, reading a parameter vector in the layout resnet.h documents, so
// that it checks the model's forward, its gradients (by central differences of loss()) and its
// batch-norm statistics without sharing a line of its code.
//
//   Reference ref{params};            // train mode: batch statistics, recorded per norm
//   Reference ref{params, &buffers};  // eval mode: the running statistics given
//   double loss = ref.loss(shape, data, indices);   // ref.logits, ref.batch_mean, ...
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "model/dataset.h"
#include "model/resnet/resnet.h"

namespace gradsync::testing {

struct Act {
  int n = 0, h = 0, w = 0, c = 0;
  std::vector<double> v;
  Act(int n_, int h_, int w_, int c_)
      : n(n_), h(h_), w(w_), c(c_), v(std::size_t(n_) * h_ * w_ * c_) {}
  double& at(int i, int y, int x, int ch) { return v[((std::size_t(i) * h + y) * w + x) * c + ch]; }
  double at(int i, int y, int x, int ch) const {
    return v[((std::size_t(i) * h + y) * w + x) * c + ch];
  }
};

struct Reference {
  explicit Reference(const std::vector<double>& params,
                     const std::vector<double>* running_stats = nullptr)
      : p(params), running(running_stats) {}

  const std::vector<double>& p;
  const std::vector<double>* running = nullptr;  // eval mode: the model's buffers
  std::size_t at = 0, buffer = 0;
  std::vector<double> batch_mean, batch_var;  // train mode: every norm's, in forward order
  std::vector<std::pair<int, double>> norms;  // (channels, values per channel) of each norm
  std::vector<double> logits;

  // Direct convolution, no bias, pad kernel / 2; weight [Cout x (kh, kw, cin)] column-major.
  Act conv(const Act& x, int cout, int k, int stride) {
    const int pad = k / 2, oh = (x.h + 2 * pad - k) / stride + 1,
              ow = (x.w + 2 * pad - k) / stride + 1;
    const double* w = p.data() + at;
    at += std::size_t(k) * k * x.c * cout;
    Act y(x.n, oh, ow, cout);
    for (int i = 0; i < x.n; ++i)
      for (int oy = 0; oy < oh; ++oy)
        for (int ox = 0; ox < ow; ++ox)
          for (int ky = 0; ky < k; ++ky)
            for (int kx = 0; kx < k; ++kx) {
              const int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
              if (iy < 0 || iy >= x.h || ix < 0 || ix >= x.w) continue;
              for (int ci = 0; ci < x.c; ++ci) {
                const double* wk = w + (std::size_t(ky * k + kx) * x.c + ci) * cout;
                for (int co = 0; co < cout; ++co)
                  y.at(i, oy, ox, co) += x.at(i, iy, ix, ci) * wk[co];
              }
            }
    return y;
  }
  void norm(Act& z, bool relu) {
    const double* gamma = p.data() + at;
    const double* beta = gamma + z.c;
    at += 2 * std::size_t(z.c);
    const double m = double(z.n) * z.h * z.w;
    norms.emplace_back(z.c, m);
    for (int ch = 0; ch < z.c; ++ch) {
      double mean = 0, var = 0;
      for (std::size_t q = ch; q < z.v.size(); q += z.c) mean += z.v[q] / m;
      for (std::size_t q = ch; q < z.v.size(); q += z.c)
        var += (z.v[q] - mean) * (z.v[q] - mean) / m;
      if (running != nullptr) {
        mean = (*running)[buffer + ch];
        var = (*running)[buffer + z.c + ch];
      } else {
        batch_mean.push_back(mean);
        batch_var.push_back(var);
      }
      for (std::size_t q = ch; q < z.v.size(); q += z.c) {
        const double y = gamma[ch] * (z.v[q] - mean) / std::sqrt(var + 1e-5) + beta[ch];
        z.v[q] = relu ? std::max(y, 0.0) : y;
      }
    }
    buffer += 2 * std::size_t(z.c);
  }
  // The mean cross-entropy of `indices`; logits kept.
  double loss(const ResNetShape& s, const Dataset& data, const std::vector<std::int64_t>& indices) {
    const int n = int(indices.size());
    Act x(n, s.height, s.width, s.channels);
    for (int i = 0; i < n; ++i)  // samples are (C, H, W)
      for (int ch = 0; ch < s.channels; ++ch)
        for (int y = 0; y < s.height; ++y)
          for (int xx = 0; xx < s.width; ++xx)
            x.at(i, y, xx, ch) = data.sample(indices[i])[(ch * s.height + y) * s.width + xx];
    Act a = conv(x, s.stage_width, 3, 1);
    norm(a, true);
    for (int stage = 0; stage < 3; ++stage) {
      for (int b = 0; b < s.blocks_per_stage; ++b) {
        const int cout = s.stage_width << stage, stride = stage > 0 && b == 0 ? 2 : 1;
        Act h = conv(a, cout, 3, stride);
        norm(h, true);
        Act out = conv(h, cout, 3, 1);
        norm(out, false);
        if (stride != 1 || a.c != cout) {
          Act shortcut = conv(a, cout, 1, stride);
          norm(shortcut, false);
          for (std::size_t q = 0; q < out.v.size(); ++q) out.v[q] += shortcut.v[q];
        } else {
          for (std::size_t q = 0; q < out.v.size(); ++q) out.v[q] += a.v[q];
        }
        for (double& v : out.v) v = std::max(v, 0.0);
        a = std::move(out);
      }
    }
    const int c = a.c, classes = s.classes;
    const double* w = p.data() + at;  // [classes x C] column-major, then b
    const double* bias = w + std::size_t(c) * classes;
    logits.assign(std::size_t(n) * classes, 0.0);
    double total = 0;
    for (int i = 0; i < n; ++i) {
      std::vector<double> pooled(c, 0.0);
      for (int y = 0; y < a.h; ++y)
        for (int xx = 0; xx < a.w; ++xx)
          for (int ch = 0; ch < c; ++ch) pooled[ch] += a.at(i, y, xx, ch) / (a.h * a.w);
      double* z = logits.data() + std::size_t(i) * classes;
      double top = -1e300;
      for (int k = 0; k < classes; ++k) {
        z[k] = bias[k];
        for (int ch = 0; ch < c; ++ch) z[k] += w[k + std::size_t(ch) * classes] * pooled[ch];
        top = std::max(top, z[k]);
      }
      double sum = 0;
      for (int k = 0; k < classes; ++k) sum += std::exp(z[k] - top);
      total += top + std::log(sum) - z[data.labels[std::size_t(indices[i])]];
    }
    return total / n;
  }
};

}  // namespace gradsync::testing
