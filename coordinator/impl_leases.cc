// CoordinatorImpl, leasing: which unit goes to which worker under which attempt, parked lease requests, and what
// a worker reports when it is done with a unit.
#include "coordinator/impl.h"

#include <algorithm>

#include "base/logging.h"

namespace stoker::coordinator {

std::vector<uint64_t> CoordinatorImpl::ReceivedInUnitLocked(const JobRuntime& job, uint32_t rank,
                                                            uint64_t unit) const {
  const RankRuntime& r = job.ranks[rank];
  const uint64_t watermark = ViewLocked(job, rank).received;
  Plan::UnitRange range = job.plan.Unit(unit);
  const uint64_t first = job.plan.GlobalBatch(range.epoch, range.first_batch);
  std::vector<uint64_t> received;
  for (uint32_t i = 0; i < range.count; ++i) {
    const uint64_t g = first + i;
    if (g < watermark || r.received_above.count(g) != 0) received.push_back(range.first_batch + i);
  }
  return received;
}

bool CoordinatorImpl::CommitIfCompleteLocked(JobRuntime& job, uint32_t rank, uint64_t unit) {
  if (ReceivedInUnitLocked(job, rank, unit).size() != job.plan.Unit(unit).count) return false;
  RankRuntime& r = job.ranks[rank];
  r.active.erase(unit);
  r.pending.erase(unit);
  ++stats_.units_committed;
  return true;
}

void CoordinatorImpl::ReleaseLocked(RankRuntime& r, uint64_t unit, uint64_t* counter) {
  r.active.erase(unit);
  r.pending.insert(unit);
  ++*counter;
}

LeaseGrant CoordinatorImpl::GrantLocked(const std::string& job_name, JobRuntime& job, uint32_t rank, uint64_t unit,
                                        std::vector<uint64_t> skip, const std::string& worker_id) {
  RankRuntime& r = job.ranks[rank];
  const Plan::UnitRange range = job.plan.Unit(unit);
  LeaseGrant g;
  g.job = job_name;
  g.rank = rank;
  g.unit = unit;
  g.epoch = range.epoch;
  g.first_batch = range.first_batch;
  g.batch_count = range.count;
  g.attempt = r.next_attempt++;
  g.skip = std::move(skip);
  g.ttl_ms = static_cast<uint32_t>(ToMillis(options_.lease_ttl));
  g.client_id = ViewLocked(job, rank).client_id;
  g.client_identity = ViewLocked(job, rank).holder;
  g.spec_fingerprint = job.spec_fingerprint;
  if (r.next_attempt > job.record->ranks[rank].attempts_reserved) {
    ApplyLocked(AttemptsReserved{job_name, rank, r.next_attempt + options_.attempt_block});
  }
  r.active[unit] = ActiveLease{g.attempt, worker_id, clock_.Now() + options_.lease_ttl, false, {}};
  ++stats_.leases_granted;
  return g;
}

std::vector<LeaseGrant> CoordinatorImpl::TryLeaseLocked(const std::string& job_name, JobRuntime& job, uint32_t rank,
                                                        const std::string& worker_id, uint32_t max_batches) {
  std::vector<LeaseGrant> grants;
  RankRuntime& r = job.ranks[rank];
  if (!r.session_live || reconciling_) return grants;
  const Plan& plan = job.plan;
  const RankView view = ViewLocked(job, rank);
  const uint64_t limit = view.consumed + view.window;  // every leased batch must lie below this
  uint32_t budget = max_batches;
  // Units handed back come first: they are the oldest, and the client is waiting for them.
  for (auto it = r.pending.begin(); it != r.pending.end() && budget > 0;) {
    const uint64_t unit = *it;
    if (plan.UnitEnd(unit) > limit) break;
    std::vector<uint64_t> skip = ReceivedInUnitLocked(job, rank, unit);
    const uint32_t todo = plan.Unit(unit).count - static_cast<uint32_t>(skip.size());
    if (todo == 0) {  // everything arrived after all: commit instead
      it = r.pending.erase(it);
      ++stats_.units_committed;
      continue;
    }
    if (todo > budget) break;
    it = r.pending.erase(it);
    budget -= todo;
    grants.push_back(GrantLocked(job_name, job, rank, unit, std::move(skip), worker_id));
  }
  while (budget > 0 && r.next_unit < plan.total_units()) {
    const uint64_t unit = r.next_unit;
    if (plan.UnitEnd(unit) > limit) break;
    std::vector<uint64_t> skip = ReceivedInUnitLocked(job, rank, unit);
    const uint32_t todo = plan.Unit(unit).count - static_cast<uint32_t>(skip.size());
    if (todo > budget) break;
    ++r.next_unit;
    if (todo == 0) continue;  // received before this session started leasing it
    budget -= todo;
    grants.push_back(GrantLocked(job_name, job, rank, unit, std::move(skip), worker_id));
  }
  return grants;
}

StatusOr<std::optional<LeaseResponse>> CoordinatorImpl::RequestLease(RequestHandle handle, const LeaseRequest& request,
                                                                      const Caller& caller) {
  MutexLock lock(mu_);
  STOKER_ASSIGN_OR_RETURN(WorkerRuntime * w, CallingWorkerLocked(request.worker_id, caller));
  w->last_heard = clock_.Now();
  JobRuntime* job = FindJobLocked(request.job);
  if (job == nullptr) return NotFoundError("unknown job '" + request.job + "'");
  if (request.rank >= job->ranks.size()) {
    return InvalidArgumentError("job '" + request.job + "' has " + std::to_string(job->ranks.size()) +
                                " ranks; rank " + std::to_string(request.rank) + " does not exist");
  }
  RankRuntime& r = job->ranks[request.rank];
  LeaseResponse response;
  response.job_done = ViewLocked(*job, request.rank).received >= job->plan.total_batches();
  if (w->draining || response.job_done || request.max_batches == 0) return std::optional(response);
  ServeParkedLocked(request.job, *job, request.rank);
  response.leases = TryLeaseLocked(request.job, *job, request.rank, request.worker_id, request.max_batches);
  if (!response.leases.empty() || request.wait_ms == 0) return std::optional(response);
  const Duration wait = std::min<Duration>(Millis(request.wait_ms), options_.max_lease_wait);
  r.parked.push_back({handle, request.worker_id, request.max_batches, clock_.Now() + wait});
  ++stats_.lease_requests_parked;
  return std::optional<LeaseResponse>();
}

void CoordinatorImpl::ServeParkedLocked(const std::string& job_name, JobRuntime& job, uint32_t rank) {
  // Oldest first, but one that cannot be served (its budget is smaller than the next unit) must not block the
  // ones behind it.
  RankRuntime& r = job.ranks[rank];
  for (auto it = r.parked.begin(); it != r.parked.end();) {
    auto wit = workers_.find(it->worker_id);
    if (wit == workers_.end() || wit->second.draining) {
      deferred_.push_back({it->handle, LeaseResponse{}});
      it = r.parked.erase(it);
      continue;
    }
    std::vector<LeaseGrant> grants = TryLeaseLocked(job_name, job, rank, it->worker_id, it->max_batches);
    if (grants.empty()) {
      ++it;
      continue;
    }
    deferred_.push_back({it->handle, LeaseResponse{std::move(grants), false}});
    it = r.parked.erase(it);
  }
}

void CoordinatorImpl::AnswerParkedEmptyLocked(RankRuntime& r, bool job_done) {
  for (const ParkedRequest& p : r.parked) deferred_.push_back({p.handle, LeaseResponse{{}, job_done}});
  r.parked.clear();
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

Status CoordinatorImpl::UnitDone(const UnitDoneRequest& request, const Caller& caller) {
  MutexLock lock(mu_);
  // A report from a worker gone meanwhile still counts (its quarantine findings, a hand-back), but only from the
  // identity it registered as; a report naming another worker's lease is refused below by the lease check.
  auto wit = workers_.find(request.worker_id);
  if (wit != workers_.end() && wit->second.identity != caller.identity) {
    return PermissionDeniedError("worker " + request.worker_id + " is registered under another key");
  }
  JobRuntime* job = FindJobLocked(request.job);
  if (job == nullptr) return NotFoundError("unknown job '" + request.job + "'");
  if (request.rank >= job->ranks.size() || request.unit >= job->plan.total_units()) {
    return InvalidArgumentError("unit " + std::to_string(request.unit) + " of rank " + std::to_string(request.rank) +
                                " does not exist in job '" + request.job + "'");
  }
  // Quarantine reports describe the input, which is the same whichever attempt read it: keep them all.
  const uint32_t epoch = job->plan.Unit(request.unit).epoch;
  for (const QuarantineReport& q : request.quarantined) {
    if (q.sample_id >= job->plan.num_samples()) continue;
    auto [it, inserted] = job->quarantined[epoch].emplace(q.sample_id, q);
    if (inserted) {
      ++stats_.quarantined_samples;
      STOKER_LOG(kWarning) << "job " << request.job << " epoch " << epoch << ": sample " << q.sample_id
                           << " quarantined (" << q.reason << "): " << q.detail;
    }
  }
  RankRuntime& r = job->ranks[request.rank];
  auto it = r.active.find(request.unit);
  if (it == r.active.end() || it->second.attempt != request.attempt || it->second.worker_id != request.worker_id) {
    return AbortedError("lease of unit " + std::to_string(request.unit) + " attempt " +
                        std::to_string(request.attempt) + " is no longer current");
  }
  switch (request.outcome) {
    case UnitOutcome::kSent:
      it->second.sent = true;
      it->second.sent_at = clock_.Now();
      CommitIfCompleteLocked(*job, request.rank, request.unit);
      break;
    case UnitOutcome::kUndeliverable:
      ReleaseLocked(r, request.unit, &stats_.releases.undeliverable);
      ServeParkedLocked(request.job, *job, request.rank);
      break;
    case UnitOutcome::kAbandoned:
      ReleaseLocked(r, request.unit, &stats_.releases.abandoned);
      ServeParkedLocked(request.job, *job, request.rank);
      break;
  }
  return Status::Ok();
}

}  // namespace stoker::coordinator
