#include <doctest/doctest.h>

#include <cmath>
#include <numeric>

#include "common/random.h"
#include "model/mlp.h"

namespace {

gradsync::Dataset random_dataset(std::int64_t n, int dim, int classes, std::uint64_t seed) {
  gradsync::Dataset data;
  data.size = n;
  data.dim = dim;
  data.classes = classes;
  gradsync::SplitMix64 rng(seed);
  for (std::int64_t i = 0; i < n * dim; ++i) data.features.push_back(float(rng.normal()));
  for (std::int64_t i = 0; i < n; ++i) data.labels.push_back(std::int32_t(rng.below(classes)));
  return data;
}

}  // namespace

TEST_CASE("mlp: parameter layout is one flat buffer, layer by layer") {
  gradsync::Mlp mlp({5, 4, 3}, 8);
  CHECK(mlp.param_count() == 5 * 4 + 4 + 4 * 3 + 3);
  REQUIRE(mlp.layers().size() == 2);
  CHECK(mlp.layers()[0].weight_offset == 0);
  CHECK(mlp.layers()[0].bias_offset == 20);
  CHECK(mlp.layers()[1].weight_offset == 24);
  CHECK(mlp.layers()[1].end() == mlp.param_count());
  CHECK(mlp.grads().size() == mlp.params().size());
}

TEST_CASE("mlp: gradients agree with central finite differences") {
  const gradsync::Dataset data = random_dataset(16, 6, 4, 11);
  gradsync::Mlp mlp({6, 5, 4, 4}, 16);
  mlp.init_params(3);
  std::vector<std::int64_t> batch(12);
  std::iota(batch.begin(), batch.end(), 2);

  mlp.forward_backward(data, batch);
  const std::vector<float> analytic(mlp.grads().begin(), mlp.grads().end());

  // Central differences in float: step 1e-2 keeps rounding error (~1e-7 / 1e-2) well below the
  // tolerance while the ReLU kinks stay rare enough for this fixed seed.
  const float h = 1e-2f;
  double worst = 0;
  for (std::size_t i = 0; i < mlp.param_count(); ++i) {
    const float saved = mlp.params()[i];
    mlp.params()[i] = saved + h;
    const double up = mlp.forward_backward(data, batch);
    mlp.params()[i] = saved - h;
    const double down = mlp.forward_backward(data, batch);
    mlp.params()[i] = saved;
    const double numeric = (up - down) / (2.0 * h);
    const double error = std::abs(numeric - analytic[i]) / std::max(1e-2, std::abs(numeric));
    worst = std::max(worst, error);
    CHECK_MESSAGE(error < 2e-2,
                  "parameter " << i << ": analytic " << analytic[i] << " numeric " << numeric);
  }
  MESSAGE("worst relative gradient error " << worst);
}

TEST_CASE("mlp: the gradient of a batch is the mean of its samples' gradients") {
  const gradsync::Dataset data = random_dataset(8, 5, 3, 5);
  gradsync::Mlp mlp({5, 7, 3}, 8);
  mlp.init_params(9);
  std::vector<std::int64_t> all(8);
  std::iota(all.begin(), all.end(), 0);
  mlp.forward_backward(data, all);
  const std::vector<float> whole(mlp.grads().begin(), mlp.grads().end());

  std::vector<double> mean(whole.size(), 0.0);
  for (std::int64_t i = 0; i < 8; ++i) {
    const std::int64_t one[] = {i};
    mlp.forward_backward(data, one);
    for (std::size_t k = 0; k < mean.size(); ++k) mean[k] += mlp.grads()[k] / 8.0;
  }
  for (std::size_t k = 0; k < mean.size(); ++k)
    CHECK(whole[k] == doctest::Approx(mean[k]).epsilon(1e-4));
}

TEST_CASE("mlp: the gradient-ready callback reports layers last to first, each already final") {
  const gradsync::Dataset data = random_dataset(4, 3, 2, 1);
  gradsync::Mlp mlp({3, 4, 4, 2}, 4);
  mlp.init_params(2);
  const std::int64_t batch[] = {0, 1, 2, 3};
  mlp.forward_backward(data, batch);
  const std::vector<float> expected(mlp.grads().begin(), mlp.grads().end());
  std::fill(mlp.grads().begin(), mlp.grads().end(), 0.f);

  std::vector<std::size_t> begins;
  mlp.set_grad_ready_callback([&](std::size_t begin, std::size_t end) {
    begins.push_back(begin);
    for (std::size_t k = begin; k < end; ++k) CHECK(mlp.grads()[k] == expected[k]);
  });
  mlp.forward_backward(data, batch);
  const auto& layers = mlp.layers();
  CHECK(begins == std::vector<std::size_t>{layers[2].weight_offset, layers[1].weight_offset,
                                           layers[0].weight_offset});
}

TEST_CASE("mlp: evaluate reports the loss and accuracy of the whole dataset") {
  gradsync::Dataset data = random_dataset(10, 4, 3, 8);
  gradsync::Mlp mlp({4, 3}, 4);  // a linear softmax model: easy to check by hand
  mlp.init_params(1);
  const gradsync::Evaluation eval = mlp.evaluate(data);
  CHECK(eval.samples == 10);

  double loss = 0;
  int correct = 0;
  const auto p = mlp.params();
  for (int i = 0; i < 10; ++i) {
    double z[3];
    for (int c = 0; c < 3; ++c) {
      z[c] = p[12 + c];
      for (int d = 0; d < 4; ++d) z[c] += p[d * 3 + c] * data.features[i * 4 + d];
    }
    const int argmax = int(std::max_element(z, z + 3) - z);
    const double lse = std::log(std::exp(z[0]) + std::exp(z[1]) + std::exp(z[2]));
    loss += lse - z[data.labels[i]];
    correct += argmax == data.labels[i];
  }
  CHECK(eval.loss == doctest::Approx(loss / 10).epsilon(1e-5));
  CHECK(eval.accuracy == doctest::Approx(correct / 10.0));
}

TEST_CASE("mlp: accumulating k scaled micro-batches gives the gradient of their union") {
  const gradsync::Dataset data = random_dataset(12, 5, 3, 21);
  gradsync::Mlp mlp({5, 6, 3}, 12);
  mlp.init_params(4);
  std::vector<std::int64_t> all(12);
  std::iota(all.begin(), all.end(), 0);
  mlp.forward_backward(data, all);
  const std::vector<float> whole(mlp.grads().begin(), mlp.grads().end());

  const std::span<const std::int64_t> indices(all);
  for (int micro = 0; micro < 3; ++micro) {
    mlp.forward_backward(data, indices.subspan(micro * 4, 4), 1.0f / 3, micro > 0);
  }
  for (std::size_t k = 0; k < whole.size(); ++k) {
    CHECK(mlp.grads()[k] == doctest::Approx(whole[k]).epsilon(1e-5));
  }
}
