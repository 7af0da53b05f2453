// model/augment.h: crop with zero padding and horizontal flip, keyed by (seed, epoch, index);
// the ResNet applies it to training batches only; the data.augment keys.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "common/random.h"
#include "model/augment.h"
#include "model/resnet/resnet.h"
#include "tests/support/preset_text.h"

namespace {

using gradsync::apply_crop_flip;
using gradsync::augment_key;
using gradsync::crop_flip_for;
using gradsync::CropFlip;
using gradsync::ImageShape;

// Pixel (y, x) of a one-channel image holds 1 + 10 y + x: every value names its place.
std::vector<float> numbered(int h, int w) {
  std::vector<float> image(static_cast<std::size_t>(h * w));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) image[static_cast<std::size_t>(y * w + x)] = float(1 + 10 * y + x);
  }
  return image;
}

std::vector<float> transformed(const std::vector<float>& src, ImageShape shape, CropFlip t) {
  std::vector<float> dst(src.size(), -1.0f);
  apply_crop_flip(src, dst, shape, t);
  return dst;
}

gradsync::Dataset random_images(std::int64_t n, int side, std::uint64_t seed) {
  gradsync::Dataset data;
  data.size = n;
  data.dim = side * side;
  data.classes = 3;
  gradsync::SplitMix64 rng(seed);
  for (std::int64_t i = 0; i < n * data.dim; ++i) data.features.push_back(float(rng.normal()));
  for (std::int64_t i = 0; i < n; ++i) data.labels.push_back(std::int32_t(rng.below(3)));
  return data;
}

const gradsync::ResNetShape kShape{
    .channels = 1, .height = 8, .width = 8, .classes = 3, .blocks_per_stage = 1, .stage_width = 4};

}  // namespace

TEST_CASE("augment: crop and flip of a known image give the expected pixels") {
  const ImageShape shape{.height = 3, .width = 4, .channels = 1};
  const std::vector<float> image = numbered(3, 4);
  // rows: 1 2 3 4 / 11 12 13 14 / 21 22 23 24
  CHECK(transformed(image, shape, {}) == image);
  // Shift down-right by one (out(y, x) = in(y + 1, x + 1)): zeros on the last row and column.
  CHECK(transformed(image, shape, {.dy = 1, .dx = 1}) ==
        std::vector<float>{12, 13, 14, 0, 22, 23, 24, 0, 0, 0, 0, 0});
  CHECK(transformed(image, shape, {.dy = -1, .dx = -2}) ==
        std::vector<float>{0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 11, 12});
  CHECK(transformed(image, shape, {.flip = true}) ==
        std::vector<float>{4, 3, 2, 1, 14, 13, 12, 11, 24, 23, 22, 21});
  // Crop first, then flip (torchvision's RandomCrop then RandomHorizontalFlip).
  CHECK(transformed(image, shape, {.dy = 0, .dx = 1, .flip = true}) ==
        std::vector<float>{0, 4, 3, 2, 0, 14, 13, 12, 0, 24, 23, 22});
  // Channels innermost (H, W, C) move together.
  const ImageShape two{.height = 1, .width = 3, .channels = 2};
  CHECK(transformed({1, -1, 2, -2, 3, -3}, two, {.dx = 1, .flip = true}) ==
        std::vector<float>{0, 0, 3, -3, 2, -2});
  // A fixed key gives a fixed transform (the values pin the hash: changing it changes every
  // run's augmented samples).
  const CropFlip t = crop_flip_for(augment_key(0, 0, 0), 2);
  CHECK(t == crop_flip_for(augment_key(0, 0, 0), 2));
  CHECK(t.dy >= -2);
  CHECK(t.dy <= 2);
  CHECK(transformed(numbered(28, 28), {}, t) == transformed(numbered(28, 28), {}, t));
}

TEST_CASE("augment: keys are deterministic and differ across index, epoch and seed") {
  CHECK(augment_key(7, 3, 12345) == augment_key(7, 3, 12345));
  CHECK(augment_key(7, 3, 12345) != augment_key(7, 3, 12346));
  CHECK(augment_key(7, 3, 12345) != augment_key(7, 4, 12345));
  CHECK(augment_key(7, 3, 12345) != augment_key(8, 3, 12345));
  // No collision of the plain xor: (epoch 1, index 0) against (epoch 0, index 1).
  CHECK(augment_key(0, 1, 0) != augment_key(0, 0, 1));
  // Over one epoch of 60000 samples, every key distinct.
  std::set<std::uint64_t> keys;
  for (std::int64_t i = 0; i < 60000; ++i) keys.insert(augment_key(1, 0, i));
  CHECK(keys.size() == 60000);
  // Different samples get different transforms often (25 crops x 2 flips with P = 2).
  int same = 0;
  for (std::int64_t i = 0; i < 1000; ++i) {
    same += crop_flip_for(augment_key(1, 0, i), 2) == crop_flip_for(augment_key(1, 0, i + 1), 2);
  }
  CHECK(same < 60);
}

TEST_CASE("augment: flips about half the time, offsets uniform over -P..P") {
  const int padding = 2, n = 50000;
  int flips = 0;
  std::vector<int> dy(2 * padding + 1), dx(2 * padding + 1);
  for (std::int64_t i = 0; i < n; ++i) {
    const CropFlip t = crop_flip_for(augment_key(42, i / 1000, i), padding);
    flips += t.flip;
    REQUIRE(t.dy >= -padding);
    REQUIRE(t.dy <= padding);
    REQUIRE(t.dx >= -padding);
    REQUIRE(t.dx <= padding);
    ++dy[t.dy + padding];
    ++dx[t.dx + padding];
  }
  // Binomial(50000, 1/2): sd 112; 5 sd either side.
  CHECK(std::abs(flips - n / 2) < 560);
  for (int k = 0; k <= 2 * padding; ++k) {
    CHECK(std::abs(dy[k] - n / 5) < 500);  // sd ~ 89
    CHECK(std::abs(dx[k] - n / 5) < 500);
  }
  // Padding 0: flips only.
  for (std::int64_t i = 0; i < 100; ++i) {
    const CropFlip t = crop_flip_for(augment_key(1, 0, i), 0);
    CHECK(t.dy == 0);
    CHECK(t.dx == 0);
  }
}

TEST_CASE("augment: the resnet trains on the augmented samples, evaluates on the originals") {
  const gradsync::Dataset data = random_images(16, 8, 3);
  const gradsync::Augmentation augmentation{.enabled = true, .padding = 2, .seed = 5};
  const std::int64_t epoch = 3;
  std::vector<std::int64_t> batch(6);
  std::iota(batch.begin(), batch.end(), 5);

  // The same data set, each training sample augmented by hand with its key.
  gradsync::Dataset by_hand = data;
  for (const std::int64_t i : batch) {
    const auto offset = static_cast<std::size_t>(i * data.dim);
    std::span<float> out(by_hand.features.data() + offset, static_cast<std::size_t>(data.dim));
    apply_crop_flip(data.sample(i), out, {.height = 8, .width = 8, .channels = 1},
                    crop_flip_for(augment_key(augmentation.seed, epoch, i), augmentation.padding));
  }

  gradsync::ResNet augmenting(kShape, 8), plain(kShape, 8);
  augmenting.init_params(1);
  plain.init_params(1);
  augmenting.set_augmentation(augmentation);
  augmenting.set_epoch(epoch);
  plain.set_epoch(epoch);  // ignored without augmentation

  // Evaluation and eval-mode logits are untouched.
  const auto eval_a = augmenting.evaluate(data), eval_p = plain.evaluate(data);
  CHECK(eval_a.loss == eval_p.loss);
  CHECK(eval_a.accuracy == eval_p.accuracy);
  const auto logits_a = augmenting.logits(data, batch, false);
  const std::vector<float> kept(logits_a.begin(), logits_a.end());
  const auto logits_p = plain.logits(data, batch, false);
  CHECK(kept == std::vector<float>(logits_p.begin(), logits_p.end()));

  // Training: exactly the step on the by-hand augmented samples.
  const double loss_a = augmenting.forward_backward(data, batch);
  const double loss_p = plain.forward_backward(by_hand, batch);
  CHECK(loss_a == loss_p);
  CHECK(std::equal(augmenting.grads().begin(), augmenting.grads().end(), plain.grads().begin()));

  // Another epoch, other samples: another loss from the same parameters and statistics.
  gradsync::ResNet other(kShape, 8);
  other.init_params(1);
  other.set_augmentation(augmentation);
  other.set_epoch(epoch + 1);
  CHECK(other.forward_backward(data, batch) != loss_a);
}

TEST_CASE("augment: data.augment and data.crop_padding keys") {
  using gradsync::testing::error_of;
  using gradsync::testing::load;
  const std::string resnet = "data: {kind: synthetic, dim: 64}\nmodel: {kind: resnet}\n";
  CHECK(load(resnet).runs[0].data.augment == "none");
  CHECK(load(resnet).runs[0].data.crop_padding == 2);
  const gradsync::Config c =
      load(resnet, {"data.augment=crop_flip", "data.crop_padding=4"}).runs[0];
  CHECK(c.data.augment == "crop_flip");
  CHECK(c.data.crop_padding == 4);
  CHECK(error_of(resnet, {"data.augment=mixup"}).find("data.augment") != std::string::npos);
  CHECK(error_of(resnet, {"data.crop_padding=-1"}).find("data.crop_padding") != std::string::npos);
  // The MLP reads flat vectors: refused at load.
  CHECK(error_of("data: {kind: synthetic, augment: crop_flip}\n") ==
        "presets/x.yaml:1: data.augment: 'crop_flip' augments images for model.kind resnet only");
}
