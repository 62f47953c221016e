// Rng: a small, fast, seedable random stream (SplitMix64) with the draws the augmentations need. Every random
// decision that affects batch bytes goes through it, seeded from (job seed, epoch, sample id), so a batch is
// bit-identical whichever worker makes it. Not thread-safe: one Rng per sample.
#pragma once

#include <cstdint>

#include "base/hash.h"

namespace stoker {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t NextU64() {
    state_ += 0x9e3779b97f4a7c15ULL;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, 1) with 53 random bits.
  double NextDouble() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

  // Uniform in [lo, hi).
  double Uniform(double lo, double hi) { return lo + (hi - lo) * NextDouble(); }

  // Uniform integer in [lo, hi], inclusive, without modulo bias. Requires lo <= hi.
  int64_t UniformInt(int64_t lo, int64_t hi) {
    uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
    if (range == 0) return static_cast<int64_t>(NextU64());  // the full 64-bit range
    uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % range);
    uint64_t x;
    do {
      x = NextU64();
    } while (x >= limit);
    return lo + static_cast<int64_t>(x % range);
  }

 private:
  uint64_t state_;
};

}  // namespace stoker
