// RemoteSampleReader and WorkerStorage (remote_reader.h).
#include "worker/remote_reader.h"

namespace stoker::worker {

std::string StorageFailureReason(const Status& status) {
  switch (status.code()) {
    case StatusCode::kNotFound: return "storage_not_found";
    case StatusCode::kPermissionDenied: return "storage_denied";
    case StatusCode::kFailedPrecondition: return "storage_changed";
    case StatusCode::kDataLoss:
    case StatusCode::kOutOfRange: return "storage_bad_body";
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded: return "storage_unavailable";
    default: return "storage_error";
  }
}

RemoteSampleReader::RemoteSampleReader(storage::ObjectStore& store, std::shared_ptr<FetchQueue> queue,
                                       std::shared_ptr<const Manifest> manifest, RemoteReaderOptions options)
    : store_(store), queue_(std::move(queue)), manifest_(std::move(manifest)), options_(options) {}

std::shared_ptr<ReadAhead> RemoteSampleReader::Prefetch(const std::vector<uint64_t>& sample_ids) {
  std::vector<SampleSpan> spans;
  std::vector<uint64_t> ids;
  for (uint64_t id : sample_ids) {
    SampleInfo info = manifest_->sample(id);
    if (!info.defect.empty() || info.size == 0) continue;  // never read: quarantined from the manifest
    spans.push_back({info.shard, info.offset, info.size});
    ids.push_back(id);
  }
  if (spans.empty()) return nullptr;
  std::vector<CoalescedRange> coalesced = CoalesceSpans(spans, options_.coalesce_gap_bytes, options_.max_range_bytes);
  std::vector<ReadAhead::Range> ranges;
  std::unordered_multimap<uint64_t, ReadAhead::Place> places;
  for (const CoalescedRange& c : coalesced) {
    ShardInfo shard = manifest_->shard(c.shard);
    for (size_t m : c.members) {
      places.emplace(ids[m], ReadAhead::Place{ranges.size(), spans[m].offset - c.offset, spans[m].size});
    }
    ranges.push_back({shard.path, shard.etag, c.offset, c.length});
  }
  auto ahead = std::make_shared<ReadAhead>(queue_, std::move(ranges), std::move(places));
  queue_->Submit(ahead);
  return ahead;
}

Status RemoteSampleReader::ReadAlone(const SampleInfo& info, std::vector<uint8_t>* out) {
  ShardInfo shard = manifest_->shard(info.shard);
  out->resize(info.size);
  return store_.ReadRange(shard.path, info.offset, info.size, shard.etag, out->data());
}

bool RemoteSampleReader::Read(uint64_t sample_id, ReadAhead* ahead, std::vector<uint8_t>* out, ReadFailure* failure) {
  SampleInfo info = manifest_->sample(sample_id);
  if (!info.defect.empty()) {
    *failure = {std::string(info.defect), "found unusable by `stoker index`: " + std::string(info.key)};
    return false;
  }
  std::optional<Status> taken;
  if (ahead != nullptr) taken = ahead->Take(sample_id, out, std::chrono::steady_clock::now() + options_.take_timeout);
  Status read = taken ? *taken : ReadAlone(info, out);
  for (int attempt = 0; read.ok(); ++attempt) {
    if (ChecksumMatches(info, *out, failure)) return true;
    if (attempt == 1) return false;  // the same wrong bytes twice: the stored sample is damaged (quarantined)
    read = ReadAlone(info, out);
  }
  *failure = {StorageFailureReason(read), read.message(), /*hand_back=*/true};
  return false;
}

WorkerStorage::~WorkerStorage() {
  if (store != nullptr) store->Shutdown();
  fetcher.reset();  // joins the fetch threads while the store they use still exists
}

std::unique_ptr<WorkerStorage> MakeWorkerStorage(const storage::StorageOptions& options, uint64_t read_ahead_bytes) {
  auto storage = std::make_unique<WorkerStorage>();
  storage->store = storage::MakeObjectStore(options, &storage->stats);
  storage->fetcher = std::make_unique<RangeFetcher>(*storage->store, read_ahead_bytes, options.max_connections);
  return storage;
}

}  // namespace stoker::worker
