// The worker's Prometheus metrics (docs/observability.md, "Worker"): work done, per-stage seconds per batch
// (is it I/O or CPU?), busy and backpressure thread-seconds (the autoscaling signals), errors by reason, leases
// held. Built at scrape time from Worker::Stats() and the Worker's histograms.
#pragma once

#include "base/metrics.h"
#include "worker/worker.h"

namespace stoker::worker {

// `worker` must outlive the collector's registration.
Collector WorkerCollector(const Worker& worker);

}  // namespace stoker::worker
