// SampleSource: where a worker's pipeline threads get a sample's encoded bytes — a local file system
// (SampleReader: one pread) or object storage (RemoteSampleReader: ranged reads with read-ahead). Both verify the
// sample's XXH64 when the manifest recorded one. A failure says whether it is the sample's (quarantined and
// reported by id: a defect found by `stoker index`, a checksum mismatch, a short read) or the storage's (the unit is
// handed back to the coordinator and redone: 403, 404, a changed object, retries exhausted).
//
// Thread safety: Prefetch and Read may be called concurrently from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dataset/manifest.h"

namespace stoker::worker {

struct ReadFailure {
  std::string reason;  // read_error, short_read, shard_changed, index_defect, checksum_mismatch, storage_*
  std::string detail;
  bool hand_back = false;  // not the sample's fault: hand the unit back instead of quarantining the sample
};

class ReadAhead;  // worker/read_ahead.h

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  // Starts fetching these samples (one unit's, in order) ahead of their reads; the handle serves them to Read.
  // Null when the source has nothing to gain from it (local files).
  virtual std::shared_ptr<ReadAhead> Prefetch(const std::vector<uint64_t>& sample_ids) = 0;
  // Fills *out with the sample's bytes (from `ahead` when it holds them). On failure returns false and says why.
  virtual bool Read(uint64_t sample_id, ReadAhead* ahead, std::vector<uint8_t>* out, ReadFailure* failure) = 0;
  virtual const Manifest& manifest() const = 0;
};

// False (and a checksum_mismatch failure) when the manifest recorded the sample's XXH64 and `bytes` do not have it.
bool ChecksumMatches(const SampleInfo& info, const std::vector<uint8_t>& bytes, ReadFailure* failure);

}  // namespace stoker::worker
