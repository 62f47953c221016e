// CoordinatorImpl, parked requests: a worker's lease request that found no work waits (parks) at the coordinator;
// these serve the waiting requests when room opens, in fair order between jobs (FairShare), keep the index of where
// each worker waits, and answer requests whose wait is over.
#include "coordinator/impl.h"

#include <algorithm>
#include <set>

namespace stoker::coordinator {

void CoordinatorImpl::ServeParkedLocked(const std::string& job_name, JobRuntime& job, uint32_t rank,
                                        const std::string* only_worker) {
  RankRuntime& r = job.ranks[rank];
  if (r.parked.empty()) return;
  // The rank's node-local workers first (its own cores, and no network between), then the least-loaded worker
  // (fewest leased, unsent batches), then the oldest request; one that cannot be served (its queue is full, or its
  // budget is smaller than the next unit) must not block the ones behind it.
  std::vector<size_t> order;
  if (only_worker != nullptr) {  // one worker's requests: nothing to order them by
    for (size_t i = 0; i < r.parked.size(); ++i) {
      if (r.parked[i].worker_id == *only_worker) order.push_back(i);
    }
  } else {
    order.resize(r.parked.size());
    std::vector<std::pair<bool, uint32_t>> load(r.parked.size());  // (pool worker, unsent)
    for (size_t i = 0; i < order.size(); ++i) {
      order[i] = i;
      load[i] = {!IsLocalLocked(r.parked[i].worker_id), UnsentLocked(r.parked[i].worker_id)};
    }
    std::stable_sort(order.begin(), order.end(), [&load](size_t a, size_t b) { return load[a] < load[b]; });
  }
  std::vector<bool> answered(r.parked.size(), false);
  for (size_t i : order) {
    const ParkedRequest& p = r.parked[i];
    auto wit = workers_.find(p.worker_id);
    if (wit == workers_.end() || wit->second.draining) {
      deferred_.push_back({p.handle, LeaseResponse{}});
      answered[i] = true;
      continue;
    }
    const uint32_t unsent = UnsentLocked(p.worker_id);
    const uint32_t limit = QueueLimitLocked(p.worker_id, job);
    if (unsent >= limit) continue;
    std::vector<LeaseGrant> grants =
        TryLeaseLocked(job_name, job, rank, p.worker_id, std::min(p.max_batches, limit - unsent));
    if (grants.empty()) continue;
    deferred_.push_back({p.handle, LeaseResponse{std::move(grants), false}});
    answered[i] = true;
  }
  size_t kept = 0;
  for (size_t i = 0; i < r.parked.size(); ++i) {
    if (answered[i]) continue;
    if (kept != i) r.parked[kept] = std::move(r.parked[i]);  // never onto itself: a self-moved string is emptied
    ++kept;
  }
  r.parked.resize(kept);
}

// On a saturated pool nearly every worker's queue is full, and the sweep used to look at every parked request of
// every rank to find that out: four lookups each, 20 times a second, most of the coordinator's time at 10,000
// workers and 20,000 ranks (bench/scheduler_bench.cc). It starts from the workers with room instead.
void CoordinatorImpl::ServeAllJobsLocked() {
  uint32_t largest_unit = 1;
  for (const auto& [name, job] : jobs_) largest_unit = std::max(largest_unit, job.plan.batches_per_unit());
  std::map<std::string, std::vector<uint32_t>> waiting;  // job -> its ranks a worker with room is parked on
  for (const auto& [worker_id, entries] : parked_at_) {
    if (UnsentLocked(worker_id) >= QueueLimitLocked(worker_id, 1, largest_unit)) continue;  // full for every job
    for (const auto& [job, rank] : entries) {
      // The index is pruned lazily: a job forgotten, or re-planned for fewer ranks, may linger in it.
      auto it = jobs_.find(job);
      if (it != jobs_.end() && rank < it->second.ranks.size() && !it->second.ranks[rank].parked.empty()) {
        waiting[job].push_back(rank);
      }
    }
  }
  for (auto& [name, ranks] : waiting) {
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  }
  ServeInFairOrderLocked(waiting, nullptr);
}

// A grant moves its job's key, so the order is taken again after each job served; a job that got nothing cannot
// get anything later in the same call (serving the others only takes room), so it is not tried again.
void CoordinatorImpl::ServeInFairOrderLocked(std::map<std::string, std::vector<uint32_t>>& waiting,
                                             const std::string* only_worker) {
  std::set<std::string> exhausted;
  while (true) {
    const std::string* best = nullptr;
    FairShare::Key best_key;
    for (const auto& [name, ranks] : waiting) {
      if (exhausted.count(name) != 0) continue;
      JobRuntime& candidate = jobs_.at(name);
      const std::string& team = JobTeamLocked(candidate);  // cached on the job
      FairShare::Key key = shares_.KeyOf(team, name);
      key.below_minimum = BelowMinimumLocked(team, candidate);
      if (best == nullptr || key < best_key) {
        best = &name;
        best_key = key;
      }
    }
    if (best == nullptr) return;
    JobRuntime& job = jobs_.at(*best);
    std::vector<uint32_t>& ranks = waiting[*best];
    // A rank's next leasable position: its oldest handed-back unit, else its next new one.
    auto next_position = [&](uint32_t rank) {
      const RankRuntime& r = job.ranks[rank];
      return r.pending.empty() ? r.next_unit : std::min(r.next_unit, *r.pending.begin());
    };
    std::stable_sort(ranks.begin(), ranks.end(),
                     [&](uint32_t a, uint32_t b) { return next_position(a) < next_position(b); });
    const uint64_t before = stats_.leases_granted;
    for (uint32_t rank : ranks) ServeParkedLocked(*best, job, rank, only_worker);
    if (stats_.leases_granted == before) exhausted.insert(*best);
  }
}

// Whether `worker_id` has a request parked on `rank` of the job named `job_name`.
bool CoordinatorImpl::ParkedFromLocked(const std::string& job_name, uint32_t rank, const std::string& worker_id) {
  JobRuntime* job = FindJobLocked(job_name);
  if (job == nullptr || rank >= job->ranks.size()) return false;
  const std::vector<ParkedRequest>& parked = job->ranks[rank].parked;
  return std::any_of(parked.begin(), parked.end(), [&](const ParkedRequest& p) { return p.worker_id == worker_id; });
}

void CoordinatorImpl::PruneParkedIndexLocked() {
  for (auto at = parked_at_.begin(); at != parked_at_.end();) {
    for (auto it = at->second.begin(); it != at->second.end();) {
      it = ParkedFromLocked(it->first, it->second, at->first) ? std::next(it) : at->second.erase(it);
    }
    at = at->second.empty() ? parked_at_.erase(at) : std::next(at);
  }
}

void CoordinatorImpl::ServeFreedPlaceLocked(const std::string& worker_id) {
  auto at = parked_at_.find(worker_id);
  if (at == parked_at_.end()) return;
  std::map<std::string, std::vector<uint32_t>> by_job;  // the jobs and ranks that still have a request from it
  for (auto it = at->second.begin(); it != at->second.end();) {
    if (!ParkedFromLocked(it->first, it->second, worker_id)) {
      it = at->second.erase(it);
      continue;
    }
    by_job[it->first].push_back(it->second);
    ++it;
  }
  if (at->second.empty()) parked_at_.erase(at);
  ServeInFairOrderLocked(by_job, &worker_id);
}

void CoordinatorImpl::AnswerParkedEmptyLocked(RankRuntime& r, bool job_done) {
  for (const ParkedRequest& p : r.parked) deferred_.push_back({p.handle, LeaseResponse{{}, job_done}});
  r.parked.clear();
}

// A plain loop: clang's lock analysis cannot see that a predicate given to std::erase_if runs under mu_.
void CoordinatorImpl::AnswerParkedFromLocked(RankRuntime& r, const std::string& worker_id) {
  for (auto p = r.parked.begin(); p != r.parked.end();) {
    if (p->worker_id != worker_id) {
      ++p;
      continue;
    }
    deferred_.push_back({p->handle, LeaseResponse{}});
    p = r.parked.erase(p);
  }
}

// Parked requests whose wait is over get an empty answer (entries may have different waits: all are swept).
void CoordinatorImpl::ExpireParkedLocked(RankRuntime& r, TimePoint now) {
  for (auto it = r.parked.begin(); it != r.parked.end();) {
    if (it->deadline <= now) {
      deferred_.push_back({it->handle, LeaseResponse{}});
      it = r.parked.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace stoker::coordinator
