#include "model/augment.h"

#include <algorithm>

#include "common/error.h"

namespace gradsync {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t augment_key(std::uint64_t seed, std::int64_t epoch, std::int64_t index) {
  std::uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ static_cast<std::uint64_t>(epoch));
  return splitmix64(h ^ static_cast<std::uint64_t>(index));
}

CropFlip crop_flip_for(std::uint64_t key, int padding) {
  CropFlip t;
  t.flip = (key >> 63) != 0;
  if (padding > 0) {
    const std::uint64_t choices = 2 * static_cast<std::uint64_t>(padding) + 1;
    // Two disjoint 24-bit fields: the modulo bias is below choices / 2^24.
    t.dy = static_cast<int>((key & 0xffffff) % choices) - padding;
    t.dx = static_cast<int>(((key >> 24) & 0xffffff) % choices) - padding;
  }
  return t;
}

void apply_crop_flip(std::span<const float> src, std::span<float> dst, ImageShape shape,
                     CropFlip t) {
  const int h = shape.height, w = shape.width, c = shape.channels;
  GRADSYNC_CHECK(src.size() == static_cast<std::size_t>(shape.size()) && dst.size() == src.size(),
                 "apply_crop_flip: buffers of another size than the image");
  for (int y = 0; y < h; ++y) {
    float* row = dst.data() + static_cast<std::size_t>(y) * w * c;
    const int sy = y + t.dy;
    if (sy < 0 || sy >= h) {
      std::fill_n(row, w * c, 0.0f);
      continue;
    }
    const float* in = src.data() + static_cast<std::size_t>(sy) * w * c;
    for (int x = 0; x < w; ++x) {
      const int sx = (t.flip ? w - 1 - x : x) + t.dx;
      float* out = row + x * c;
      if (sx < 0 || sx >= w) {
        std::fill_n(out, c, 0.0f);
      } else {
        std::copy_n(in + sx * c, c, out);
      }
    }
  }
}

void gather_training_image(std::span<const float> sample, std::span<float> image, ImageShape shape,
                           const Augmentation& augmentation, std::int64_t epoch,
                           std::int64_t index, std::span<float> scratch) {
  const int c = shape.channels, hw = shape.pixels();
  const bool augment = augmentation.enabled;
  float* hwc = augment ? scratch.data() : image.data();
  if (c == 1) {
    std::copy(sample.begin(), sample.begin() + shape.size(), hwc);
  } else {
    for (int p = 0; p < hw; ++p) {
      for (int ch = 0; ch < c; ++ch) hwc[p * c + ch] = sample[std::size_t(ch * hw + p)];
    }
  }
  if (augment) {
    const CropFlip t = crop_flip_for(augment_key(augmentation.seed, epoch, index),
                                     augmentation.padding);
    apply_crop_flip(scratch.first(std::size_t(shape.size())), image, shape, t);
  }
}

}  // namespace gradsync
