// KnownBadSamples: the samples of one job that this worker found it must not decode, remembered so that later
// epochs quarantine them at once without reading or decoding them again (a scan bomb once cost a worker thread
// 101 s every epoch). Only outcomes that depend on the image alone are remembered: `decode_limit` (its pixels,
// scans or memory; CPU time too, the one limit a loaded machine can move) and `unsupported_format`. A
// `decode_error` is not, because the region decoder reads only the epoch's crop and damage elsewhere in the image
// may not matter to the next one; nor are read failures, which storage may heal. So a remembered outcome is the
// one any worker would reach, and batches stay the same whichever worker makes them. At most `capacity` samples
// are kept; past that, samples are decoded (and refused) again.
//
// Thread safety: all methods may be called from any pipeline thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "wire/control_messages.h"
#include "base/sync.h"

namespace stoker::worker {

class KnownBadSamples {
 public:
  explicit KnownBadSamples(size_t capacity = 100000) : capacity_(capacity) {}

  static bool Remembers(const std::string& reason) {
    return reason == "decode_limit" || reason == "unsupported_format";
  }

  std::optional<QuarantineReport> Find(uint64_t sample_id) const {
    MutexLock lock(mu_);
    auto it = reports_.find(sample_id);
    if (it == reports_.end()) return std::nullopt;
    return it->second;
  }

  void Remember(const QuarantineReport& report) {
    if (!Remembers(report.reason)) return;
    MutexLock lock(mu_);
    if (reports_.size() < capacity_) reports_.emplace(report.sample_id, report);
  }

 private:
  const size_t capacity_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, QuarantineReport> reports_ STOKER_GUARDED_BY(mu_);
};

}  // namespace stoker::worker
