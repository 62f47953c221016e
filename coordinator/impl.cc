#include "coordinator/impl.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/checkpoint.h"
#include "common/json_writer.h"
#include "common/logging.h"
#include "common/manifest.h"
#include "coordinator/journal.h"

namespace stoker::coordinator {
namespace {

uint32_t ToMs(Duration d) { return static_cast<uint32_t>(ToMillis(d)); }

std::string SecondsAgo(Duration d) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << ToSeconds(d) << " s ago";
  return out.str();
}

}  // namespace

CoordinatorImpl::CoordinatorImpl(const CoordinatorOptions& options, Clock& clock, Journal* journal)
    : options_(options), clock_(clock), journal_(journal) {}

void CoordinatorImpl::ApplyLocked(const Update& update) {
  state_.Apply(update);
  if (journal_ != nullptr) journal_->Append(update);
}

// ---- restart -----------------------------------------------------------------------------------------------

CoordinatorImpl::JobRuntime& CoordinatorImpl::AddJobRuntimeLocked(const JobSpec& spec, uint64_t num_samples) {
  auto plan = Plan::Make(spec, num_samples);
  STOKER_CHECK(plan.ok(), "a job with an impossible plan was recorded: " + plan.status().ToString());
  JobRuntime runtime{*plan, std::vector<RankRuntime>(spec.world_size), {}, SpecFingerprint(spec)};
  return jobs_.emplace(spec.name, std::move(runtime)).first->second;
}

void CoordinatorImpl::Restore(const Update& update) {
  std::lock_guard<std::mutex> lock(mu_);
  state_.Apply(update);
  if (const auto* created = std::get_if<JobCreated>(&update)) {
    AddJobRuntimeLocked(created->spec, created->num_samples);
  } else if (const auto* removed = std::get_if<JobRemoved>(&update)) {
    jobs_.erase(removed->job);
  } else if (const auto* joined = std::get_if<WorkerJoined>(&update)) {
    workers_[joined->worker_id] = {joined->data_endpoint, joined->threads, "", clock_.Now(), false};
  } else if (const auto* left = std::get_if<WorkerLeft>(&update)) {
    workers_.erase(left->worker_id);
  }
}

void CoordinatorImpl::FinishRestore() {
  std::lock_guard<std::mutex> lock(mu_);
  TimePoint now = clock_.Now();
  for (auto& [name, job] : jobs_) {
    const JobRecord& record = *state_.FindJob(name);
    for (uint32_t rank = 0; rank < job.ranks.size(); ++rank) {
      const RankRecord& rr = record.ranks[rank];
      RankRuntime& r = job.ranks[rank];
      r.client_id = rr.client_id;
      r.window = rr.window;
      r.received_watermark = std::min(rr.received, job.plan.total_batches());
      r.consumed = std::min(rr.consumed, r.received_watermark);
      r.next_attempt = std::max<uint64_t>(1, rr.attempts_reserved);
      r.next_unit = r.received_watermark < job.plan.total_batches() ? job.plan.UnitOf(r.received_watermark)
                                                                    : job.plan.total_units();
      r.session_live = false;  // until its client's next heartbeat
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
      uint64_t first = r.next_unit;
      uint64_t end = first;
      for (const auto& [unit, lease] : r.active) end = std::max(end, unit + 1);
      // Units before the last adopted one that nobody reported were leased to workers now gone: redo them.
      for (uint64_t unit = first; unit < end; ++unit) {
        if (r.active.count(unit) == 0 && !CommitIfCompleteLocked(job, r, unit)) {
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
  for (auto& [name, job] : jobs_) {
    for (uint32_t rank = 0; rank < job.ranks.size(); ++rank) ServeParkedLocked(name, job, rank);
  }
}

bool CoordinatorImpl::reconciling() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reconciling_;
}

std::vector<Update> CoordinatorImpl::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.Snapshot();
}

CoordinatorImpl::JobRuntime* CoordinatorImpl::FindJobLocked(const std::string& name) {
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : &it->second;
}

// ---- workers ---------------------------------------------------------------------------------------------------

StatusOr<RegisterWorkerResponse> CoordinatorImpl::RegisterWorker(const RegisterWorkerRequest& request) {
  if (request.data_endpoint.empty()) return InvalidArgumentError("worker " + request.worker_id + ": empty data endpoint");
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = workers_.try_emplace(request.worker_id);
  WorkerRuntime& w = it->second;
  if (inserted || w.data_endpoint != request.data_endpoint || w.threads != std::max<uint32_t>(1, request.threads)) {
    ++membership_version_;
    ApplyLocked(WorkerJoined{request.worker_id, request.data_endpoint, std::max<uint32_t>(1, request.threads)});
  }
  w.data_endpoint = request.data_endpoint;
  w.threads = request.threads == 0 ? 1 : request.threads;
  w.version = request.version;
  w.last_heard = clock_.Now();
  if (inserted) {
    STOKER_LOG(kInfo) << "worker " << request.worker_id << " joined at " << request.data_endpoint << " ("
                      << w.threads << " threads)";
  }
  return RegisterWorkerResponse{ToMs(options_.heartbeat_interval), ToMs(options_.lease_ttl)};
}

StatusOr<WorkerHeartbeatResponse> CoordinatorImpl::WorkerHeartbeat(const WorkerHeartbeatRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  auto wit = workers_.find(request.worker_id);
  if (wit == workers_.end()) {
    return FailedPreconditionError("worker " + request.worker_id + " is not registered (coordinator restarted or "
                                   "it timed out): register again");
  }
  TimePoint now = clock_.Now();
  wit->second.last_heard = now;
  if (request.draining && !wit->second.draining) {
    STOKER_LOG(kInfo) << "worker " << request.worker_id << " is draining";
  }
  wit->second.draining = request.draining;
  capacity_.Worker(request.worker_id, wit->second.threads, request.busy_seconds, request.samples_made, now);
  WorkerHeartbeatResponse response;
  for (const LeaseRef& ref : request.leases) {
    JobRuntime* job = FindJobLocked(ref.job);
    ActiveLease* lease = nullptr;
    if (job != nullptr && ref.rank < job->ranks.size()) {
      auto& active = job->ranks[ref.rank].active;
      auto it = active.find(ref.unit);
      if (it != active.end() && it->second.attempt == ref.attempt && it->second.worker_id == request.worker_id) {
        lease = &it->second;
      }
    }
    if (lease == nullptr && reconciling_ && job != nullptr && ref.rank < job->ranks.size() &&
        ref.unit < job->plan.total_units()) {
      // After a restart: a lease handed out before it, still being worked on. Keep it rather than redo it.
      RankRuntime& r = job->ranks[ref.rank];
      if (r.active.count(ref.unit) == 0 && ref.attempt < r.next_attempt &&
          job->plan.UnitEnd(ref.unit) > r.received_watermark) {
        r.active[ref.unit] = ActiveLease{ref.attempt, request.worker_id, now + options_.lease_ttl, false, {}};
        r.pending.erase(ref.unit);
        ++stats_.leases_adopted;
        continue;
      }
    }
    if (lease == nullptr) {
      response.revoked.push_back(ref);  // re-leased elsewhere, committed, or from a reset session
    } else if (!lease->sent) {
      lease->expiry = now + options_.lease_ttl;
    }
  }
  return response;
}

void CoordinatorImpl::ReleaseLocked(RankRuntime& r, uint64_t unit, uint64_t* counter) {
  r.active.erase(unit);
  r.pending.insert(unit);
  ++*counter;
}

void CoordinatorImpl::RemoveWorkerLocked(const std::string& worker_id, uint64_t* counter) {
  // Forget the worker first, so the parked requests served below can never be its own.
  workers_.erase(worker_id);
  capacity_.ForgetWorker(worker_id);
  ++membership_version_;
  ApplyLocked(WorkerLeft{worker_id});
  for (auto& [name, job] : jobs_) {
    for (uint32_t rank = 0; rank < job.ranks.size(); ++rank) {
      RankRuntime& r = job.ranks[rank];
      std::vector<uint64_t> lost;
      for (const auto& [unit, lease] : r.active) {
        // Units it already sent wait for the client's ack (or the ack timeout); the rest are redone elsewhere.
        if (lease.worker_id == worker_id && !lease.sent) lost.push_back(unit);
      }
      for (uint64_t unit : lost) ReleaseLocked(r, unit, counter);
      if (!lost.empty()) ServeParkedLocked(name, job, rank);
    }
  }
}

// ---- leasing ---------------------------------------------------------------------------------------------------

std::vector<uint64_t> CoordinatorImpl::ReceivedInUnitLocked(const JobRuntime& job, const RankRuntime& r,
                                                            uint64_t unit) const {
  Plan::UnitRange range = job.plan.Unit(unit);
  uint64_t first = job.plan.GlobalBatch(range.epoch, range.first_batch);
  std::vector<uint64_t> received;
  for (uint32_t i = 0; i < range.count; ++i) {
    uint64_t g = first + i;
    if (g < r.received_watermark || r.received_above.count(g) != 0) received.push_back(range.first_batch + i);
  }
  return received;
}

bool CoordinatorImpl::CommitIfCompleteLocked(const JobRuntime& job, RankRuntime& r, uint64_t unit) {
  if (ReceivedInUnitLocked(job, r, unit).size() != job.plan.Unit(unit).count) return false;
  r.active.erase(unit);
  r.pending.erase(unit);
  ++stats_.units_committed;
  return true;
}

std::vector<LeaseGrant> CoordinatorImpl::TryLeaseLocked(const std::string& job_name, JobRuntime& job, uint32_t rank,
                                                        const std::string& worker_id, uint32_t max_batches) {
  std::vector<LeaseGrant> grants;
  RankRuntime& r = job.ranks[rank];
  if (!r.session_live || reconciling_) return grants;
  const Plan& plan = job.plan;
  const uint64_t limit = r.consumed + r.window;  // every leased batch must lie below this
  uint32_t budget = max_batches;
  TimePoint now = clock_.Now();

  auto grant = [&](uint64_t unit, std::vector<uint64_t> skip) {
    Plan::UnitRange range = plan.Unit(unit);
    LeaseGrant g;
    g.job = job_name;
    g.rank = rank;
    g.unit = unit;
    g.epoch = range.epoch;
    g.first_batch = range.first_batch;
    g.batch_count = range.count;
    g.attempt = r.next_attempt++;
    g.skip = std::move(skip);
    g.ttl_ms = ToMs(options_.lease_ttl);
    g.client_id = r.client_id;
    g.spec_fingerprint = job.spec_fingerprint;
    const RankRecord& record = state_.FindJob(job_name)->ranks[rank];
    if (r.next_attempt > record.attempts_reserved) {
      ApplyLocked(AttemptsReserved{job_name, rank, r.next_attempt + options_.attempt_block});
    }
    r.active[unit] = ActiveLease{g.attempt, worker_id, now + options_.lease_ttl, false, {}};
    ++stats_.leases_granted;
    grants.push_back(std::move(g));
  };

  // Units handed back come first: they are the oldest, and the client is waiting for them.
  for (auto it = r.pending.begin(); it != r.pending.end() && budget > 0;) {
    uint64_t unit = *it;
    if (plan.UnitEnd(unit) > limit) break;
    std::vector<uint64_t> skip = ReceivedInUnitLocked(job, r, unit);
    uint32_t todo = plan.Unit(unit).count - static_cast<uint32_t>(skip.size());
    if (todo == 0) {  // everything arrived after all: commit instead
      it = r.pending.erase(it);
      ++stats_.units_committed;
      continue;
    }
    if (todo > budget) break;
    it = r.pending.erase(it);
    budget -= todo;
    grant(unit, std::move(skip));
  }
  while (budget > 0 && r.next_unit < plan.total_units()) {
    uint64_t unit = r.next_unit;
    if (plan.UnitEnd(unit) > limit) break;
    std::vector<uint64_t> skip = ReceivedInUnitLocked(job, r, unit);
    uint32_t todo = plan.Unit(unit).count - static_cast<uint32_t>(skip.size());
    if (todo > budget) break;
    ++r.next_unit;
    if (todo == 0) continue;  // received before this session started leasing it
    budget -= todo;
    grant(unit, std::move(skip));
  }
  return grants;
}

StatusOr<std::optional<LeaseResponse>> CoordinatorImpl::RequestLease(const std::string& peer, uint64_t request_id,
                                                                      const LeaseRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  auto wit = workers_.find(request.worker_id);
  if (wit == workers_.end()) {
    return FailedPreconditionError("worker " + request.worker_id + " is not registered: register again");
  }
  wit->second.last_heard = clock_.Now();
  JobRuntime* job = FindJobLocked(request.job);
  if (job == nullptr) return NotFoundError("unknown job '" + request.job + "'");
  if (request.rank >= job->ranks.size()) {
    return InvalidArgumentError("job '" + request.job + "' has " + std::to_string(job->ranks.size()) +
                                " ranks; rank " + std::to_string(request.rank) + " does not exist");
  }
  RankRuntime& r = job->ranks[request.rank];
  LeaseResponse response;
  response.job_done = r.received_watermark >= job->plan.total_batches();
  if (wit->second.draining || response.job_done || request.max_batches == 0) return std::optional(response);
  ServeParkedLocked(request.job, *job, request.rank);
  response.leases = TryLeaseLocked(request.job, *job, request.rank, request.worker_id, request.max_batches);
  if (!response.leases.empty() || request.wait_ms == 0) return std::optional(response);
  Duration wait = std::min<Duration>(Millis(request.wait_ms), options_.max_lease_wait);
  r.parked.push_back({peer, request_id, request.worker_id, request.max_batches, clock_.Now() + wait});
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
      deferred_.push_back({it->peer, it->worker_id, it->request_id, LeaseResponse{}});
      it = r.parked.erase(it);
      continue;
    }
    std::vector<LeaseGrant> grants = TryLeaseLocked(job_name, job, rank, it->worker_id, it->max_batches);
    if (grants.empty()) {
      ++it;
      continue;
    }
    deferred_.push_back({it->peer, it->worker_id, it->request_id, LeaseResponse{std::move(grants), false}});
    it = r.parked.erase(it);
  }
}

void CoordinatorImpl::AnswerParkedEmptyLocked(RankRuntime& r, bool job_done) {
  for (const ParkedRequest& p : r.parked) {
    deferred_.push_back({p.peer, p.worker_id, p.request_id, LeaseResponse{{}, job_done}});
  }
  r.parked.clear();
}

Status CoordinatorImpl::UnitDone(const UnitDoneRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  JobRuntime* job = FindJobLocked(request.job);
  if (job == nullptr) return NotFoundError("unknown job '" + request.job + "'");
  if (request.rank >= job->ranks.size() || request.unit >= job->plan.total_units()) {
    return InvalidArgumentError("unit " + std::to_string(request.unit) + " of rank " + std::to_string(request.rank) +
                                " does not exist in job '" + request.job + "'");
  }
  // Quarantine reports describe the input, which is the same whichever attempt read it: keep them all.
  uint32_t epoch = job->plan.Unit(request.unit).epoch;
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
      CommitIfCompleteLocked(*job, r, request.unit);
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

// ---- clients ---------------------------------------------------------------------------------------------------

StatusOr<CoordinatorImpl::JobRuntime*> CoordinatorImpl::CreateJobLocked(const JobSpec& requested) {
  STOKER_RETURN_IF_ERROR(requested.Validate());
  auto manifest = Manifest::Open(requested.manifest_path, options_.manifest_root);
  if (!manifest.ok()) {
    return Status(manifest.status().code() == StatusCode::kNotFound ? StatusCode::kFailedPrecondition
                                                                     : manifest.status().code(),
                  "job '" + requested.name + "': the coordinator cannot use the manifest: " +
                      manifest.status().message());
  }
  JobSpec spec = requested;
  if (spec.manifest_fingerprint != 0 && spec.manifest_fingerprint != (*manifest)->fingerprint()) {
    return FailedPreconditionError("job '" + spec.name + "': manifest " + spec.manifest_path +
                                   " is not the one the job was created with (fingerprint differs)");
  }
  spec.manifest_fingerprint = (*manifest)->fingerprint();
  STOKER_ASSIGN_OR_RETURN(Plan plan, Plan::Make(spec, (*manifest)->num_samples()));
  ApplyLocked(JobCreated{spec, (*manifest)->num_samples()});
  JobRuntime& runtime = AddJobRuntimeLocked(spec, (*manifest)->num_samples());
  STOKER_LOG(kInfo) << "job " << spec.name << " created: " << (*manifest)->num_samples() << " samples, "
                    << spec.world_size << " ranks x batch " << spec.batch_size << ", " << plan.steps_per_epoch()
                    << " steps per epoch, " << spec.epochs << " epochs";
  return &runtime;
}

std::vector<WorkerInfo> CoordinatorImpl::WorkerListLocked() const {
  std::vector<WorkerInfo> list;
  for (const auto& [id, w] : workers_) list.push_back({id, w.data_endpoint});
  return list;
}

StatusOr<RegisterClientResponse> CoordinatorImpl::RegisterClient(const RegisterClientRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  JobRuntime* job = FindJobLocked(request.job);
  if (job == nullptr) {
    if (!request.spec.has_value()) {
      return NotFoundError("unknown job '" + request.job + "' (the first client of a job must send its spec)");
    }
    if (request.spec->name != request.job) {
      return InvalidArgumentError("job name '" + request.job + "' differs from the spec's '" + request.spec->name + "'");
    }
    STOKER_ASSIGN_OR_RETURN(job, CreateJobLocked(*request.spec));
  }
  const JobRecord& record = *state_.FindJob(request.job);
  if (request.spec.has_value()) {
    std::vector<std::string> diff = request.spec->Differences(record.spec);
    if (!diff.empty()) {
      std::string message = "job '" + request.job + "' already exists with a different spec:";
      for (const auto& d : diff) message += " " + d + ";";
      return FailedPreconditionError(message);
    }
  }
  if (request.rank >= job->ranks.size()) {
    return InvalidArgumentError("job '" + request.job + "' has ranks 0.." + std::to_string(job->ranks.size() - 1) +
                                "; rank " + std::to_string(request.rank) + " does not exist");
  }
  if (request.window < record.spec.batches_per_unit) {
    return InvalidArgumentError("a client window of " + std::to_string(request.window) +
                                " batches cannot hold one unit of " + std::to_string(record.spec.batches_per_unit));
  }
  RankRuntime& r = job->ranks[request.rank];
  TimePoint now = clock_.Now();
  const uint64_t total = job->plan.total_batches();
  if (request.resume.has_value()) {
    uint64_t expected = SpecFingerprint(record.spec);
    if (request.resume->spec_fingerprint != expected) {
      return FailedPreconditionError("the checkpoint was taken in a different job spec or dataset than job '" +
                                     request.job + "' now has (spec fingerprint " +
                                     std::to_string(request.resume->spec_fingerprint) + ", the job's is " +
                                     std::to_string(expected) + "): resuming would deliver different data");
    }
    if (request.resume->position > total) {
      return InvalidArgumentError("checkpoint position " + std::to_string(request.resume->position) +
                                  " is past the job's end (" + std::to_string(total) + " batches per rank)");
    }
  }
  bool same_client = r.client_id == request.client_id;
  if (same_client && !request.resume.has_value()) {
    // A retry of this client's registration, or the client coming back after a coordinator restart or a pause:
    // its session goes on where it was.
    if (!r.session_live) {
      r.session_live = true;
      ++stats_.sessions_resumed;
      STOKER_LOG(kInfo) << "client " << request.client_id << " resumed its session of rank " << request.rank
                        << " of job " << request.job;
    }
  } else {
    if (r.session_live && !same_client && !request.resume.has_value()) {
      return AlreadyExistsError("rank " + std::to_string(request.rank) + " of job '" + request.job +
                                "' is held by client " + r.client_id + " (last heard " +
                                SecondsAgo(now - r.last_heard) + ")");
    }
    if (r.session_live && !same_client) {
      STOKER_LOG(kWarning) << "client " << request.client_id << " resumes rank " << request.rank << " of job "
                           << request.job << " from a checkpoint, taking it over from client " << r.client_id;
    }
    // A new session starts at the checkpoint, or where the rank's last client had consumed to; every lease of
    // the old session is void (new leases get higher attempts, so stale copies are fenced).
    const RankRecord& rank_record = record.ranks[request.rank];
    uint64_t start = request.resume.has_value() ? request.resume->position : std::min(rank_record.consumed, total);
    ApplyLocked(RankSessionStarted{request.job, request.rank, request.client_id, start, request.window});
    stats_.releases.session_reset += r.active.size() + r.pending.size();
    AnswerParkedEmptyLocked(r, false);
    r.active.clear();
    r.pending.clear();
    r.received_above.clear();
    r.received_watermark = start;
    r.consumed = start;
    r.next_unit = start < total ? job->plan.UnitOf(start) : job->plan.total_units();
    r.next_attempt = std::max(r.next_attempt, state_.FindJob(request.job)->ranks[request.rank].attempts_reserved);
    r.client_id = request.client_id;
    r.session_live = true;
    STOKER_LOG(kInfo) << "client " << request.client_id << " holds rank " << request.rank << " of job "
                      << request.job << " from batch " << start;
  }
  r.window = request.window;
  r.last_heard = now;
  RegisterClientResponse response;
  response.spec = record.spec;
  response.steps_per_epoch = job->plan.steps_per_epoch();
  response.samples_per_epoch = job->plan.num_samples();
  response.start_batch = state_.FindJob(request.job)->ranks[request.rank].start_batch;
  response.heartbeat_interval_ms = ToMs(options_.heartbeat_interval);
  response.workers = WorkerListLocked();
  response.membership_version = membership_version_;
  ServeParkedLocked(request.job, *job, request.rank);
  return response;
}

StatusOr<ClientHeartbeatResponse> CoordinatorImpl::ClientHeartbeat(const ClientHeartbeatRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  JobRuntime* job = FindJobLocked(request.job);
  if (job == nullptr) return NotFoundError("unknown job '" + request.job + "'");
  if (request.rank >= job->ranks.size()) return InvalidArgumentError("rank out of range");
  RankRuntime& r = job->ranks[request.rank];
  if (r.client_id != request.client_id) {
    return AbortedError("client " + request.client_id + " does not hold rank " + std::to_string(request.rank) +
                        " of job '" + request.job + "' (another client took it): register again");
  }
  if (!r.session_live) {
    // Its last holder, heard again after the coordinator restarted or after a pause: the session goes on.
    r.session_live = true;
    ++stats_.sessions_resumed;
    STOKER_LOG(kInfo) << "client " << request.client_id << " is back on rank " << request.rank << " of job "
                      << request.job;
  }
  const uint64_t total = job->plan.total_batches();
  if (request.received_above.size() > r.window + 1u || request.received_watermark > total ||
      request.consumed > request.received_watermark) {
    return InvalidArgumentError("inconsistent ack from " + request.client_id);
  }
  r.last_heard = clock_.Now();
  capacity_.Client(request.job, request.rank, request.client_id, request.step_seconds, request.stall_seconds,
                   request.samples_delivered, r.last_heard);
  bool consumed_advanced = request.consumed > r.consumed;
  bool received_advanced = request.received_watermark > r.received_watermark;
  r.consumed = std::max(r.consumed, request.consumed);
  r.received_watermark = std::max(r.received_watermark, request.received_watermark);
  r.received_above.clear();
  for (uint64_t g : request.received_above) {
    if (g > r.received_watermark && g < total) r.received_above.insert(g);
  }
  std::vector<uint64_t> units;
  for (const auto& [unit, lease] : r.active) units.push_back(unit);
  for (uint64_t unit : units) CommitIfCompleteLocked(*job, r, unit);
  if (consumed_advanced || received_advanced) {
    ApplyLocked(RankProgress{request.job, request.rank, r.received_watermark, r.consumed});
  }
  if (consumed_advanced) ServeParkedLocked(request.job, *job, request.rank);
  if (r.received_watermark >= total) AnswerParkedEmptyLocked(r, true);

  ClientHeartbeatResponse response;
  response.membership_version = membership_version_;
  if (request.membership_version != membership_version_) {
    response.workers_changed = true;
    response.workers = WorkerListLocked();
  }
  for (const auto& [unit, lease] : r.active) response.leases.push_back({request.job, request.rank, unit, lease.attempt});
  return response;
}

StatusOr<JobSpec> CoordinatorImpl::GetJob(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  const JobRecord* record = state_.FindJob(name);
  if (record == nullptr) return NotFoundError("unknown job '" + name + "'");
  return record->spec;
}

Status CoordinatorImpl::Deregister(const DeregisterRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (workers_.count(request.sender_id) != 0) {
    STOKER_LOG(kInfo) << "worker " << request.sender_id << " left";
    RemoveWorkerLocked(request.sender_id, &stats_.releases.drain);
    return Status::Ok();
  }
  JobRuntime* job = FindJobLocked(request.job);
  if (job != nullptr && request.rank < job->ranks.size()) {
    RankRuntime& r = job->ranks[request.rank];
    if (r.session_live && r.client_id == request.sender_id) {
      r.session_live = false;
      AnswerParkedEmptyLocked(r, false);
      STOKER_LOG(kInfo) << "client " << request.sender_id << " released rank " << request.rank << " of job "
                        << request.job;
      return Status::Ok();
    }
  }
  return NotFoundError(request.sender_id + " holds nothing to deregister");
}

// ---- time ------------------------------------------------------------------------------------------------------

void CoordinatorImpl::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  TimePoint now = clock_.Now();
  if (reconciling_ && now >= reconcile_until_) EndReconcileLocked();
  if (now >= next_capacity_prune_) {
    capacity_.Prune(now);
    next_capacity_prune_ = now + Millis(5000);
  }
  std::vector<std::string> lost_workers;
  for (const auto& [id, w] : workers_) {
    if (now - w.last_heard > options_.lease_ttl) lost_workers.push_back(id);
  }
  for (const auto& id : lost_workers) {
    STOKER_LOG(kWarning) << "worker " << id << " lost: no heartbeat for " << ToMillis(options_.lease_ttl) << " ms";
    RemoveWorkerLocked(id, &stats_.releases.worker_lost);
  }
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
    ApplyLocked(JobRemoved{name});
    jobs_.erase(name);
    ++stats_.jobs_removed;
  }
  for (auto& [name, job] : jobs_) {
    for (uint32_t rank = 0; rank < job.ranks.size(); ++rank) {
      RankRuntime& r = job.ranks[rank];
      std::vector<std::pair<uint64_t, uint64_t*>> released;
      for (const auto& [unit, lease] : r.active) {
        if (!lease.sent && now > lease.expiry) released.emplace_back(unit, &stats_.releases.lease_expired);
        if (lease.sent && now - lease.sent_at > options_.ack_timeout) released.emplace_back(unit, &stats_.releases.unacked);
      }
      for (auto [unit, counter] : released) ReleaseLocked(r, unit, counter);
      if (r.session_live && now - r.last_heard > options_.client_timeout) {
        STOKER_LOG(kWarning) << "client " << r.client_id << " of job " << name << " rank " << rank
                             << " timed out; the rank is free";
        r.session_live = false;
        AnswerParkedEmptyLocked(r, false);
      }
      ServeParkedLocked(name, job, rank);
      while (!r.parked.empty() && r.parked.front().deadline <= now) {
        deferred_.push_back({r.parked.front().peer, r.parked.front().worker_id, r.parked.front().request_id,
                             LeaseResponse{}});
        r.parked.pop_front();
      }
      // Later entries may have earlier deadlines (different waits): sweep them too.
      for (auto it = r.parked.begin(); it != r.parked.end();) {
        if (it->deadline <= now) {
          deferred_.push_back({it->peer, it->worker_id, it->request_id, LeaseResponse{}});
          it = r.parked.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
}

std::vector<DeferredLeaseReply> CoordinatorImpl::TakeDeferredReplies() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DeferredLeaseReply> out;
  out.swap(deferred_);
  return out;
}

CoordinatorStats CoordinatorImpl::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CoordinatorStats s = stats_;
  s.workers = workers_.size();
  s.jobs = jobs_.size();
  s.live_clients = 0;
  s.units_leased = s.units_sent = s.units_pending = 0;
  for (const auto& [id, w] : workers_) s.workers_draining += w.draining;
  for (const auto& [name, job] : jobs_) {
    JobStats js;
    js.name = name;
    js.ranks = static_cast<uint32_t>(job.ranks.size());
    const Plan& plan = job.plan;
    uint64_t slowest = plan.total_batches();
    for (const RankRuntime& r : job.ranks) {
      s.live_clients += r.session_live;
      js.ranks_held += r.session_live;
      s.units_pending += r.pending.size();
      for (const auto& [unit, lease] : r.active) {
        (lease.sent ? s.units_sent : s.units_leased)++;
        (lease.sent ? js.units_sent : js.units_leased)++;
      }
      uint64_t committed = r.received_watermark >= plan.total_batches() ? plan.total_units()
                                                                          : plan.UnitOf(r.received_watermark);
      js.units_committed += committed;
      slowest = std::min(slowest, r.consumed);
    }
    uint64_t all = plan.total_units() * job.ranks.size();
    js.units_pending = all - std::min(all, js.units_committed + js.units_leased + js.units_sent);
    if (plan.steps_per_epoch() > 0 && plan.epochs() > 0) {
      js.epoch = std::min(plan.EpochOf(slowest), plan.epochs() - 1);
      double done = static_cast<double>(slowest) - static_cast<double>(js.epoch) * plan.steps_per_epoch();
      js.epoch_progress = std::clamp(done / static_cast<double>(plan.steps_per_epoch()), 0.0, 1.0);
    }
    s.job_stats.push_back(std::move(js));
  }
  s.advice = capacity_.Advise(workers_.size() - s.workers_draining, clock_.Now());
  s.reconciling = reconciling_;
  return s;
}

std::string CoordinatorImpl::StateJson() const {
  CoordinatorStats stats = Stats();
  std::lock_guard<std::mutex> lock(mu_);
  const TimePoint now = clock_.Now();
  JsonWriter j;
  j.BeginObject()
      .Key("component").Value("coordinator")
      .Key("reconciling").Value(reconciling_)
      .Key("membership_version").Value(membership_version_)
      .Key("advice").BeginObject()
      .Key("recommended_workers").Value(stats.advice.recommended)
      .Key("demand_samples_per_second").Value(stats.advice.demand < 0 ? NAN : stats.advice.demand)
      .Key("worker_capacity_samples_per_second").Value(stats.advice.per_worker < 0 ? NAN : stats.advice.per_worker)
      .EndObject()
      .Key("workers").BeginArray();
  std::map<std::string, size_t> leases_by_worker;
  for (const auto& [name, job] : jobs_) {
    for (const RankRuntime& r : job.ranks) {
      for (const auto& [unit, lease] : r.active) ++leases_by_worker[lease.worker_id];
    }
  }
  for (const auto& [id, w] : workers_) {
    j.BeginObject()
        .Key("id").Value(id)
        .Key("endpoint").Value(w.data_endpoint)
        .Key("threads").Value(w.threads)
        .Key("version").Value(w.version)
        .Key("draining").Value(w.draining)
        .Key("last_heard_ms_ago").Value(static_cast<int64_t>(ToMillis(now - w.last_heard)))
        .Key("leases").Value(static_cast<uint64_t>(leases_by_worker[id]))
        .EndObject();
  }
  j.EndArray().Key("jobs").BeginArray();
  for (const JobStats& js : stats.job_stats) {
    const JobRuntime& job = jobs_.at(js.name);
    j.BeginObject()
        .Key("name").Value(js.name)
        .Key("epochs").Value(job.plan.epochs())
        .Key("steps_per_epoch").Value(job.plan.steps_per_epoch())
        .Key("batches_per_unit").Value(job.plan.batches_per_unit())
        .Key("epoch").Value(js.epoch)
        .Key("epoch_progress").Value(js.epoch_progress)
        .Key("units").BeginObject()
        .Key("pending").Value(js.units_pending)
        .Key("leased").Value(js.units_leased)
        .Key("sent").Value(js.units_sent)
        .Key("committed").Value(js.units_committed)
        .EndObject()
        .Key("ranks").BeginArray();
    for (const RankRuntime& r : job.ranks) {
      j.BeginObject()
          .Key("client").Value(r.client_id)
          .Key("live").Value(r.session_live)
          .Key("consumed").Value(r.consumed)
          .Key("received_watermark").Value(r.received_watermark)
          .Key("window").Value(r.window)
          .Key("active_leases").Value(static_cast<uint64_t>(r.active.size()))
          .Key("pending_units").Value(static_cast<uint64_t>(r.pending.size()))
          .Key("parked_requests").Value(static_cast<uint64_t>(r.parked.size()))
          .EndObject();
    }
    j.EndArray().EndObject();
  }
  j.EndArray().EndObject();
  return j.str();
}

std::vector<uint64_t> CoordinatorImpl::QuarantinedSamples(const std::string& job_name, uint32_t epoch) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> ids;
  auto job = jobs_.find(job_name);
  if (job == jobs_.end()) return ids;
  auto epoch_it = job->second.quarantined.find(epoch);
  if (epoch_it == job->second.quarantined.end()) return ids;
  for (const auto& [id, report] : epoch_it->second) ids.push_back(id);
  return ids;
}

}  // namespace stoker::coordinator
