// Hashing: XXH64 (manifest fingerprints, shard checksums) and a 64-bit mixer for deriving independent seeds
// (per-epoch permutation keys, per-sample augmentation streams). Both are stable across machines and builds:
// plans and batch bytes depend on them, so changing either changes every job's data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace stoker {

// XXH64 of a buffer (the published algorithm; test vectors in hash_test.cc).
uint64_t Xxh64(const void* data, size_t size, uint64_t seed = 0);

// Streaming XXH64 for large files read in chunks.
class Xxh64Stream {
 public:
  explicit Xxh64Stream(uint64_t seed = 0);
  void Update(const void* data, size_t size);
  uint64_t Digest() const;

 private:
  uint64_t v_[4];
  uint64_t total_ = 0;
  unsigned char buffer_[32];
  size_t buffered_ = 0;
  uint64_t seed_;
};

// SplitMix64's finaliser: a bijective mixer of 64 bits.
constexpr uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Combines values into one seed; order matters. DeriveSeed(a, b, c) != DeriveSeed(a, c, b).
constexpr uint64_t DeriveSeed(uint64_t a, uint64_t b) { return Mix64(a ^ Mix64(b + 0x632be59bd9b4e019ULL)); }
constexpr uint64_t DeriveSeed(uint64_t a, uint64_t b, uint64_t c) { return DeriveSeed(DeriveSeed(a, b), c); }
constexpr uint64_t DeriveSeed(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return DeriveSeed(DeriveSeed(a, b, c), d);
}

}  // namespace stoker
