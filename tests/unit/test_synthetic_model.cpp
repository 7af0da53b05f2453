// SyntheticModel: real gradient buffers of a chosen size, a chosen compute time, and layer
// ranges reported last first, so strategies see what a real network of that size gives them.
#include <doctest/doctest.h>

#include <chrono>
#include <utility>
#include <vector>

#include "model/synthetic_model.h"

namespace {

using gradsync::SyntheticModel;
using namespace std::chrono_literals;

const gradsync::Dataset kNoData{};

}  // namespace

TEST_CASE("synthetic model: gradient of 0.5 mean (p - t)^2, scaled and accumulated") {
  SyntheticModel model(1000, 7, 0ms);
  model.init_params(3);
  REQUIRE(model.param_count() == 1000);
  const std::vector<std::int64_t> batch = {4, 9, 11};
  const float t = SyntheticModel::batch_target(batch);
  CHECK(t >= -0.5f);
  CHECK(t < 0.5f);

  std::vector<float> p(model.params().begin(), model.params().end());
  double expected_loss = 0;
  for (float v : p) expected_loss += 0.5 * (v - t) * (v - t) / 1000.0;
  const double loss = model.forward_backward(kNoData, batch, 0.5f, false);
  CHECK(loss == doctest::Approx(expected_loss).epsilon(1e-9));
  for (std::size_t i = 0; i < p.size(); ++i) {
    REQUIRE(model.grads()[i] == doctest::Approx(0.5 * (p[i] - t) / 1000.0).epsilon(1e-6));
  }
  model.forward_backward(kNoData, batch, 0.5f, true);  // accumulate: twice the gradient
  for (std::size_t i = 0; i < p.size(); ++i) {
    REQUIRE(model.grads()[i] == doctest::Approx((p[i] - t) / 1000.0).epsilon(1e-6));
  }
}

TEST_CASE("synthetic model: the same seed gives the same parameters on every replica") {
  SyntheticModel a(4096, 4, 0ms), b(4096, 4, 0ms);
  a.init_params(11);
  b.init_params(11);
  CHECK(std::vector<float>(a.params().begin(), a.params().end()) ==
        std::vector<float>(b.params().begin(), b.params().end()));
  b.init_params(12);
  CHECK(std::vector<float>(a.params().begin(), a.params().end()) !=
        std::vector<float>(b.params().begin(), b.params().end()));
}

TEST_CASE("synthetic model: layers reported last first, tiling the buffer, within the time") {
  SyntheticModel model(1003, 5, 30ms);
  model.init_params(1);
  std::vector<std::pair<std::size_t, std::size_t>> ready;
  model.set_grad_ready_callback([&](std::size_t b, std::size_t e) { ready.emplace_back(b, e); });
  const std::vector<std::int64_t> batch = {1, 2};
  const auto start = std::chrono::steady_clock::now();
  model.forward_backward(kNoData, batch);
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 30ms);  // sleeps until the compute time is over, never less
  REQUIRE(ready.size() == 5);
  CHECK(ready.front().second == 1003);
  CHECK(ready.back().first == 0);
  for (std::size_t k = 1; k < ready.size(); ++k) CHECK(ready[k].second == ready[k - 1].first);
}

TEST_CASE("synthetic model: bad shapes are refused") {
  CHECK_THROWS(SyntheticModel(0, 1, 0ms));
  CHECK_THROWS(SyntheticModel(10, 11, 0ms));
  CHECK_THROWS(SyntheticModel(10, 0, 0ms));
}

TEST_CASE("synthetic model: the mean of the shards' gradients is the global batch's") {
  // What lets dp, allreduce and ps sync follow `single` on a synthetic model: the batch target
  // is linear in the samples, so two shards of 4 average to the batch of 8.
  SyntheticModel whole(64, 2, 0ms), left(64, 2, 0ms), right(64, 2, 0ms);
  for (SyntheticModel* m : {&whole, &left, &right}) m->init_params(5);
  const std::vector<std::int64_t> batch = {3, 17, 40, 41, 99, 120, 121, 300};
  whole.forward_backward(kNoData, batch);
  left.forward_backward(kNoData, std::span(batch).first(4));
  right.forward_backward(kNoData, std::span(batch).last(4));
  for (std::size_t i = 0; i < 64; ++i) {
    const float mean = 0.5f * (left.grads()[i] + right.grads()[i]);
    REQUIRE(mean == doctest::Approx(whole.grads()[i]).epsilon(1e-6));
  }
  // And the target is the mean of the samples' own.
  double sum = 0;
  for (std::int64_t i : batch) sum += SyntheticModel::sample_target(i);
  CHECK(SyntheticModel::batch_target(batch) == doctest::Approx(sum / 8).epsilon(1e-7));
}
