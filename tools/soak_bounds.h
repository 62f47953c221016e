// What `stoker soak` asserts about resources over its run (RELIABILITY.md row 22): a series of samples of one
// resource (the coordinator's RSS, its open descriptors, the journal's size) stays flat if its peak over the last
// third of the run is no more than `factor` times plus `slack` its peak over the first third, and never passes
// `ceiling`. Fewer than six samples: too short to judge a trend, only the ceiling applies.
//
// Thread safety: a pure function.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace stoker::tools {

struct FlatVerdict {
  bool flat = true;
  std::string describe;  // "coordinator RSS: peak 41 MB in the first third, 43 MB in the last (flat)"
};

inline FlatVerdict JudgeFlat(const std::string& what, const std::vector<uint64_t>& samples, double factor,
                             uint64_t slack, uint64_t ceiling, const std::string& unit = "") {
  FlatVerdict v;
  if (samples.empty()) return {true, what + ": no samples"};
  const uint64_t peak = *std::max_element(samples.begin(), samples.end());
  if (peak > ceiling) {
    v.flat = false;
    v.describe = what + ": peak " + std::to_string(peak) + unit + " over the ceiling of " + std::to_string(ceiling) + unit;
    return v;
  }
  if (samples.size() < 6) {
    v.describe = what + ": peak " + std::to_string(peak) + unit + " (under the ceiling; too few samples for a trend)";
    return v;
  }
  const size_t third = samples.size() / 3;
  const uint64_t early = *std::max_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(third));
  const uint64_t late = *std::max_element(samples.end() - static_cast<std::ptrdiff_t>(third), samples.end());
  v.flat = static_cast<double>(late) <= factor * static_cast<double>(early) + static_cast<double>(slack);
  v.describe = what + ": peak " + std::to_string(early) + unit + " in the first third, " + std::to_string(late) + unit +
               " in the last (" + (v.flat ? "flat" : "GROWING") + ")";
  return v;
}

}  // namespace stoker::tools
