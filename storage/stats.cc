// StorageStats and its metric families (stats.h).
#include "storage/stats.h"

#include "storage/retry.h"

namespace stoker::storage {

StorageStats::StorageStats() : latency_(LatencyBuckets()) {}

void StorageStats::Exchanged(const StorageResponse& r) {
  latency_.Observe(ToSeconds(r.elapsed));
  const std::string label = StatusLabel(r);
  MutexLock lock(mu_);
  ++counts_.requests[label];
  counts_.bytes += r.out_bytes + r.body.size();
}

void StorageStats::Retried(const std::string& reason) {
  MutexLock lock(mu_);
  ++counts_.retries[reason];
}

void StorageStats::Failed(const std::string& reason) {
  MutexLock lock(mu_);
  ++counts_.failures[reason];
}

StorageStats::Snapshot StorageStats::Take() const {
  MutexLock lock(mu_);
  return counts_;
}

void CollectStorageStats(const std::string& component, const StorageStats& stats, MetricFamilies& out) {
  using prometheus::MetricType;
  const std::string prefix = "stoker_" + component + "_storage_";
  StorageStats::Snapshot s = stats.Take();
  for (const char* status : {"200", "206", "403", "404", "503"}) s.requests.try_emplace(status, 0);
  for (const char* reason : {"slow_down", "server_error", "timeout", "reset"}) s.retries.try_emplace(reason, 0);
  for (const char* reason : {"not_found", "permission_denied", "changed", "unavailable"}) {
    s.failures.try_emplace(reason, 0);
  }
  FamilyBuilder requests(prefix + "requests_total",
                         "Requests (tries) to object storage by outcome: HTTP status, or timeout, connect, reset, error.",
                         MetricType::Counter);
  for (const auto& [status, n] : s.requests) requests.Add({{"status", status}}, static_cast<double>(n));
  out.push_back(requests.Build());
  out.push_back(FamilyBuilder(prefix + "bytes_total", "Body bytes received from object storage.", MetricType::Counter)
                    .Add({}, static_cast<double>(s.bytes))
                    .Build());
  FamilyBuilder retries(prefix + "retries_total", "Tries repeated after a retryable failure, by reason.",
                        MetricType::Counter);
  for (const auto& [reason, n] : s.retries) retries.Add({{"reason", reason}}, static_cast<double>(n));
  out.push_back(retries.Build());
  FamilyBuilder failures(prefix + "failures_total",
                         "Reads that failed for good (retries exhausted, or not retryable), by reason.",
                         MetricType::Counter);
  for (const auto& [reason, n] : s.failures) failures.Add({{"reason", reason}}, static_cast<double>(n));
  out.push_back(failures.Build());
  out.push_back(FamilyBuilder(prefix + "request_seconds", "Seconds per request (try) to object storage.",
                              MetricType::Histogram)
                    .Add({}, stats.latency())
                    .Build());
}

}  // namespace stoker::storage
