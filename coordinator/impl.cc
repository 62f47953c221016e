#include "coordinator/impl.h"

#include <algorithm>
#include <sstream>

#include "common/logging.h"
#include "common/manifest.h"

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

CoordinatorImpl::CoordinatorImpl(const CoordinatorOptions& options, Clock& clock) : options_(options), clock_(clock) {}

void CoordinatorImpl::ApplyLocked(const Update& update) { state_.Apply(update); }

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
  if (inserted || w.data_endpoint != request.data_endpoint) ++membership_version_;
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
  ++membership_version_;
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
  if (!r.session_live) return grants;
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
  if (r.parked.empty()) {
    response.leases = TryLeaseLocked(request.job, *job, request.rank, request.worker_id, request.max_batches);
    if (!response.leases.empty() || request.wait_ms == 0) return std::optional(response);
  } else if (request.wait_ms == 0) {
    return std::optional(response);
  }
  Duration wait = std::min<Duration>(Millis(request.wait_ms), options_.max_lease_wait);
  r.parked.push_back({peer, request_id, request.worker_id, request.max_batches, clock_.Now() + wait});
  ++stats_.lease_requests_parked;
  return std::optional<LeaseResponse>();
}

void CoordinatorImpl::ServeParkedLocked(const std::string& job_name, JobRuntime& job, uint32_t rank) {
  RankRuntime& r = job.ranks[rank];
  while (!r.parked.empty()) {
    ParkedRequest& p = r.parked.front();
    auto wit = workers_.find(p.worker_id);
    if (wit == workers_.end() || wit->second.draining) {
      deferred_.push_back({p.peer, p.request_id, LeaseResponse{}});
      r.parked.pop_front();
      continue;
    }
    std::vector<LeaseGrant> grants = TryLeaseLocked(job_name, job, rank, p.worker_id, p.max_batches);
    if (grants.empty()) return;
    deferred_.push_back({p.peer, p.request_id, LeaseResponse{std::move(grants), false}});
    r.parked.pop_front();
  }
}

void CoordinatorImpl::AnswerParkedEmptyLocked(RankRuntime& r, bool job_done) {
  for (const ParkedRequest& p : r.parked) deferred_.push_back({p.peer, p.request_id, LeaseResponse{{}, job_done}});
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
  JobRuntime runtime{plan, std::vector<RankRuntime>(spec.world_size), {}};
  auto [it, inserted] = jobs_.emplace(spec.name, std::move(runtime));
  STOKER_LOG(kInfo) << "job " << spec.name << " created: " << (*manifest)->num_samples() << " samples, "
                    << spec.world_size << " ranks x batch " << spec.batch_size << ", " << plan.steps_per_epoch()
                    << " steps per epoch, " << spec.epochs << " epochs";
  return &it->second;
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
  if (r.session_live && r.client_id != request.client_id) {
    return AlreadyExistsError("rank " + std::to_string(request.rank) + " of job '" + request.job +
                              "' is held by client " + r.client_id + " (last heard " +
                              SecondsAgo(now - r.last_heard) + ")");
  }
  if (!(r.session_live && r.client_id == request.client_id)) {
    // A new session starts where the rank's last client had consumed to; every lease of the old one is void.
    const RankRecord& rank_record = record.ranks[request.rank];
    uint64_t start = std::min(rank_record.consumed, job->plan.total_batches());
    ApplyLocked(RankSessionStarted{request.job, request.rank, request.client_id, start});
    stats_.releases.session_reset += r.active.size() + r.pending.size();
    AnswerParkedEmptyLocked(r, false);
    r.active.clear();
    r.pending.clear();
    r.received_above.clear();
    r.received_watermark = start;
    r.consumed = start;
    r.next_unit = start < job->plan.total_batches() ? job->plan.UnitOf(start) : job->plan.total_units();
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
  if (!r.session_live || r.client_id != request.client_id) {
    return AbortedError("client " + request.client_id + " does not hold rank " + std::to_string(request.rank) +
                        " of job '" + request.job + "' (timed out or replaced): register again");
  }
  const uint64_t total = job->plan.total_batches();
  if (request.received_above.size() > r.window + 1u || request.received_watermark > total ||
      request.consumed > request.received_watermark) {
    return InvalidArgumentError("inconsistent ack from " + request.client_id);
  }
  r.last_heard = clock_.Now();
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
  std::vector<std::string> lost_workers;
  for (const auto& [id, w] : workers_) {
    if (now - w.last_heard > options_.lease_ttl) lost_workers.push_back(id);
  }
  for (const auto& id : lost_workers) {
    STOKER_LOG(kWarning) << "worker " << id << " lost: no heartbeat for " << ToMillis(options_.lease_ttl) << " ms";
    RemoveWorkerLocked(id, &stats_.releases.worker_lost);
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
        deferred_.push_back({r.parked.front().peer, r.parked.front().request_id, LeaseResponse{}});
        r.parked.pop_front();
      }
      // Later entries may have earlier deadlines (different waits): sweep them too.
      for (auto it = r.parked.begin(); it != r.parked.end();) {
        if (it->deadline <= now) {
          deferred_.push_back({it->peer, it->request_id, LeaseResponse{}});
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
  s.live_clients = 0;
  s.units_leased = s.units_sent = s.units_pending = 0;
  for (const auto& [name, job] : jobs_) {
    for (const RankRuntime& r : job.ranks) {
      s.live_clients += r.session_live;
      s.units_pending += r.pending.size();
      for (const auto& [unit, lease] : r.active) (lease.sent ? s.units_sent : s.units_leased)++;
    }
  }
  return s;
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
