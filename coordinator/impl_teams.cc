// CoordinatorImpl, teams: the team a job's leases count to, the room its cap leaves (--team-max-workers) and
// whether it is below its guarantee (--team-min-workers), as leasing asks them (docs/design.md, section 3).
#include "coordinator/impl.h"

namespace stoker::coordinator {

std::string CoordinatorImpl::TeamOfRecord(const JobRuntime& job) {
  for (const RankRecord& r : job.record->ranks) {
    if (!r.holder.empty()) return FairShare::TeamOf(r.holder);
  }
  return "";
}

const std::string& CoordinatorImpl::JobTeamLocked(JobRuntime& job) {
  if (!job.team.has_value()) job.team = TeamOfRecord(job);
  return *job.team;
}

uint32_t CoordinatorImpl::TeamRoomLocked(const std::string& team, const JobRuntime& job) {
  const uint32_t max_workers = shares_.PolicyOf(team).max_workers;
  if (max_workers == 0) return UINT32_MAX;
  if (per_worker_rate_ > 0) {
    auto it = team_allowance_.try_emplace(team, Allowance{0, clock_.Now()}).first;
    return it->second.Accrue(max_workers * worker_threads_, clock_.Now()) >= 0 ? UINT32_MAX : 0;
  }
  const uint64_t cap = uint64_t{max_workers} * job.plan.batches_per_unit();
  const uint64_t used = UnsentByTeamLocked(team);
  return static_cast<uint32_t>(std::min<uint64_t>(UINT32_MAX, cap > used ? cap - used : 0));
}

bool CoordinatorImpl::BelowMinimumLocked(const std::string& team, const JobRuntime& job) {
  const uint32_t min_workers = shares_.PolicyOf(team).min_workers;
  if (min_workers == 0) return false;
  if (per_worker_rate_ > 0) {
    const double rate = min_workers * worker_threads_;
    auto it = team_guarantee_.try_emplace(team, Allowance{rate, clock_.Now()}).first;  // a second's worth owed
    return it->second.Accrue(rate, clock_.Now()) > 0;
  }
  return UnsentByTeamLocked(team) < uint64_t{min_workers} * job.plan.batches_per_unit();
}

void CoordinatorImpl::RefreshWorkersWorthLocked(TimePoint now) {
  per_worker_rate_ = capacity_.PerWorker(now);
  PoolWorkersLocked(&worker_threads_);
}

// The pool's workers (not node-local: those are the clients' own cores) that are not draining, and their mean
// pipeline threads.
size_t CoordinatorImpl::PoolWorkersLocked(double* mean_threads) const {
  double threads = 0;
  size_t pool = 0;
  for (const auto& [id, w] : workers_) {
    if (!w.local_group.empty() || w.draining) continue;
    threads += std::max<uint32_t>(1, w.threads);
    ++pool;
  }
  *mean_threads = pool > 0 ? threads / static_cast<double>(pool) : 1;
  return pool;
}

// Caps and guarantees are in the workers' time, as the shares are: a dear job's samples spend more of them. Its
// own cost when reported, so that the rule holds whatever the pool's mix of jobs (a cheap job beside a dear one
// is not charged against the dear one's cost, as a factor against the median job would), within the bounds the
// shares hold it to (workers reporting a job's samples as free cannot lift its team's cap).
double CoordinatorImpl::ThreadSecondsLocked(const std::string& job, uint64_t samples) const {
  const double reported = shares_.BoundedSampleSecondsOf(job);
  const double per_sample = reported > 0 ? reported : per_worker_rate_ > 0 ? worker_threads_ / per_worker_rate_ : 0;
  return static_cast<double>(samples) * per_sample;
}

uint64_t CoordinatorImpl::UnsentByTeamLocked(const std::string& team) const {
  auto held = unsent_by_team_.find(team);
  return held == unsent_by_team_.end() ? 0 : held->second;
}

}  // namespace stoker::coordinator
