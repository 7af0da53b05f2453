// Training-time data augmentation for images, as DDP's image examples use it: a random crop with
// zero padding (torchvision's RandomCrop(size, padding=P)) then a random horizontal flip
// (RandomHorizontalFlip(0.5)), in that order.
//
// Nothing here holds random state. What happens to a sample is a pure function of
// (train.seed, epoch, dataset index): augment_key() mixes the three with SplitMix64's finaliser,
// crop_flip_for() reads the offsets and the flip from the key. Every strategy, rank count and
// launcher therefore sees the same augmented sample for the same global sample as `single`
// does, since the sampler already makes which samples form step t a function of (seed, t).
//
//   const CropFlip t = crop_flip_for(augment_key(seed, epoch, index), padding);
//   apply_crop_flip(sample, image, {.height = 28, .width = 28, .channels = 1}, t);
//
// Layout: (H, W, C) row-major, channels innermost; for one channel that is also (C, H, W).
// Training batches only: evaluation reads the samples as they are.
#pragma once

#include <cstdint>
#include <span>

namespace gradsync {

struct ImageShape {
  int height = 28, width = 28, channels = 1;
  int pixels() const { return height * width; }
  int size() const { return height * width * channels; }
};

// One sample's transform: out(y, x) = in(y + dy, x' + dx) with x' = W-1-x when flipped (x
// otherwise), zero where that falls outside the image. dy and dx in [-P, P]: padding P then a
// crop whose top-left corner is at (P + dy, P + dx) of the padded image.
struct CropFlip {
  int dy = 0, dx = 0;
  bool flip = false;
  bool operator==(const CropFlip&) const = default;
};

// The augmentation a run applies (data.augment, data.crop_padding, train.seed); padding < 0 or
// !enabled: none.
struct Augmentation {
  bool enabled = false;
  int padding = 2;
  std::uint64_t seed = 0;
};

// SplitMix64's finaliser (Steele, Lea and Flood 2014): a bijection of 64-bit words with full
// avalanche.
std::uint64_t splitmix64(std::uint64_t x);

// The counter-based key of one sample in one epoch: chained mixes, so that (epoch, index) pairs
// do not collide as a plain seed ^ epoch ^ index would.
std::uint64_t augment_key(std::uint64_t seed, std::int64_t epoch, std::int64_t index);

// Offsets uniform over [-padding, padding] each (independent bits of the key), flip with
// probability 1/2. padding 0: no crop, flip only.
CropFlip crop_flip_for(std::uint64_t key, int padding);

// `dst` = `src` transformed by `t`; both shape.size() floats, not overlapping.
void apply_crop_flip(std::span<const float> src, std::span<float> dst, ImageShape shape,
                     CropFlip t);

// One training image as the ResNet reads it: `sample`, stored (C, H, W), written into `image`
// as (H, W, C) (the same for one channel), transformed by `augmentation` for (epoch, index) on
// the way when augmentation.enabled, through `scratch` (shape.size() floats). What the CPU and the GPU
// ResNet both do to each sample of a training batch, so they see the same images.
void gather_training_image(std::span<const float> sample, std::span<float> image, ImageShape shape,
                           const Augmentation& augmentation, std::int64_t epoch,
                           std::int64_t index, std::span<float> scratch);

}  // namespace gradsync
