// Images per second on one thread, for the benchmarks that time per-image work over a set of encoded images
// (pipeline_bench, cut_bench): one pass to warm up, then passes until `seconds` have gone.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace stoker::bench {

// Calls one(image, n) for every image, n counting the calls; returns calls per second of the timed passes.
template <typename One>
double ImageRate(const std::vector<std::string>& images, double seconds, One one) {
  for (size_t i = 0; i < images.size(); ++i) one(images[i], i);
  size_t n = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (size_t i = 0; i < images.size(); ++i, ++n) one(images[i], n);
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return n / elapsed;
}

}  // namespace stoker::bench
