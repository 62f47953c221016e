// The coordinator's Prometheus metrics (docs/observability.md, "Coordinator"): units by state and epoch progress
// per pipeline, re-leases by reason, membership, requests and their latency, the journal's cost and size, and the
// worker-count advice. Built at scrape time from the Impl's and the Service's snapshots.
#pragma once

#include <cstdint>

#include "base/metrics.h"
#include "coordinator/impl.h"
#include "coordinator/journal.h"
#include "coordinator/service.h"

namespace stoker::coordinator {

// `journal` may be null. `max_workers` (0: unknown) is the autoscaler's ceiling, for the saturation alert.
// The objects must outlive the collector's registration.
Collector CoordinatorCollector(const CoordinatorImpl& impl, const CoordinatorService& service,
                               const Journal* journal, uint32_t max_workers);

}  // namespace stoker::coordinator
