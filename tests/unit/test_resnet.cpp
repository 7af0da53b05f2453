// The ResNet (model/resnet/) against an independent double-precision reference of the network
// it documents, written here with direct loops over its documented parameter layout: forward,
// gradients by central differences, batch norm's two modes and running statistics; then the
// Model contract (grad-ready ranges, accumulation, evaluate, seeds) and SyncBatchNorm's hook.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "common/random.h"
#include "model/resnet/resnet.h"
#include "model/resnet/resnet_ops.h"
#include "tests/support/cpu_paths.h"
#include "tests/support/resnet_reference.h"
#include "worker/model_factory.h"

namespace {

using gradsync::ResNet;
using gradsync::ResNetShape;
using gradsync::testing::Reference;

gradsync::Dataset random_images(std::int64_t n, int dim, int classes, std::uint64_t seed) {
  gradsync::Dataset data;
  data.size = n;
  data.dim = dim;
  data.classes = classes;
  gradsync::SplitMix64 rng(seed);
  for (std::int64_t i = 0; i < n * dim; ++i) data.features.push_back(float(rng.normal()));
  for (std::int64_t i = 0; i < n; ++i) data.labels.push_back(std::int32_t(rng.below(classes)));
  return data;
}

std::vector<std::int64_t> range(std::int64_t begin, std::int64_t end) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(end - begin));
  std::iota(v.begin(), v.end(), begin);
  return v;
}

std::vector<double> as_double(std::span<const float> v) { return {v.begin(), v.end()}; }

// A tiny instance with every layer kind: two input channels (the (C, H, W) transposition), an
// odd, non-square image (stride 2 from odd sizes), identity and projection shortcuts.
const ResNetShape kTiny{
    .channels = 2, .height = 10, .width = 9, .classes = 5, .blocks_per_stage = 1, .stage_width = 4};

}  // namespace

TEST_CASE("resnet: layout is one flat buffer of conv+norm layers, then fc; buffers apart") {
  ResNet net({}, 4);
  // torchvision's BasicBlock ResNet-8 for 28x28x1 at width 16: 77,754 (scripts/resnet_peer.py).
  CHECK(net.param_count() == 77754);
  const auto& layers = net.layers();
  REQUIRE(layers.size() == 1 + 2 + 3 + 3 + 1);
  CHECK(layers.front().name == "conv1");
  CHECK(layers[4].name == "layer2.0.conv2");
  CHECK(layers[5].name == "layer2.0.downsample");
  CHECK(layers.back().name == "fc");
  CHECK(layers.front().begin == 0);
  for (std::size_t l = 1; l < layers.size(); ++l) CHECK(layers[l].begin == layers[l - 1].end);
  CHECK(layers.back().end == net.param_count());
  CHECK(layers[1].end - layers[1].begin == 16 * 16 * 9 + 2 * 16);
  // Running mean and variance of every norm: 16 * 3 + 32 * 3 + 64 * 3 channels.
  CHECK(net.buffers().size() == 2 * (16 * 3 + 32 * 3 + 64 * 3));
  CHECK(ResNet::parameter_count({}) == 77754);
  for (const ResNetShape& shape : {kTiny, ResNetShape{.blocks_per_stage = 3, .stage_width = 8}}) {
    CHECK(ResNet::parameter_count(shape) == ResNet(shape, 1).param_count());
  }
  CHECK(ResNet({.blocks_per_stage = 2}, 4).layers().size() ==
        1 + 2 * 2 + 2 * 2 + 1 + 2 * 2 + 1 + 1);
}

TEST_CASE("resnet: forward matches the double-precision reference, train and eval mode") {
  const gradsync::Dataset data = random_images(6, 2 * 10 * 9, 5, 7);
  ResNet net(kTiny, 6);
  net.init_params(3);
  net.set_conv_chunk_pixels(7);  // chunks end inside images and cross into the next
  const std::vector<double> p = as_double(net.params());
  const auto batch = range(0, 6);

  Reference train{p};
  const double loss = train.loss(kTiny, data, batch);
  const std::vector<float> logits(net.logits(data, batch, true).begin(),
                                  net.logits(data, batch, true).end());
  REQUIRE(logits.size() == train.logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i)
    CHECK(logits[i] == doctest::Approx(train.logits[i]).epsilon(1e-4));
  CHECK(net.forward_backward(data, batch) == doctest::Approx(loss).epsilon(1e-5));

  // Eval mode reads the running statistics, whatever they are.
  for (std::size_t i = 0; i < net.buffers().size(); ++i) net.buffers()[i] += 0.01f * float(i % 7);
  const std::vector<double> running = as_double(net.buffers());
  Reference eval{p, &running};
  eval.loss(kTiny, data, batch);
  const auto eval_logits = net.logits(data, batch, false);
  for (std::size_t i = 0; i < eval_logits.size(); ++i)
    CHECK(eval_logits[i] == doctest::Approx(eval.logits[i]).epsilon(1e-4));
}

TEST_CASE("resnet: gradients of every layer agree with central differences in double precision") {
  // The reference's loss differentiated numerically (step 1e-6 in double: truncation ~1e-12,
  // rounding ~1e-10), against the float model's backward: every parameter kind (3x3 convolutions
  // of stride 1 and 2, 1x1 projections, gamma, beta, the linear layer), and through them every
  // input gradient (norm, ReLU, residual add, average pool). Bound, every parameter:
  //   |analytic - numeric| <= 1e-4 (|numeric| + 0.1 max |numeric| over its layer)
  // (measured worst: 5e-6, the float model's own rounding).
  for (int blocks : {1, 2}) {
    CAPTURE(blocks);
    ResNetShape shape = kTiny;
    shape.blocks_per_stage = blocks;
    const gradsync::Dataset data = random_images(3, 2 * 10 * 9, 5, 11);
    ResNet net(shape, 3);
    net.init_params(5);
    net.set_conv_chunk_pixels(blocks == 1 ? 7 : 0);
    const auto batch = range(0, 3);
    net.forward_backward(data, batch);
    const std::vector<double> analytic = as_double(net.grads());
    std::vector<double> p = as_double(net.params());
    const double h = 1e-6;
    for (const ResNet::Layer& layer : net.layers()) {
      CAPTURE(layer.name);
      // Every parameter with one block per stage; every third with two (the same kinds again).
      const std::size_t step = blocks == 1 ? 1 : 3;
      std::vector<std::pair<std::size_t, double>> numeric;
      double largest = 0;
      for (std::size_t i = layer.begin; i < layer.end; i += step) {
        const double saved = p[i];
        p[i] = saved + h;
        const double up = Reference{p}.loss(shape, data, batch);
        p[i] = saved - h;
        const double down = Reference{p}.loss(shape, data, batch);
        p[i] = saved;
        numeric.emplace_back(i, (up - down) / (2 * h));
        largest = std::max(largest, std::abs(numeric.back().second));
      }
      for (const auto& [i, g] : numeric) {
        CHECK_MESSAGE(std::abs(analytic[i] - g) <= 1e-4 * (std::abs(g) + 0.1 * largest),
                      "parameter " << i << ": analytic " << analytic[i] << " numeric " << g);
      }
    }
  }
}

TEST_CASE("resnet: batch norm: train mode normalises by the batch, eval mode per sample") {
  const gradsync::Dataset data = random_images(8, 2 * 10 * 9, 5, 13);
  ResNet net(kTiny, 8);
  net.init_params(4);
  net.forward_backward(data, range(0, 8));  // running statistics away from (0, 1)
  const std::vector<float> buffers(net.buffers().begin(), net.buffers().end());
  // Train mode: a sample's logits depend on the rest of its batch.
  const std::vector<float> in_8(net.logits(data, range(0, 8), true).begin(),
                                net.logits(data, range(0, 8), true).begin() + 5);
  const auto in_4 = net.logits(data, range(0, 4), true);
  CHECK(std::abs(in_8[0] - in_4[0]) > 1e-4);
  // Eval mode: not, and it leaves the running statistics as they were.
  net.buffers()[0] = buffers[0];
  std::copy(buffers.begin(), buffers.end(), net.buffers().begin());
  const std::vector<float> eval_8(net.logits(data, range(0, 8), false).begin(),
                                  net.logits(data, range(0, 8), false).begin() + 5);
  const auto eval_2 = net.logits(data, range(0, 2), false);
  for (int k = 0; k < 5; ++k) CHECK(eval_8[k] == doctest::Approx(eval_2[k]).epsilon(1e-6));
  CHECK(std::equal(buffers.begin(), buffers.end(), net.buffers().begin()));
}

TEST_CASE(
    "resnet: running statistics move by momentum 0.1 towards the batch's, variance unbiased") {
  const gradsync::Dataset data = random_images(5, 2 * 10 * 9, 5, 17);
  ResNet net(kTiny, 5);
  net.init_params(8);
  const auto batch = range(0, 5);
  for (std::size_t i = 0; i < net.buffers().size(); ++i)
    net.buffers()[i] = 0.5f + 0.1f * float(i % 5);
  const std::vector<double> before = as_double(net.buffers());
  const std::vector<double> p = as_double(net.params());
  Reference ref{p};
  ref.loss(kTiny, data, batch);
  net.forward_backward(data, batch);
  // Norm by norm: mean C floats then variance C floats; M values per channel.
  std::size_t b = 0, k = 0;
  for (const auto& [c, m] : ref.norms) {
    for (int ch = 0; ch < c; ++ch, ++k) {
      const double mean = 0.9 * before[b + ch] + 0.1 * ref.batch_mean[k];
      const double var = 0.9 * before[b + c + ch] + 0.1 * ref.batch_var[k] * m / (m - 1);
      CHECK(net.buffers()[b + ch] == doctest::Approx(mean).epsilon(1e-5));
      CHECK(net.buffers()[b + c + ch] == doctest::Approx(var).epsilon(1e-5));
    }
    b += 2 * std::size_t(c);
  }
  CHECK(b == net.buffers().size());
}

TEST_CASE("resnet: grad-ready ranges cover every parameter once, last layer first") {
  const gradsync::Dataset data = random_images(4, 2 * 10 * 9, 5, 19);
  ResNet net({.channels = 2,
              .height = 10,
              .width = 9,
              .classes = 5,
              .blocks_per_stage = 2,
              .stage_width = 4},
             4);
  net.init_params(1);
  std::vector<std::pair<std::size_t, std::size_t>> ready;
  net.set_grad_ready_callback([&](std::size_t b, std::size_t e) { ready.emplace_back(b, e); });
  net.forward_backward(data, range(0, 4));
  REQUIRE(ready.size() == net.layers().size());
  std::size_t end = net.param_count();
  for (std::size_t i = 0; i < ready.size(); ++i) {
    const ResNet::Layer& layer = net.layers()[net.layers().size() - 1 - i];
    CHECK(ready[i].first == layer.begin);
    CHECK(ready[i].second == layer.end);
    CHECK(ready[i].second == end);  // contiguous, descending: together exactly [0, P)
    end = ready[i].first;
  }
  CHECK(end == 0);
}

TEST_CASE("resnet: accumulate adds, grad_scale scales, evaluate changes nothing") {
  const gradsync::Dataset data = random_images(12, 2 * 10 * 9, 5, 23);
  ResNet net(kTiny, 6);
  net.init_params(2);
  net.forward_backward(data, range(6, 12));
  const std::vector<float> second(net.grads().begin(), net.grads().end());
  net.forward_backward(data, range(0, 6), 0.5f);
  const std::vector<float> first(net.grads().begin(), net.grads().end());
  net.forward_backward(data, range(6, 12), 1.0f, true);
  for (std::size_t i = 0; i < first.size(); ++i) {
    CHECK(net.grads()[i] == doctest::Approx(first[i] + second[i]).epsilon(1e-5).scale(1e-6));
  }
  net.forward_backward(data, range(0, 6));
  for (std::size_t i = 0; i < first.size(); i += 97) {
    CHECK(net.grads()[i] == doctest::Approx(2 * first[i]).epsilon(1e-5).scale(1e-6));
  }

  const std::vector<float> params(net.params().begin(), net.params().end());
  const std::vector<float> buffers(net.buffers().begin(), net.buffers().end());
  const gradsync::Evaluation eval = net.evaluate(data);  // 12 samples in chunks of 6
  CHECK(eval.samples == 12);
  CHECK(eval.loss > 0);
  CHECK(eval.accuracy >= 0);
  CHECK(eval.accuracy <= 1);
  CHECK(std::equal(params.begin(), params.end(), net.params().begin()));
  CHECK(std::equal(buffers.begin(), buffers.end(), net.buffers().begin()));
}

TEST_CASE("resnet: init is the seed's alone, Kaiming-normal convolutions, PyTorch's defaults") {
  ResNet a({}, 2), b({}, 2), c({}, 2);
  a.init_params(42);
  b.init_params(42);
  c.init_params(43);
  CHECK(std::equal(a.params().begin(), a.params().end(), b.params().begin()));
  CHECK(!std::equal(a.params().begin(), a.params().end(), c.params().begin()));
  // layer3.0.conv2: 64 x 576 weights, std sqrt(2 / (64 * 9)); then gamma 1, beta 0.
  const ResNet::Layer& layer = a.layers()[7];
  REQUIRE(layer.name == "layer3.0.conv2");
  const std::size_t weights = 64 * 576;
  double sq = 0;
  for (std::size_t i = layer.begin; i < layer.begin + weights; ++i)
    sq += double(a.params()[i]) * a.params()[i];
  CHECK(std::sqrt(sq / weights) == doctest::Approx(std::sqrt(2.0 / 576)).epsilon(0.02));
  for (std::size_t i = layer.begin + weights; i < layer.end; ++i) {
    CHECK(a.params()[i] == (i < layer.begin + weights + 64 ? 1.f : 0.f));
  }
  for (std::size_t i = a.layers().back().begin; i < a.param_count(); ++i)
    CHECK(std::abs(a.params()[i]) <= 0.125f);
  // Running means 0, variances 1: the first norm's 16 and 16, and so on.
  CHECK(a.buffers()[0] == 0.f);
  CHECK(a.buffers()[16] == 1.f);
  CHECK(std::accumulate(a.buffers().begin(), a.buffers().end(), 0.0) == a.buffers().size() / 2);
}

TEST_CASE("resnet: a batch-stats reducer summing two identical ranks changes nothing") {
  // SyncBatchNorm's contract (batch_norm.h): [sum, sum of squares, count] forward and
  // [sum dy, sum dy * xhat, count] backward per norm, summed across ranks in place. Two ranks
  // with the same batch double every entry: the same statistics, bit for bit.
  const gradsync::Dataset data = random_images(6, 2 * 10 * 9, 5, 29);
  const auto batch = range(0, 6);
  ResNet plain(kTiny, 6), synced(kTiny, 6);
  plain.init_params(6);
  synced.init_params(6);
  std::vector<std::size_t> sizes;
  synced.set_batch_stats_reducer([&](std::span<float> sums) {
    sizes.push_back(sums.size());
    for (float& v : sums) v *= 2;
  });
  const double loss = plain.forward_backward(data, batch);
  CHECK(synced.forward_backward(data, batch) == loss);
  CHECK(std::equal(plain.grads().begin(), plain.grads().end(), synced.grads().begin()));
  // Running means alike; running variances take the unbiased variance over all ranks' M values:
  // 0.9 + 0.1 var * 2M / (2M - 1) against 0.9 + 0.1 var * M / (M - 1).
  std::size_t b = 0;
  for (const auto& [c, pixels] :
       {std::pair{4, 90}, {4, 90}, {4, 90}, {8, 25}, {8, 25}, {8, 25}, {16, 9}, {16, 9}, {16, 9}}) {
    const double m = 6.0 * pixels;
    for (int ch = 0; ch < c; ++ch) {
      CHECK(synced.buffers()[b + ch] == plain.buffers()[b + ch]);
      const double ratio =
          (synced.buffers()[b + c + ch] - 0.9) / (plain.buffers()[b + c + ch] - 0.9);
      CHECK(ratio == doctest::Approx((2 * m / (2 * m - 1)) / (m / (m - 1))).epsilon(1e-5));
    }
    b += 2 * std::size_t(c);
  }
  CHECK(b == plain.buffers().size());
  // Each norm forward in layers() order, then backward in reverse: 2C + 1 floats each time.
  std::vector<std::size_t> expected;
  for (int c : {4, 4, 4, 8, 8, 8, 16, 16, 16}) expected.push_back(2 * std::size_t(c) + 1);
  expected.insert(expected.end(), expected.rbegin(), expected.rend());
  CHECK(sizes == expected);
  // Eval mode reads running statistics: no reduction.
  sizes.clear();
  synced.evaluate(data);
  CHECK(sizes.empty());
}

TEST_CASE("resnet: convolution chunks change only the summation order") {
  const gradsync::Dataset data = random_images(4, 2 * 10 * 9, 5, 31);
  const auto batch = range(0, 4);
  ResNet whole(kTiny, 4), pieces(kTiny, 4);
  whole.init_params(9);
  pieces.init_params(9);
  pieces.set_conv_chunk_pixels(1);
  CHECK(pieces.forward_backward(data, batch) ==
        doctest::Approx(whole.forward_backward(data, batch)).epsilon(1e-6));
  for (std::size_t i = 0; i < whole.param_count(); ++i) {
    CHECK(pieces.grads()[i] == doctest::Approx(whole.grads()[i]).epsilon(1e-4).scale(1e-3));
  }
}

TEST_CASE("resnet: model.kind resnet builds it from the config; images must be square") {
  gradsync::Config config;
  config.model.kind = "resnet";
  config.model.resnet_blocks = 2;
  config.model.resnet_width = 8;
  const ResNetShape shape{.blocks_per_stage = 2, .stage_width = 8};
  const auto model = gradsync::make_model(config, {784, 10}, 4);
  CHECK(model->param_count() == ResNet(shape, 1).param_count());
  CHECK(gradsync::model_parameters(config, {784, 10}) == std::int64_t(model->param_count()));
  CHECK_THROWS_AS(gradsync::make_model(config, {32, 10}, 4), gradsync::ConfigError);
}

TEST_CASE("resnet: the loops around the products give the same bits on every CPU path") {
  // resnet_ops.inl compiled per instruction set without contraction (model/CMakeLists.txt).
  // 20 channels: a 16-lane body and a tail; a strided 3x3 window over a 7 x 6 image.
  const int c = 20, pixels = 37;
  const auto shape = gradsync::resnet::ConvShape::make(c, 8, 3, 2, 7, 6);
  std::vector<float> z(std::size_t(c) * 2 * 7 * 6), z2(z.size()), mask(z.size()), f(6 * c);
  gradsync::SplitMix64 rng(37);
  for (auto* v : {&z, &z2, &mask, &f})
    for (float& x : *v) x = float(rng.normal());
  const float *mean = f.data(), *scale = mean + c, *shift = scale + c, *a = shift + c, *b = a + c,
              *c0 = b + c;
  std::vector<float> first;
  gradsync::testing::on_every_cpu_path([&] {
    const gradsync::resnet::ResnetOps& ops = gradsync::resnet::resnet_ops();
    std::vector<float> out;
    auto keep = [&](const std::vector<float>& v) { out.insert(out.end(), v.begin(), v.end()); };
    std::vector<float> col(std::size_t(shape.k()) * 9), g = z2, y(std::size_t(c) * pixels);
    ops.im2col(shape, z.data(), 3, 9, col.data());
    keep(col);
    ops.col2im_add(shape, col.data(), 3, 9, g.data());
    keep(g);
    std::vector<double> sums(2 * c, 0.0), dsums(2 * c, 0.0);
    ops.add_channel_sums(c, pixels, z.data(), sums.data());
    ops.add_backward_sums(c, pixels, z2.data(), mask.data(), z.data(), mean, dsums.data());
    for (double v : sums) out.push_back(float(v));
    for (double v : dsums) out.push_back(float(v));
    ops.bn_apply(c, pixels, z.data(), mean, scale, shift, true, y.data());
    keep(y);
    ops.bn_add_relu(c, pixels, z.data(), mean, scale, shift, z2.data(), y.data());
    keep(y);
    ops.bn_bn_add_relu(c, pixels, z.data(), mean, scale, shift, z2.data(), a, b, c0, y.data());
    keep(y);
    ops.bn_backward_apply(c, pixels, z2.data(), mask.data(), z.data(), mean, a, b, c0, y.data());
    keep(y);
    g = z2;
    ops.relu_mask(std::int64_t(g.size()), mask.data(), g.data());
    keep(g);
    if (first.empty()) first = out;
    CHECK(std::memcmp(out.data(), first.data(), out.size() * sizeof(float)) == 0);
  });
}
