// Metrics: how a stoker process turns its figures into Prometheus text. Components keep their own counters (the
// Stats structs tests and tools read) and register a collector that builds metric families from a snapshot at
// scrape time; histograms are prometheus::Histogram objects the component observes into and the collector
// copies. MetricsHub merges every collector's families (two clients in one process both export
// stoker_client_batches_total: one family, two series), adds what every process exports — stoker_build_info and
// the process_* metrics, which prometheus-cpp 1.0.1 lacks — and serialises with prometheus-cpp's TextSerializer.
//
// Naming follows docs/observability.md: stoker_ prefix, base units, _total on counters, classic histograms.
//
// Thread safety: MetricsHub's methods may be called from any thread; a collector runs on the scraping thread and
// must read its component's state under that component's own locks (Stats() snapshots do).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <string>
#include <utility>
#include <vector>

#include "base/sync.h"

namespace stoker {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A metric family built at collection time.
class FamilyBuilder {
 public:
  FamilyBuilder(std::string name, std::string help, prometheus::MetricType type);
  FamilyBuilder& Add(const MetricLabels& labels, double value);                        // counter or gauge
  FamilyBuilder& Add(const MetricLabels& labels, const prometheus::Histogram& histogram);  // histogram
  prometheus::MetricFamily Build() { return std::move(family_); }  // once

 private:
  prometheus::MetricFamily family_;
};

using MetricFamilies = std::vector<prometheus::MetricFamily>;
using Collector = std::function<void(MetricFamilies&)>;

// Bucket boundaries, in seconds.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets();  // 100 us .. 10 s: control-plane requests
const prometheus::Histogram::BucketBoundaries& StepBuckets();     // 1 ms .. 60 s: waits, steps, stages

struct BuildInfo {
  std::string version;   // the project version, e.g. 0.1.0
  std::string revision;  // git revision at build time ("unknown" outside a checkout), "-dirty" if modified
};
const BuildInfo& GetBuildInfo();

class MetricsHub {
 public:
  // `component`: coordinator, worker or client — the component label of stoker_build_info.
  explicit MetricsHub(std::string component);

  // Registers a collector; the returned id removes it. A collector is never running once Remove returns.
  uint64_t Add(Collector collector);
  void Remove(uint64_t id);

  // Every family, merged by name, in the order first seen; process_* and stoker_build_info last.
  MetricFamilies Collect() const;
  // Prometheus text exposition format 0.0.4.
  std::string Exposition() const;

 private:
  const std::string component_;
  mutable Mutex mu_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Collector> collectors_ STOKER_GUARDED_BY(mu_);
};

// stoker_<component>_transport_errors_total{site}: the ZeroMQ failures a component survived (TransportErrors),
// one series per site seen, with `labels` added (a client's pipeline and rank).
void CollectTransportErrors(const std::string& component, const std::map<std::string, uint64_t>& by_site,
                            const MetricLabels& labels, MetricFamilies& out);

// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes, process_open_fds,
// process_max_fds, process_start_time_seconds, read from /proc/self (names as the official clients use).
void CollectProcessMetrics(MetricFamilies& out);

}  // namespace stoker
