// RemoteSampleReader: the SampleSource of datasets whose shards are on object storage or a web server (the
// manifest's root is a URL). A unit's samples are fetched ahead by the worker's RangeFetcher (read_ahead.h) in
// coalesced ranges; a sample not read ahead is read alone. Every read names the indexed ETag, so bytes of a replaced
// object are refused. A checksum mismatch is read once more alone (a body damaged on the way is not the sample's
// fault) and quarantined if it persists; storage errors (403, 404, changed, retries exhausted) hand the unit back.
//
// WorkerStorage is what a worker makes once at start for all of this: the client, its statistics and the fetcher.
//
// Thread safety: Prefetch and Read may be called concurrently from any thread.
#pragma once

#include <memory>

#include "storage/object_store.h"
#include "storage/stats.h"
#include "worker/read_ahead.h"
#include "worker/sample_source.h"

namespace stoker::worker {

struct RemoteReaderOptions {
  uint64_t coalesce_gap_bytes = 64 << 10;  // samples of a shard this close are fetched in one request
  uint64_t max_range_bytes = 16 << 20;     // a coalesced request is at most this long
  Duration take_timeout = Millis(180000);  // a pipeline thread waits at most this long for a read-ahead range
};

class RemoteSampleReader final : public SampleSource {
 public:
  RemoteSampleReader(storage::ObjectStore& store, std::shared_ptr<FetchQueue> queue, std::shared_ptr<const Manifest> manifest,
                     RemoteReaderOptions options);

  std::shared_ptr<ReadAhead> Prefetch(const std::vector<uint64_t>& sample_ids) override;
  bool Read(uint64_t sample_id, ReadAhead* ahead, std::vector<uint8_t>* out, ReadFailure* failure) override;
  const Manifest& manifest() const override { return *manifest_; }

 private:
  Status ReadAlone(const SampleInfo& info, std::vector<uint8_t>* out);

  storage::ObjectStore& store_;
  const std::shared_ptr<FetchQueue> queue_;
  const std::shared_ptr<const Manifest> manifest_;
  const RemoteReaderOptions options_;
};

// A worker's means to read remote datasets: made at start, shared by every job. Destroying it cuts retry backoffs
// short and joins the fetch threads.
struct WorkerStorage {
  storage::StorageStats stats;
  std::unique_ptr<storage::HttpObjectStore> store;
  std::unique_ptr<RangeFetcher> fetcher;
  RemoteReaderOptions reader;

  ~WorkerStorage();
};

// `read_ahead_bytes`: the fetched-but-unused bytes a worker may hold; one fetch thread per storage connection.
std::unique_ptr<WorkerStorage> MakeWorkerStorage(const storage::StorageOptions& options, uint64_t read_ahead_bytes);

// The quarantine vocabulary's word for a storage error: storage_not_found, storage_denied, storage_changed, ...
std::string StorageFailureReason(const Status& status);

}  // namespace stoker::worker
