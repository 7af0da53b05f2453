#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/error.h"
#include "model/synthetic_data.h"

using gradsync::SyntheticDataOptions;

namespace {

SyntheticDataOptions small_options(std::uint64_t seed) {
  SyntheticDataOptions options;
  options.train_samples = 2000;
  options.test_samples = 500;
  options.seed = seed;
  return options;
}

}  // namespace

TEST_CASE("synthetic data has the requested shape") {
  const auto data = gradsync::make_synthetic_data(small_options(1));
  CHECK(data.train.name == "synthetic/train");
  CHECK(data.test.name == "synthetic/test");
  CHECK(data.train.size == 2000);
  CHECK(data.test.size == 500);
  for (const gradsync::Dataset* set : {&data.train, &data.test}) {
    CHECK(set->dim == 32);
    CHECK(set->classes == 10);
    CHECK(set->features.size() == static_cast<std::size_t>(set->size * 32));
    CHECK(set->labels.size() == static_cast<std::size_t>(set->size));
    for (const std::int32_t label : set->labels) {
      REQUIRE(label >= 0);
      REQUIRE(label < 10);
    }
    for (const float x : set->features) REQUIRE(std::isfinite(x));
  }
}

TEST_CASE("synthetic data is a pure function of the seed") {
  const auto a = gradsync::make_synthetic_data(small_options(7));
  const auto b = gradsync::make_synthetic_data(small_options(7));
  CHECK(a.train.features == b.train.features);
  CHECK(a.train.labels == b.train.labels);
  CHECK(a.test.features == b.test.features);
  CHECK(a.test.labels == b.test.labels);

  const auto c = gradsync::make_synthetic_data(small_options(8));
  CHECK(a.train.features != c.train.features);
  CHECK(a.train.labels != c.train.labels);
  CHECK(a.test.features != c.test.features);

  // Train and test come from different streams.
  CHECK(!std::equal(a.test.features.begin(), a.test.features.end(), a.train.features.begin()));

  // The teacher does not depend on how many samples are drawn: a longer train set starts
  // with the shorter one.
  SyntheticDataOptions longer = small_options(7);
  longer.train_samples = 3000;
  const auto d = gradsync::make_synthetic_data(longer);
  CHECK(std::equal(a.train.features.begin(), a.train.features.end(), d.train.features.begin()));
  CHECK(std::equal(a.train.labels.begin(), a.train.labels.end(), d.train.labels.begin()));
  CHECK(a.test.labels == d.test.labels);
}

TEST_CASE("features look standard normal") {
  const auto data = gradsync::make_synthetic_data(small_options(3));
  double sum = 0, squares = 0;
  for (const float x : data.train.features) {
    sum += x;
    squares += double{x} * x;
  }
  const double n = static_cast<double>(data.train.features.size());
  CHECK(std::abs(sum / n) < 0.02);
  CHECK(squares / n == doctest::Approx(1.0).epsilon(0.03));
}

TEST_CASE("every class gets a reasonable share") {
  for (const std::uint64_t seed : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}) {
    CAPTURE(seed);
    const auto data = gradsync::make_synthetic_data(small_options(seed));
    std::vector<int> counts(10, 0);
    for (const std::int32_t label : data.train.labels) ++counts[label];
    for (int c = 0; c < 10; ++c) {
      CAPTURE(c);
      // Uniform would be 200 of 2000; allow wide sampling noise but no starved class.
      CHECK(counts[c] >= 120);
      CHECK(counts[c] <= 300);
    }
  }
}

TEST_CASE("other class counts and dimensions work") {
  for (const int classes : {2, 3, 25}) {
    CAPTURE(classes);
    SyntheticDataOptions options = small_options(5);
    options.classes = classes;
    options.dim = classes == 25 ? 4 : 1;
    const auto data = gradsync::make_synthetic_data(options);
    std::vector<int> counts(classes, 0);
    for (const std::int32_t label : data.train.labels) {
      REQUIRE(label >= 0);
      REQUIRE(label < classes);
      ++counts[label];
    }
    for (const int count : counts) CHECK(count > 0);
  }
}

TEST_CASE("invalid options throw") {
  SyntheticDataOptions options;
  options.classes = 1;
  CHECK_THROWS_AS(gradsync::make_synthetic_data(options), gradsync::Error);
  options = {};
  options.dim = 0;
  CHECK_THROWS_AS(gradsync::make_synthetic_data(options), gradsync::Error);
  options = {};
  options.train_samples = 0;
  CHECK_THROWS_AS(gradsync::make_synthetic_data(options), gradsync::Error);
}
