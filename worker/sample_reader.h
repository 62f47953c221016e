// SampleReader: the bytes of a sample by id, read with one pread at the offset the manifest recorded (no tar
// scanning). Shards are opened lazily and kept open (least recently used beyond a bound), and a shard whose
// size differs from the manifest's is refused: it changed since indexing and offsets can no longer be trusted.
// The SampleSource of datasets on a file system (worker/remote_reader.h serves those on object storage).
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

#include "base/env.h"
#include "dataset/manifest.h"
#include "base/sync.h"
#include "worker/sample_source.h"

namespace stoker::worker {

class SampleReader final : public SampleSource {
 public:
  SampleReader(Env& env, std::shared_ptr<const Manifest> manifest, size_t max_open_shards = 256);

  // Fills *out with the sample's bytes. On failure returns false and says why (for quarantine).
  bool Read(uint64_t sample_id, std::vector<uint8_t>* out, ReadFailure* failure);

  std::shared_ptr<ReadAhead> Prefetch(const std::vector<uint64_t>&) override { return nullptr; }
  bool Read(uint64_t sample_id, ReadAhead*, std::vector<uint8_t>* out, ReadFailure* failure) override {
    return Read(sample_id, out, failure);
  }
  const Manifest& manifest() const override { return *manifest_; }

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

}  // namespace stoker::worker
