// What the coordinator counts (CoordinatorImpl::Stats): releases by reason, each job's units and shares, the
// pool's totals. Plain values, read by the service's metrics (metrics.h) and /state, and by tests.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/capacity.h"
#include "coordinator/fair_share.h"
#include "wire/control_messages.h"

namespace stoker::coordinator {

// Why units went back to pending, for metrics and tests.
struct ReleaseCounts {
  uint64_t worker_lost = 0;
  uint64_t lease_expired = 0;
  uint64_t unacked = 0;
  uint64_t undeliverable = 0;
  uint64_t abandoned = 0;
  uint64_t drain = 0;
  uint64_t session_reset = 0;
  uint64_t not_adopted = 0;  // after a restart: units leased before it that no worker reported
  uint64_t reported = 0;     // leased to a worker a client of the job reported (ClientHeartbeat.rejectedWorkers)
  uint64_t overdue = 0;      // leased and unsent far longer than the job's units take while others committed
};

// One job's units by state (all epochs, all ranks) and where its slowest rank is.
struct JobStats {
  std::string name;
  uint64_t units_pending = 0;    // not leased yet, or handed back
  uint64_t units_leased = 0;     // a worker is making them
  uint64_t units_sent = 0;       // sent, waiting for the client's ack
  uint64_t units_committed = 0;  // every batch acknowledged
  uint32_t epoch = 0;            // of the slowest rank's consumed position (0-based)
  double epoch_progress = 0;     // fraction of that epoch the slowest rank has consumed
  uint32_t ranks = 0;
  uint32_t ranks_held = 0;       // with a live client session
  uint32_t batch_size = 0;
  uint32_t shape_changes = 0;    // times it changed shape (a checkpoint resumed it on another, or live)
  std::string team;              // of the key its lowest-numbered held rank was taken with
  TeamPolicy policy;             // its team's
  uint64_t samples_leased = 0;   // since the coordinator started (or the job was re-planned)
  double sample_seconds = 0;     // pipeline-thread seconds a sample costs the pool's workers (0: not reported yet)
  double cost_factor = 1;        // that against the pool's reference: what its grants are charged per sample
  double stall = 0;              // its clients' stall as its order within shares counts it (FairShare::StallOf)
  // Its batches' seconds by stage (kJobStages): the pool workers' thread time as costed, then its clients'.
  std::array<double, kJobStages.size()> stage_seconds{};
};

struct CoordinatorStats {
  uint64_t leases_granted = 0;
  uint64_t leases_granted_local = 0;  // of them, to node-local workers
  uint64_t units_committed = 0;
  uint64_t lease_requests_parked = 0;
  uint64_t quarantined_samples = 0;  // distinct (epoch, sample) reports
  // Quarantine reports not kept: from a worker that does not hold the unit's current lease (or is not registered
  // under the caller's key), on a sample the unit does not hold, or past CoordinatorOptions::max_quarantine_reports.
  uint64_t quarantine_refused_not_holder = 0;
  uint64_t quarantine_refused_not_in_unit = 0;
  uint64_t quarantine_refused_over_cap = 0;
  uint64_t leases_adopted = 0;       // after a restart: leases workers still held, kept
  uint64_t sessions_resumed = 0;     // a client's session continued (after a restart or a pause)
  uint64_t sessions_unbound = 0;     // sessions started without a secret (older clients): bound to their key only
  uint64_t jobs_removed = 0;         // jobs forgotten after their retention without clients
  uint64_t shape_changes = 0;        // jobs re-planned for another shape by a checkpoint (or a live change)
  uint64_t live_shape_changes = 0;   // of them, live: the old shape's training sessions ended
  uint64_t workers_reported = 0;     // (job, worker) pairs a client reported: the job leases that worker no more
  uint64_t worker_session_refused = 0;  // requests for a registered worker without its session's secret
  uint64_t workers_benched = 0;  // (job, worker) benches: kStrikes leases kept or claimed while others delivered
  size_t jobs = 0;
  ReleaseCounts releases;
  size_t workers = 0;
  size_t live_clients = 0;
  size_t units_leased = 0;
  size_t units_sent = 0;
  size_t units_pending = 0;
  size_t workers_draining = 0;
  size_t workers_local = 0;  // node-local workers (beside one client each), not the pool's
  std::vector<JobStats> job_stats;
  CapacityAdvice advice;
  bool reconciling = false;
};

}  // namespace stoker::coordinator
