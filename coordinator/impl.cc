// CoordinatorImpl: durable updates, restart and reconciliation, workers, deregistration and time. Leasing is in
// impl_leases.cc, clients in impl_clients.cc, stats and /state in impl_state.cc.
#include "coordinator/impl.h"

#include <algorithm>
#include <utility>

#include "dataset/checkpoint.h"
#include "auth/data_tickets.h"
#include "base/logging.h"
#include "coordinator/journal.h"

namespace stoker::coordinator {

CoordinatorImpl::CoordinatorImpl(const CoordinatorOptions& options, const Clock& clock, Env& env, Journal* journal)
    : options_(options),
      clock_(clock),
      env_(env),
      journal_(journal),
      rate_needed_(std::any_of(options.teams.begin(), options.teams.end(), [](const auto& team) {
        return team.second.max_workers > 0 || team.second.min_workers > 0;
      })),
      shares_(options.teams) {}

void CoordinatorImpl::ApplyLocked(const Update& update) {
  state_.Apply(update);
  if (journal_ != nullptr) journal_->Append(update);
}

CoordinatorImpl::RankView CoordinatorImpl::ViewLocked(const JobRuntime& job, uint32_t rank) const {
  const RankRecord& r = job.record->ranks[rank];
  // A plan with an origin delivers nothing before its start: a rank that never had a session begins there.
  const uint64_t start = job.plan.StartBatch();
  const uint64_t received = std::clamp(r.received, start, job.plan.total_batches());
  return RankView{r.client_id, r.holder, r.session_check, r.window, received, std::clamp(r.consumed, start, received)};
}

CoordinatorImpl::JobRuntime* CoordinatorImpl::FindJobLocked(const std::string& name) {
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : &it->second;
}

CoordinatorImpl::JobRuntime& CoordinatorImpl::AddJobRuntimeLocked(const JobSpec& spec, uint64_t num_samples) {
  auto plan = Plan::Make(spec, num_samples);
  STOKER_CHECK(plan.ok(), "a job with an impossible plan was recorded: " + plan.status().ToString());
  JobRuntime runtime{.plan = *plan,
                     .record = state_.FindJob(spec.name),
                     .ranks = std::vector<RankRuntime>(spec.world_size),
                     .spec_fingerprint = SpecFingerprint(spec)};
  STOKER_CHECK(runtime.record != nullptr, "a job's runtime before its record: " + spec.name);
  EraseJobRuntimeLocked(spec.name);
  return jobs_.insert_or_assign(spec.name, std::move(runtime)).first->second;
}

void CoordinatorImpl::EraseJobRuntimeLocked(const std::string& name) {
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return;
  quarantine_reports_ -= it->second.quarantine_reports;
  shares_.Forget(name);  // a job re-planned for another shape starts level with the others again
  // Nothing of it may outlive it: its parked requests are answered, and its leases leave the workers' and its
  // team's counts of unsent batches.
  for (RankRuntime& r : it->second.ranks) {
    AnswerParkedEmptyLocked(r, false);
    while (!r.active.empty()) DropLocked(r, r.active.begin()->first);
  }
  jobs_.erase(it);
}

// ---- restart ---------------------------------------------------------------------------------------------------

void CoordinatorImpl::Restore(const Update& update) {
  MutexLock lock(mu_);
  state_.Apply(update);
  if (const auto* created = std::get_if<JobCreated>(&update)) {
    // A job an older version accepted past today's limits (more than kMaxEpochs epochs) gets no runtime: it is
    // forgotten once the journal is replayed (FinishRestore), rather than stopping the coordinator from starting.
    if (auto plan = Plan::Make(created->spec, created->num_samples); !plan.ok()) {
      STOKER_LOG(kError) << "job " << created->spec.name << " in the journal is refused now and will be forgotten: "
                         << plan.status().ToString();
      return;
    }
    AddJobRuntimeLocked(created->spec, created->num_samples);
  } else if (const auto* reshaped = std::get_if<JobReshaped>(&update)) {
    if (jobs_.count(reshaped->spec.name) == 0) return;  // refused when it was created: forgotten anyway
    if (auto plan = Plan::Make(reshaped->spec, state_.FindJob(reshaped->spec.name)->num_samples); !plan.ok()) {
      STOKER_LOG(kError) << "job " << reshaped->spec.name << "'s shape change in the journal is refused now and "
                         << "the job will be forgotten: " << plan.status().ToString();
      EraseJobRuntimeLocked(reshaped->spec.name);
      return;
    }
    AddJobRuntimeLocked(reshaped->spec, state_.FindJob(reshaped->spec.name)->num_samples);
  } else if (const auto* removed = std::get_if<JobRemoved>(&update)) {
    EraseJobRuntimeLocked(removed->job);
  } else if (const auto* joined = std::get_if<WorkerJoined>(&update)) {
    WorkerRuntime& w = workers_[joined->worker_id];
    if (w.joined == 0) w.joined = ++workers_joined_;
    w.data_endpoint = joined->data_endpoint;
    w.threads = joined->threads;
    w.last_heard = clock_.Now();
    w.data_public_key = joined->data_public_key;
    w.identity = joined->identity;
    w.data_sealed = joined->data_sealed;
    w.session_check = joined->session_check;
  } else if (const auto* left = std::get_if<WorkerLeft>(&update)) {
    workers_.erase(left->worker_id);
  }
}

void CoordinatorImpl::FinishRestore() {
  MutexLock lock(mu_);
  const TimePoint now = clock_.Now();
  std::vector<std::string> refused;
  for (const auto& [name, record] : state_.jobs()) {
    if (jobs_.count(name) == 0) refused.push_back(name);
  }
  for (const std::string& name : refused) ApplyLocked(JobRemoved{name});
  for (auto& [name, job] : jobs_) {
    for (uint32_t rank = 0; rank < job.ranks.size(); ++rank) {
      RankRuntime& r = job.ranks[rank];
      const uint64_t received = ViewLocked(job, rank).received;
      r.next_attempt = std::max<uint64_t>(1, job.record->ranks[rank].attempts_reserved);
      r.next_unit = received < job.plan.total_batches() ? job.plan.UnitOf(received) : job.plan.total_units();
      r.session_live = false;  // until its client's next heartbeat
      r.restored = job.record->ranks[rank].session > 0;
      r.last_heard = now;
    }
  }
  for (auto& [id, w] : workers_) w.last_heard = now;  // a lease TTL to show up before being counted lost
  membership_version_ += workers_.size() + 1;
  if (!jobs_.empty()) {
    reconciling_ = true;
    reconcile_until_ = now + options_.reconcile_window;
    STOKER_LOG(kInfo) << "restored " << jobs_.size() << " jobs and " << workers_.size()
                      << " workers; reconciling leases for " << ToMillis(options_.reconcile_window) << " ms";
  }
}

void CoordinatorImpl::EndReconcileLocked() {
  reconciling_ = false;
  uint64_t redo = 0;
  for (auto& [name, job] : jobs_) {
    for (uint32_t rank = 0; rank < job.ranks.size(); ++rank) {
      RankRuntime& r = job.ranks[rank];
      const uint64_t first = r.next_unit;
      uint64_t end = first;
      for (const auto& [unit, lease] : r.active) end = std::max(end, unit + 1);
      // Units before the last adopted one that nobody reported were leased to workers now gone: redo them.
      for (uint64_t unit = first; unit < end; ++unit) {
        if (r.active.count(unit) == 0 && !CommitIfCompleteLocked(job, rank, unit)) {
          r.pending.insert(unit);
          ++redo;
        }
      }
      r.next_unit = end;
    }
  }
  stats_.releases.not_adopted += redo;
  STOKER_LOG(kInfo) << "reconciled: " << stats_.leases_adopted << " leases adopted, " << redo
                    << " units to redo; leasing resumes";
  ServeAllJobsLocked();
}

bool CoordinatorImpl::reconciling() const {
  MutexLock lock(mu_);
  return reconciling_;
}

std::vector<Update> CoordinatorImpl::Snapshot() const {
  MutexLock lock(mu_);
  return state_.Snapshot();
}

// ---- time ------------------------------------------------------------------------------------------------------

void CoordinatorImpl::Tick() {
  MutexLock lock(mu_);
  const TimePoint now = clock_.Now();
  if (reconciling_ && now >= reconcile_until_) EndReconcileLocked();
  if (now >= next_capacity_prune_) {
    capacity_.Prune(now);
    next_capacity_prune_ = now + Millis(5000);
  }
  if (now >= next_rate_refresh_) {
    PruneParkedIndexLocked();
    if (rate_needed_) RefreshWorkersWorthLocked(now);
    shares_.SetStalls(capacity_.JobStalls(now));  // within shares, the most starved first
    next_rate_refresh_ = now + Millis(1000);
  }
  ExpireWorkersLocked(now);
  ForgetIdleJobsLocked(now);
  ExpireLeasesAndClientsLocked(now);
}

void CoordinatorImpl::ExcuseSilence(Duration silence) {
  MutexLock lock(mu_);
  for (auto& [id, w] : workers_) w.last_heard += silence;
  for (auto& [name, job] : jobs_) {
    if (job.idle_since) *job.idle_since += silence;
    for (auto& [id, d] : job.delivery) {
      if (d.last_strike) *d.last_strike += silence;
      d.benched_until += silence;
    }
    for (RankRuntime& r : job.ranks) {
      r.last_heard += silence;
      for (auto& commit : r.recent_commits) commit.second += silence;
      for (auto& [unit, lease] : r.active) {
        lease.expiry += silence;
        lease.sent_at += silence;
        lease.leased_at += silence;
      }
      for (ParkedRequest& p : r.parked) p.deadline += silence;
    }
  }
  if (reconciling_) reconcile_until_ += silence;
}

void CoordinatorImpl::ExpireWorkersLocked(TimePoint now) {
  std::vector<std::string> lost_workers;
  for (const auto& [id, w] : workers_) {
    if (now - w.last_heard > options_.lease_ttl) lost_workers.push_back(id);
  }
  for (const auto& id : lost_workers) {
    STOKER_LOG(kWarning) << "worker " << id << " lost: no heartbeat for " << ToMillis(options_.lease_ttl) << " ms";
    RemoveWorkerLocked(id, &stats_.releases.worker_lost);
  }
}

void CoordinatorImpl::ForgetIdleJobsLocked(TimePoint now) {
  std::vector<std::string> forget;
  for (auto& [name, job] : jobs_) {
    bool idle = true;
    for (const RankRuntime& r : job.ranks) idle = idle && !r.session_live;
    if (!idle) {
      job.idle_since.reset();
    } else if (!job.idle_since) {
      job.idle_since = now;
    } else if (now - *job.idle_since >= options_.job_retention) {
      forget.push_back(name);
    }
  }
  for (const std::string& name : forget) {
    STOKER_LOG(kInfo) << "job " << name << " has had no client for " << ToSeconds(options_.job_retention)
                      << " s: forgotten (resuming it needs a checkpoint token)";
    EraseJobRuntimeLocked(name);  // before its record goes: the runtime points into it
    ApplyLocked(JobRemoved{name});
    ++stats_.jobs_removed;
  }
}

void CoordinatorImpl::ExpireLeasesAndClientsLocked(TimePoint now) {
  for (auto& [name, job] : jobs_) {
    std::vector<std::string> struck;  // a worker once for each lease it did not deliver while others did
    for (uint32_t rank = 0; rank < job.ranks.size(); ++rank) {
      RankRuntime& r = job.ranks[rank];
      std::vector<std::pair<uint64_t, uint64_t*>> released;
      for (const auto& [unit, lease] : r.active) {
        uint64_t* counter = nullptr;
        if (!lease.sent && now > lease.expiry) {
          counter = &stats_.releases.lease_expired;
        } else if (lease.sent && now - lease.sent_at > options_.ack_timeout) {
          counter = &stats_.releases.unacked;
        } else if (OverdueLocked(job, rank, unit, lease, now)) {
          counter = &stats_.releases.overdue;
        } else {
          continue;
        }
        released.emplace_back(unit, counter);
        // Unacknowledged: only if the client took work sent after it (a client that stopped takes nothing).
        const TimePoint since = lease.sent ? lease.sent_at : lease.leased_at;
        if (!lease.worker_id.empty() && OthersDeliveredSinceLocked(r, lease.worker_id, since)) {
          struck.push_back(lease.worker_id);
        }
      }
      for (auto [unit, counter] : released) ReleaseLocked(r, unit, counter);
      if (r.session_live && now - r.last_heard > options_.client_timeout) {
        STOKER_LOG(kWarning) << "client " << ViewLocked(job, rank).client_id << " of job " << name << " rank "
                             << rank << " timed out; the rank is free";
        r.session_live = false;
        AnswerParkedEmptyLocked(r, false);
      }
    }
    std::sort(struck.begin(), struck.end());
    struck.erase(std::unique(struck.begin(), struck.end()), struck.end());
    for (const std::string& worker_id : struck) StrikeLocked(name, job, worker_id, now);
  }
  ServeAllJobsLocked();
  for (auto& [name, job] : jobs_) {
    for (RankRuntime& r : job.ranks) ExpireParkedLocked(r, now);
  }
}

std::vector<DeferredLeaseReply> CoordinatorImpl::TakeDeferredReplies() {
  MutexLock lock(mu_);
  std::vector<DeferredLeaseReply> out;
  out.swap(deferred_);
  return out;
}

}  // namespace stoker::coordinator
