// RemoteFile: a RandomAccessFile over one object read by range, so code written for files — the tar scanner of
// `stoker index` — works on object storage unchanged. Small reads are served from one cached block (`block_bytes`
// from the read's offset): a tar header, the label member after it and the next header usually share one request.
// Reads at least a block long go straight through. It counts what it fetched, so the indexer can say how little of
// each shard it read.
//
// Thread safety: Read may be called concurrently (the block cache is guarded).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/sync.h"
#include "storage/object_store.h"

namespace stoker::storage {

class RemoteFile final : public RandomAccessFile {
 public:
  // `info` from ObjectStore::Stat or List; reads name its ETag, so a replaced object is refused.
  RemoteFile(ObjectStore& store, ObjectInfo info, size_t block_bytes = 4096);

  StatusOr<size_t> Read(uint64_t offset, size_t n, void* out) const override;
  uint64_t Size() const override { return info_.size; }
  const std::string& path() const override { return info_.url; }

  uint64_t bytes_fetched() const { return fetched_.load(); }
  uint64_t requests() const { return requests_.load(); }

 private:
  ObjectStore& store_;
  const ObjectInfo info_;
  const size_t block_bytes_;
  mutable Mutex mu_;
  mutable uint64_t block_offset_ STOKER_GUARDED_BY(mu_) = 0;
  mutable std::vector<uint8_t> block_ STOKER_GUARDED_BY(mu_);
  mutable std::atomic<uint64_t> fetched_{0}, requests_{0};
};

}  // namespace stoker::storage
