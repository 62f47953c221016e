// ObjectStore: reading shards where users keep them — S3-compatible object storage (s3://bucket/key) and plain
// web servers (http(s)://host/path) — by byte range. The small interface the indexer and the worker's reader use
// (tests fake it); HttpObjectStore implements it over an HttpTransport (libcurl in production) with retries inside
// a deadline (retry.h), ETag checks and error statuses that name the object and never a credential:
//   NotFound (404), PermissionDenied (401/403: credentials or policy), FailedPrecondition (the object's ETag is not
//   the indexed one: it was replaced), Unavailable (retries exhausted: 5xx, slow-downs, resets, timeouts),
//   DataLoss (a body of the wrong length), Cancelled (Shutdown() during a backoff), InvalidArgument (a bad URL).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/status.h"
#include "base/sync.h"
#include "storage/http_transport.h"
#include "storage/options.h"
#include "storage/stats.h"
#include "storage/url.h"

namespace stoker::storage {

struct ObjectInfo {
  std::string url;
  uint64_t size = 0;
  std::string etag;  // as the server sends it, quotes included; empty if it sends none
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  // HEAD: size and ETag.
  virtual StatusOr<ObjectInfo> Stat(const std::string& url) = 0;
  // Every object under an s3:// prefix (recursively), sorted by key. Unimplemented for http(s): servers have no
  // standard listing.
  virtual StatusOr<std::vector<ObjectInfo>> List(const std::string& prefix_url) = 0;
  // Exactly `n` bytes at `offset` into `out`. With `expected_etag`, bytes served under another ETag are refused.
  virtual Status ReadRange(const std::string& url, uint64_t offset, size_t n, const std::string& expected_etag,
                           uint8_t* out) = 0;
  // Uploads an object (tests and tools that stage datasets; not used on the read path).
  virtual Status Put(const std::string& url, std::string_view data) = 0;
};

class HttpObjectStore final : public ObjectStore {
 public:
  // `stats` may be null; it must outlive the store.
  HttpObjectStore(StorageOptions options, std::unique_ptr<HttpTransport> transport, StorageStats* stats);

  StatusOr<ObjectInfo> Stat(const std::string& url) override;
  StatusOr<std::vector<ObjectInfo>> List(const std::string& prefix_url) override;
  Status ReadRange(const std::string& url, uint64_t offset, size_t n, const std::string& expected_etag,
                   uint8_t* out) override;
  Status Put(const std::string& url, std::string_view data) override;

  // Ends every backoff wait now (those operations fail with Cancelled) and every later one at once.
  void Shutdown();

  // The request URL for an object (S3: the endpoint with path or virtual-host addressing). For tests and messages.
  std::string RequestUrl(const ObjectUrl& url, const std::string& query = "") const;

 private:
  // A request for `url` with its signing set up.
  StatusOr<StorageRequest> NewRequest(const std::string& method, const std::string& url, const std::string& query = "");
  // Performs `request`, retrying retryable failures within the policy's deadline. Returns the last response that
  // was not retried, or the error that ended the retries.
  StatusOr<StorageResponse> Execute(const StorageRequest& request, const std::string& what);
  // The error a final non-2xx response stands for, naming `what`.
  Status ResponseError(const StorageResponse& response, const std::string& what);
  bool SleepUnlessShutdown(Duration d);

  const StorageOptions options_;
  std::unique_ptr<HttpTransport> transport_;
  StorageStats* stats_;
  Mutex mu_;
  CondVar wake_;
  bool shutdown_ STOKER_GUARDED_BY(mu_) = false;
};

// An HttpObjectStore over libcurl with the options' connection pool.
std::unique_ptr<HttpObjectStore> MakeObjectStore(const StorageOptions& options, StorageStats* stats);

}  // namespace stoker::storage
