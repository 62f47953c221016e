// StorageStats: what a process's exchanges with object storage did — requests by outcome (status code or transport
// failure), body bytes, retries and final failures by reason, and a latency histogram per try — exported by the
// worker as stoker_worker_storage_* (docs/observability.md).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <prometheus/histogram.h>
#include <string>

#include "base/metrics.h"
#include "base/sync.h"
#include "storage/http_transport.h"

namespace stoker::storage {

class StorageStats {
 public:
  StorageStats();

  void Exchanged(const StorageResponse& response);  // one try, whatever its outcome
  void Retried(const std::string& reason);
  void Failed(const std::string& reason);        // an operation that failed for good (after any retries)

  struct Snapshot {
    std::map<std::string, uint64_t> requests;  // by status label (retry.h StatusLabel)
    std::map<std::string, uint64_t> retries;   // by reason
    std::map<std::string, uint64_t> failures;  // by reason
    uint64_t bytes = 0;
  };
  Snapshot Take() const;
  const prometheus::Histogram& latency() const { return latency_; }

 private:
  mutable Mutex mu_;
  Snapshot counts_ STOKER_GUARDED_BY(mu_);
  prometheus::Histogram latency_;  // thread-safe
};

// Appends stoker_<component>_storage_{requests_total,bytes_total,retries_total,failures_total,request_seconds}.
void CollectStorageStats(const std::string& component, const StorageStats& stats, MetricFamilies& out);

}  // namespace stoker::storage
