// CoordinatorImpl, who delivers: a worker that holds leases and never sends (stuck on a read that never returns, or
// a stolen worker key hoarding a rank's window) would keep a job waiting for ever, since its heartbeats renew the
// leases; one that reports units sent and never sends them costs an ack timeout each, and re-leases may go back to
// it. Both are judged against what the job's other workers do, never against a fixed time:
// - a lease unsent for longer than the lease TTL and kOverdueFactor times the job's lease-to-commit time, while
//   another worker has committed a unit of the job since it was granted, goes back (releases{reason="overdue"});
// - a lease gone back unsent (overdue, or not renewed) or unacknowledged while another worker committed since it
//   was granted is a strike against its worker; a commit clears them; at kStrikes the worker is benched for the
//   job: its leases of the job go back and it is leased none for kFirstBench, twice as long each time after.
// A job nobody commits for strikes nobody, so slow storage for every worker never benches any; and a bench needs a
// worker that committed meanwhile, so it never leaves a job without one that delivers.
#include <algorithm>

#include "base/logging.h"
#include "coordinator/impl.h"

namespace stoker::coordinator {

namespace {

constexpr int kOverdueFactor = 4;
constexpr uint32_t kStrikes = 3;
constexpr Duration kFirstBench = std::chrono::minutes(1);
constexpr Duration kLongestBench = std::chrono::hours(1);

}  // namespace

void CoordinatorImpl::NoteCommitLocked(JobRuntime& job, const ActiveLease& lease, TimePoint now) {
  const Duration took = now - lease.leased_at;
  // A moving average over about the last 16 commits: it follows the job's pace without one slow unit setting it.
  job.commit_time = job.commits == 0 ? took : job.commit_time + (took - job.commit_time) / 16;
  ++job.commits;
  if (workers_.count(lease.worker_id) == 0) return;  // gone: nothing to keep for it
  JobRuntime::Delivery& d = job.delivery[lease.worker_id];
  d.last_commit = now;
  d.strikes = 0;
}

bool CoordinatorImpl::OthersCommittedSinceLocked(const JobRuntime& job, const std::string& worker_id,
                                                 TimePoint since) const {
  return std::any_of(job.delivery.begin(), job.delivery.end(), [&](const auto& entry) {
    return entry.first != worker_id && entry.second.last_commit.has_value() && *entry.second.last_commit > since;
  });
}

bool CoordinatorImpl::OverdueLocked(const JobRuntime& job, const ActiveLease& lease, TimePoint now) const {
  if (lease.sent || job.commits == 0 || lease.worker_id.empty()) return false;
  const Duration age = now - lease.leased_at;
  if (age <= options_.lease_ttl || age <= kOverdueFactor * job.commit_time) return false;
  return OthersCommittedSinceLocked(job, lease.worker_id, lease.leased_at);
}

void CoordinatorImpl::StrikeLocked(const std::string& job_name, JobRuntime& job, const std::string& worker_id,
                                   TimePoint now) {
  if (workers_.count(worker_id) == 0) return;
  JobRuntime::Delivery& d = job.delivery[worker_id];
  if (++d.strikes < kStrikes) return;
  d.strikes = 0;
  const Duration bench = std::min<Duration>(kLongestBench, kFirstBench * (uint64_t{1} << std::min(d.benched, 6u)));
  ++d.benched;
  d.benched_until = now + bench;
  ++stats_.workers_benched;
  STOKER_LOG(kWarning) << "worker " << worker_id << " held or claimed " << kStrikes << " units of job " << job_name
                       << " that it did not deliver while other workers did: it is leased none of the job for "
                       << std::chrono::duration_cast<std::chrono::seconds>(bench).count() << " s";
  for (RankRuntime& r : job.ranks) {
    std::vector<uint64_t> held;
    for (const auto& [unit, lease] : r.active) {
      if (lease.worker_id == worker_id && !lease.sent) held.push_back(unit);
    }
    for (uint64_t unit : held) ReleaseLocked(r, unit, &stats_.releases.overdue);
    AnswerParkedFromLocked(r, worker_id);
  }
}

bool CoordinatorImpl::BenchedLocked(const JobRuntime& job, const std::string& worker_id, TimePoint now) const {
  auto it = job.delivery.find(worker_id);
  return it != job.delivery.end() && it->second.benched > 0 && now < it->second.benched_until;
}

}  // namespace stoker::coordinator
