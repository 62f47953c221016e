// SampleReader: the bytes of a sample by id, read with one pread at the offset the manifest recorded (no tar
// scanning). Shards are opened lazily and kept open (least recently used beyond a bound), and a shard whose
// size differs from the manifest's is refused: it changed since indexing and offsets can no longer be trusted.
//
// Thread safety: Read may be called concurrently from every pipeline thread.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/env.h"
#include "common/manifest.h"
#include "common/sync.h"

namespace stoker {

struct ReadFailure {
  std::string reason;  // read_error, short_read, shard_changed, index_defect
  std::string detail;
};

class SampleReader {
 public:
  SampleReader(Env& env, std::shared_ptr<const Manifest> manifest, size_t max_open_shards = 256);

  // Fills *out with the sample's bytes. On failure returns false and says why (for quarantine).
  bool Read(uint64_t sample_id, std::vector<uint8_t>* out, ReadFailure* failure);

  const Manifest& manifest() const { return *manifest_; }

 private:
  StatusOr<std::shared_ptr<RandomAccessFile>> OpenShard(uint32_t shard);

  Env& env_;
  std::shared_ptr<const Manifest> manifest_;
  const size_t max_open_;
  Mutex mu_;
  std::list<uint32_t> lru_ STOKER_GUARDED_BY(mu_);  // front = most recent
  struct Open {
    std::shared_ptr<RandomAccessFile> file;
    std::list<uint32_t>::iterator position;
  };
  std::unordered_map<uint32_t, Open> open_ STOKER_GUARDED_BY(mu_);
};

}  // namespace stoker
