// CoordinatorImpl, leasing: which unit goes to which worker under which attempt, and what a worker reports when it
// is done with a unit. Requests that wait for work are served in impl_parked.cc.
#include "coordinator/impl.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "base/logging.h"
#include "wire/data_messages.h"

namespace stoker::coordinator {
namespace {

constexpr size_t kMaxUnreportedCommits = 4096;  // per job

}  // namespace

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
  auto it = r.active.find(unit);
  if (it != r.active.end()) {  // a client took its batches: a worker that delivers (WorkerListLocked)
    auto worker = workers_.find(it->second.worker_id);
    if (worker != workers_.end()) worker->second.delivered = true;
    NoteCommitLocked(job, r, it->second, clock_.Now());
  }
  if (it != r.active.end() && !it->second.sent) {
    // Acked before its worker's UnitDone arrived: remember the holder, whose quarantine report is still to come.
    auto& unreported = job.unreported_commits;
    if (unreported.size() >= kMaxUnreportedCommits) unreported.erase(unreported.begin());
    unreported[{rank, unit}] = {it->second.worker_id, it->second.attempt};
  }
  DropLocked(r, unit);
  r.pending.erase(unit);
  ++stats_.units_committed;
  return true;
}

void CoordinatorImpl::ReleaseLocked(RankRuntime& r, uint64_t unit, uint64_t* counter) {
  DropLocked(r, unit);
  r.pending.insert(unit);
  ++*counter;
}

void CoordinatorImpl::HoldLocked(RankRuntime& r, uint64_t unit, ActiveLease lease) {
  DropLocked(r, unit);
  lease.leased_at = clock_.Now();
  if (!lease.sent) {
    unsent_by_worker_[lease.worker_id] += lease.batches;
    if (!lease.local) unsent_by_team_[lease.team] += lease.batches;
  }
  r.active[unit] = std::move(lease);
}

void CoordinatorImpl::MarkSentLocked(ActiveLease& lease, TimePoint now) {
  if (lease.sent) return;
  lease.sent = true;
  lease.sent_at = now;
  auto take = [&](std::unordered_map<std::string, uint32_t>& unsent, const std::string& key) {
    auto it = unsent.find(key);
    if (it == unsent.end()) return;
    it->second -= std::min(it->second, lease.batches);
    if (it->second == 0) unsent.erase(it);
  };
  take(unsent_by_worker_, lease.worker_id);
  if (!lease.local) take(unsent_by_team_, lease.team);
}

void CoordinatorImpl::DropLocked(RankRuntime& r, uint64_t unit) {
  auto it = r.active.find(unit);
  if (it == r.active.end()) return;
  MarkSentLocked(it->second, it->second.sent_at);  // whatever it had not sent leaves the worker's queue too
  r.active.erase(it);
}

uint32_t CoordinatorImpl::UnsentLocked(const std::string& worker_id) const {
  auto it = unsent_by_worker_.find(worker_id);
  return it == unsent_by_worker_.end() ? 0 : it->second;
}

uint32_t CoordinatorImpl::QueueLimitLocked(const std::string& worker_id, uint32_t batch_size,
                                           uint32_t batches_per_unit) const {
  if (options_.worker_queue_batches > 0) return std::max(options_.worker_queue_batches, batches_per_unit);
  auto wit = workers_.find(worker_id);
  const uint32_t threads = wit == workers_.end() ? 1 : std::max<uint32_t>(1, wit->second.threads);
  // Two samples per thread (one being made, one ready to start), at least two batches, at least a unit.
  const uint32_t for_threads = (2 * threads + batch_size - 1) / batch_size;
  return std::max({2u, for_threads, batches_per_unit});
}

uint32_t CoordinatorImpl::QueueLimitLocked(const std::string& worker_id, const JobRuntime& job) const {
  return QueueLimitLocked(worker_id, job.plan.batch_size(), job.plan.batches_per_unit());
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
  const RankView view = ViewLocked(job, rank);
  g.client_id = view.client_id;
  g.client_identity = view.holder;
  g.session_check = view.session_check;
  g.spec_fingerprint = job.spec_fingerprint;
  if (r.next_attempt > job.record->ranks[rank].attempts_reserved) {
    ApplyLocked(AttemptsReserved{job_name, rank, r.next_attempt + options_.attempt_block});
  }
  const uint32_t batches = range.count - static_cast<uint32_t>(g.skip.size());
  const uint64_t samples = uint64_t{batches} * job.plan.batch_size();
  const std::string team = JobTeamLocked(job);
  job.samples_leased += samples;
  ++stats_.leases_granted;
  auto w = workers_.find(worker_id);
  if (w != workers_.end()) ++w->second.leases_granted;
  if (w != workers_.end() && !w->second.local_group.empty()) {  // the client's own cores: no share, cap or guarantee
    ++stats_.leases_granted_local;
    HoldLocked(r, unit, ActiveLease{g.attempt, worker_id, clock_.Now() + options_.lease_ttl, false, {}, batches, team,
                                    true});
    return g;
  }
  shares_.Charge(team, job_name, samples);
  // Allowances accrue only while the pool's rate is known (TeamRoomLocked), so they are spent only then too.
  const double seconds = per_worker_rate_ > 0 ? ThreadSecondsLocked(job_name, samples) : 0;
  auto allowance = team_allowance_.find(team);
  if (allowance != team_allowance_.end()) allowance->second.amount -= seconds;
  auto guarantee = team_guarantee_.find(team);
  if (guarantee != team_guarantee_.end()) {
    // A busy past owes at most a second's worth (it does not void the guarantee); this grant is paid in full.
    const double second = shares_.PolicyOf(team).min_workers * worker_threads_;
    guarantee->second.amount = std::max(-second, guarantee->second.amount) - seconds;
  }
  ActiveLease lease{g.attempt, worker_id, clock_.Now() + options_.lease_ttl, false, {}, batches, team};
  lease.no_pace = batches < range.count;  // only what the client lacked: quicker than a unit
  HoldLocked(r, unit, std::move(lease));
  return g;
}

bool CoordinatorImpl::HasRoomLocked(const JobRuntime& job, uint32_t rank) const {
  const RankRuntime& r = job.ranks[rank];
  if (!r.session_live) return false;
  const RankView view = ViewLocked(job, rank);
  const uint64_t limit = view.consumed + view.window;
  const uint64_t next = r.pending.empty() ? r.next_unit : std::min(r.next_unit, *r.pending.begin());
  return next < job.plan.total_units() && job.plan.UnitEnd(next) <= limit;
}

std::vector<LeaseGrant> CoordinatorImpl::TryLeaseLocked(const std::string& job_name, JobRuntime& job, uint32_t rank,
                                                        const std::string& worker_id, uint32_t max_batches) {
  std::vector<LeaseGrant> grants;
  RankRuntime& r = job.ranks[rank];
  if (!r.session_live || reconciling_) return grants;
  const Plan& plan = job.plan;
  const RankView view = ViewLocked(job, rank);
  const uint64_t limit = view.consumed + view.window;  // every leased batch must lie below this
  uint32_t budget =
      IsLocalLocked(worker_id) ? max_batches : std::min(max_batches, TeamRoomLocked(JobTeamLocked(job), job));
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
  STOKER_ASSIGN_OR_RETURN(WorkerRuntime * w, CallingWorkerLocked(request.worker_id, request.session, caller));
  w->last_heard = clock_.Now();
  JobRuntime* job = FindJobLocked(request.job);
  if (job == nullptr) return NotFoundError("unknown job '" + request.job + "'");
  if (request.rank >= job->ranks.size()) {
    return InvalidArgumentError("job '" + request.job + "' has " + std::to_string(job->ranks.size()) +
                                " ranks; rank " + std::to_string(request.rank) + " does not exist");
  }
  STOKER_RETURN_IF_ERROR(MayServeLocked(*w, request.worker_id, *job, request.rank));
  RankRuntime& r = job->ranks[request.rank];
  LeaseResponse response;
  if (!w->local_group.empty()) {
    // Its client's session not live (between a coordinator's restart and the client's next heartbeat): nothing yet.
    if (!r.session_live) return std::optional(response);
    w->local_job = request.job;
  }
  response.job_done = ViewLocked(*job, request.rank).received >= job->plan.total_batches();
  if (w->draining || response.job_done || request.max_batches == 0) return std::optional(response);
  ServeParkedLocked(request.job, *job, request.rank);  // less-loaded workers waiting for this rank go first
  const uint32_t unsent = UnsentLocked(request.worker_id);
  const uint32_t limit = QueueLimitLocked(request.worker_id, *job);
  if (unsent < limit) {
    response.leases = TryLeaseLocked(request.job, *job, request.rank, request.worker_id,
                                     std::min(request.max_batches, limit - unsent));
  }
  if (!response.leases.empty() || request.wait_ms == 0) return std::optional(response);
  const Duration wait = std::min<Duration>(Millis(request.wait_ms), options_.max_lease_wait);
  r.parked.push_back({handle, request.worker_id, request.max_batches, clock_.Now() + wait});
  parked_at_[request.worker_id].insert({request.job, request.rank});
  ++stats_.lease_requests_parked;
  return std::optional<LeaseResponse>();
}

bool CoordinatorImpl::FromLeaseHolderLocked(JobRuntime& job, const UnitDoneRequest& request) {
  const RankRuntime& r = job.ranks[request.rank];
  auto it = r.active.find(request.unit);
  if (it != r.active.end()) return it->second.attempt == request.attempt && it->second.worker_id == request.worker_id;
  auto done = job.unreported_commits.find({request.rank, request.unit});
  if (done == job.unreported_commits.end()) return false;
  return done->second == std::pair{request.worker_id, request.attempt};
}

// Quarantine reports describe the input, but only the worker holding the unit's lease (registered under the
// caller's key) may make them, only on the samples of that unit, each (epoch, sample) is kept once, and at most
// max_quarantine_reports over all jobs: an admitted worker key cannot grow the coordinator, nor spend the cap, by
// reporting samples it was never given.
void CoordinatorImpl::KeepQuarantineLocked(JobRuntime& job, const UnitDoneRequest& request) {
  if (request.quarantined.empty()) return;
  auto wit = workers_.find(request.worker_id);
  if (wit == workers_.end() || !FromLeaseHolderLocked(job, request)) {
    stats_.quarantine_refused_not_holder += request.quarantined.size();
    return;
  }
  const Plan::UnitRange unit = job.plan.Unit(request.unit);
  // More reports than the unit has samples cannot all be honest: refused whole, before any is looked up (each
  // UnitHolds walks the unit), so one request cannot hold the lock for long.
  if (request.quarantined.size() > uint64_t{unit.count} * job.plan.batch_size()) {
    stats_.quarantine_refused_not_in_unit += request.quarantined.size();
    return;
  }
  auto& reports = job.quarantined[unit.epoch];
  for (const QuarantineReport& q : request.quarantined) {
    if (reports.count(q.sample_id) != 0) continue;  // kept already: no need to look it up again
    if (!job.plan.UnitHolds(request.unit, request.rank, q.sample_id)) {
      ++stats_.quarantine_refused_not_in_unit;  // a holder reports on its unit's samples, no others
      continue;
    }
    if (quarantine_reports_ >= options_.max_quarantine_reports) {
      if (stats_.quarantine_refused_over_cap++ == 0) {
        STOKER_LOG(kWarning) << "quarantine reports past " << options_.max_quarantine_reports
                             << " (--max-quarantine-reports): further ones are counted, not kept";
      }
      continue;
    }
    QuarantineReport kept{q.sample_id, q.reason.substr(0, kMaxQuarantineReasonBytes),
                          q.detail.substr(0, kMaxQuarantineDetailBytes)};
    STOKER_LOG(kWarning) << "job " << request.job << " epoch " << unit.epoch << ": sample " << q.sample_id
                         << " quarantined (" << kept.reason << "): " << kept.detail;
    reports.emplace(q.sample_id, std::move(kept));
    ++job.quarantine_reports;
    ++quarantine_reports_;
    ++stats_.quarantined_samples;
  }
}

// What the unit's samples cost its worker, for the fair share (FairShare::ReportCost) and the job's time by stage
// (stoker_coordinator_job_stage_seconds_total): only from the holder of its lease, only its first report (a
// worker sends it again until it is answered, and the lease stays until the acks commit it: a replay counted again
// would let one worker's units set the median), only from a pool worker (node-local ones are outside the shares),
// and never for more batches than it was leased.
void CoordinatorImpl::CountCostLocked(JobRuntime& job, const UnitDoneRequest& request) {
  if (request.outcome != UnitOutcome::kSent || request.batches_sent == 0) return;
  auto wit = workers_.find(request.worker_id);
  if (wit == workers_.end() || !wit->second.local_group.empty()) return;
  const std::pair holder{request.worker_id, request.attempt};
  uint32_t leased = 0;
  const RankRuntime& r = job.ranks[request.rank];
  auto it = r.active.find(request.unit);
  if (it != r.active.end()) {
    if (it->second.sent || std::pair{it->second.worker_id, it->second.attempt} != holder) return;
    leased = it->second.batches;
  } else {
    auto done = job.unreported_commits.find({request.rank, request.unit});  // committed before its report came
    if (done == job.unreported_commits.end() || done->second != holder) return;
    leased = job.plan.Unit(request.unit).count;  // its batches skipped are not kept past the commit: the unit's
  }
  const uint64_t batches = std::min(request.batches_sent, leased);
  shares_.ReportCost(request.job, batches * job.plan.batch_size(), request.busy_seconds);
  // Where the time went, by stage: the report's split of its time, applied to what the unit's samples cost at the
  // job's median, so that a worker's figures move the split of its own units only, never the total.
  const std::array stages = request.StageSeconds();
  const double split = std::max(request.busy_seconds, stages[0] + stages[1] + stages[2] + stages[3]);
  const double cost = shares_.SampleSecondsOf(request.job) * static_cast<double>(batches * job.plan.batch_size());
  if (!(split > 0) || !(cost > 0) || !std::isfinite(split)) return;
  for (size_t i = 0; i < stages.size(); ++i) job.stage_seconds[i] += stages[i] / split * cost;
}

Status CoordinatorImpl::UnitDone(const UnitDoneRequest& request, const Caller& caller) {
  MutexLock lock(mu_);
  // Only from the registered worker's own process: another process of the key could otherwise hand back, or report
  // as sent, the units of any worker /state lists. A worker counted lost holds no lease any more (its sent units
  // wait for their acks held by none, RemoveWorkerLocked), so there is nothing left for it to report.
  if (workers_.count(request.worker_id) == 0) {
    stats_.quarantine_refused_not_holder += request.quarantined.size();
    return AbortedError("worker " + request.worker_id + " is not registered: it holds no lease");
  }
  STOKER_RETURN_IF_ERROR(CallingWorkerLocked(request.worker_id, request.session, caller).status());
  JobRuntime* job = FindJobLocked(request.job);
  if (job == nullptr) return NotFoundError("unknown job '" + request.job + "'");
  if (request.rank >= job->ranks.size() || request.unit >= job->plan.total_units()) {
    return InvalidArgumentError("unit " + std::to_string(request.unit) + " of rank " + std::to_string(request.rank) +
                                " does not exist in job '" + request.job + "'");
  }
  KeepQuarantineLocked(*job, request);
  CountCostLocked(*job, request);
  auto unreported = job->unreported_commits.find({request.rank, request.unit});
  if (unreported != job->unreported_commits.end() &&
      unreported->second == std::pair{request.worker_id, request.attempt}) {
    job->unreported_commits.erase(unreported);  // its holder's report is in: nothing more to wait for
    ServeFreedPlaceLocked(request.worker_id);    // the commit freed its place; the worker is done with it now
  }
  RankRuntime& r = job->ranks[request.rank];
  auto it = r.active.find(request.unit);
  if (it == r.active.end() || it->second.attempt != request.attempt || it->second.worker_id != request.worker_id) {
    return AbortedError("lease of unit " + std::to_string(request.unit) + " attempt " +
                        std::to_string(request.attempt) + " is no longer current");
  }
  switch (request.outcome) {
    case UnitOutcome::kSent:
      MarkSentLocked(it->second, clock_.Now());
      CommitIfCompleteLocked(*job, request.rank, request.unit);
      break;
    case UnitOutcome::kUndeliverable:
      ReleaseLocked(r, request.unit, &stats_.releases.undeliverable);
      ServeParkedLocked(request.job, *job, request.rank);  // the unit is pending again, for any worker with room
      break;
    case UnitOutcome::kAbandoned:
      ReleaseLocked(r, request.unit, &stats_.releases.abandoned);
      ServeParkedLocked(request.job, *job, request.rank);
      break;
  }
  ServeFreedPlaceLocked(request.worker_id);  // its queue has room again: the job owed it most takes it
  return Status::Ok();
}

}  // namespace stoker::coordinator
