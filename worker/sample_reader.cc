// SampleReader (sample_reader.h): pread at the manifest's offsets through a bounded cache of open shards.
#include "worker/sample_reader.h"
#include <cstdio>

#include "base/hash.h"
#include "base/sync.h"

namespace stoker::worker {

bool ChecksumMatches(const SampleInfo& info, const std::vector<uint8_t>& bytes, ReadFailure* failure) {
  if (info.checksum == 0) return true;
  const uint64_t actual = Xxh64(bytes.data(), bytes.size());
  if (actual == info.checksum) return true;
  char detail[96];
  std::snprintf(detail, sizeof(detail), "XXH64 %016llx, indexed %016llx", static_cast<unsigned long long>(actual),
                static_cast<unsigned long long>(info.checksum));
  *failure = {"checksum_mismatch", std::string("the bytes read are not the ones indexed (") + detail + ")"};
  return false;
}

SampleReader::SampleReader(Env& env, std::shared_ptr<const Manifest> manifest, size_t max_open_shards)
    : env_(env), manifest_(std::move(manifest)), max_open_(max_open_shards == 0 ? 1 : max_open_shards) {}

StatusOr<std::shared_ptr<RandomAccessFile>> SampleReader::OpenShard(uint32_t shard) {
  {
    MutexLock lock(mu_);
    auto it = open_.find(shard);
    if (it != open_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.position);
      return it->second.file;
    }
  }
  // Open outside the lock: a slow file system must not stall every other thread's reads.
  ShardInfo info = manifest_->shard(shard);
  STOKER_ASSIGN_OR_RETURN(auto file, env_.OpenForRead(info.path));
  if (file->Size() != info.byte_size) {
    return FailedPreconditionError("shard " + info.path + " is " + std::to_string(file->Size()) +
                                   " bytes but was " + std::to_string(info.byte_size) +
                                   " when indexed: it changed since `stoker index`");
  }
  std::shared_ptr<RandomAccessFile> shared = std::move(file);
  MutexLock lock(mu_);
  auto it = open_.find(shard);
  if (it != open_.end()) return it->second.file;  // another thread won the race
  lru_.push_front(shard);
  open_[shard] = {shared, lru_.begin()};
  while (open_.size() > max_open_) {
    open_.erase(lru_.back());
    lru_.pop_back();
  }
  return shared;
}

bool SampleReader::Read(uint64_t sample_id, std::vector<uint8_t>* out, ReadFailure* failure) {
  SampleInfo info = manifest_->sample(sample_id);
  if (!info.defect.empty()) {
    *failure = {std::string(info.defect), "found unusable by `stoker index`: " + std::string(info.key)};
    return false;
  }
  auto file = OpenShard(info.shard);
  if (!file.ok()) {
    bool changed = file.status().code() == StatusCode::kFailedPrecondition;
    *failure = {changed ? "shard_changed" : "read_error", file.status().message()};
    return false;
  }
  out->resize(info.size);
  auto n = (*file)->Read(info.offset, info.size, out->data());
  if (!n.ok()) {
    *failure = {"read_error", n.status().message()};
    return false;
  }
  if (*n != info.size) {
    *failure = {"short_read", (*file)->path() + ": " + std::to_string(*n) + " of " + std::to_string(info.size) +
                                  " bytes at offset " + std::to_string(info.offset)};
    return false;
  }
  return ChecksumMatches(info, *out, failure);
}

}  // namespace stoker::worker
