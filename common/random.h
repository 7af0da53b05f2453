// Deterministic random numbers that are the same on every rank, compiler and standard library.
//
// std::mt19937 is portable but std::*_distribution and std::shuffle are implementation-defined,
// and every rank must draw the same initial parameters and the same epoch permutation without
// talking to the others. SplitMix64 (Steele, Lea, Flood 2014) is tiny, fast and passes BigCrush.
#pragma once

#include <cmath>
#include <cstdint>

namespace gradsync {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  // Uniform integer in [0, n), n >= 1, without modulo bias: the few raw values below
  // 2^64 mod n are rejected, so every residue is equally likely.
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t threshold = (0 - n) % n;
    for (;;) {
      const std::uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

  // Standard normal (Box-Muller; one of the pair is discarded for simplicity).
  double normal() {
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

 private:
  std::uint64_t state_;
};

// Mixes two values into one seed, e.g. (seed, epoch) or (seed, rank).
inline std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b) {
  return SplitMix64(a ^ (b * 0xD1B54A32D192ED03ULL + 0x8CB92BA72F3D8DD7ULL)).next();
}

}  // namespace gradsync
