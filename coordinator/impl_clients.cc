// CoordinatorImpl, clients: creating a job from the first client's spec, who holds each rank (sessions, takeovers
// from a checkpoint), and the acks that commit units.
#include "coordinator/impl.h"

#include <algorithm>
#include <sstream>

#include "auth/data_tickets.h"
#include "dataset/checkpoint.h"
#include "base/logging.h"
#include "dataset/manifest.h"

namespace stoker::coordinator {
namespace {

std::string SecondsAgo(Duration d) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << ToSeconds(d) << " s ago";
  return out.str();
}

// How fast a client's stage figures may grow: seconds per second since it was last heard (its openers, staging
// thread and copies run in parallel, but not on more than this many threads).
constexpr double kMaxClientStageGrowth = 64;

// Adds to `totals` (the job's client stages) what the stage figures `request` reports grew by since `counted`, the
// part of its client's figures counted so far, `seconds` after the rank was last heard: at most
// kMaxClientStageGrowth x `seconds` (up to a minute) each, the rest counted later, so a client cannot make its job's
// counters grow faster (nor to +Inf). The figures are cumulative since the client's process started: from a client
// other than `of`, the one last heard on the rank (a new session, or any after a coordinator restart), they set where
// counting starts and count nothing; a figure that went back sets it again.
void CountClientStages(std::string& of, std::array<double, ClientHeartbeatRequest::kStages.size()>& counted,
                       const ClientHeartbeatRequest& request, double seconds, double* totals) {
  const auto now = request.StageSeconds();
  if (of != request.client_id) {
    of = request.client_id;
    counted = now;
    return;
  }
  const double allowed = kMaxClientStageGrowth * std::clamp(seconds, 0.0, 60.0);
  for (size_t i = 0; i < now.size(); ++i) {
    if (now[i] < counted[i]) {
      counted[i] = now[i];
      continue;
    }
    const double grew = std::min(now[i] - counted[i], allowed);
    counted[i] += grew;
    totals[i] += grew;
  }
}

// What a client of a plan the job has left is told.
std::string ChangedShape(const JobSpec& spec) {
  return "the job changed shape to " + std::to_string(spec.world_size) + " ranks x " +
         std::to_string(spec.batch_size) + " from epoch " + std::to_string(spec.origin_epoch) + " sample " +
         std::to_string(spec.origin_offset) + ": a rank joins it with a checkpoint token of that point";
}

}  // namespace

// Whether `path` (resolved) lies in one of the resolved `dirs`.
bool CoordinatorImpl::UnderManifestDirs(const std::string& path) const {
  for (const std::string& dir : options_.manifest_dirs) {
    auto real = env_.RealPath(dir);
    if (!real.ok()) continue;  // a directory that is not there holds nothing
    const std::string prefix = real->back() == '/' ? *real : *real + "/";
    if (path.compare(0, prefix.size(), prefix) == 0) return true;
  }
  return false;
}

// What a new job needs of its manifest, read without the mutex held: a manifest of millions of samples takes a
// while to read and check, and every other request would wait behind it. A client names the path, so every
// manifest the coordinator cannot use gets one answer, whatever the reason (missing, unreadable, not a regular
// file, outside --manifest-dirs, not a manifest): what exists where, and what it holds, stays on the coordinator,
// whose log says why.
StatusOr<CoordinatorImpl::ManifestFacts> CoordinatorImpl::ReadManifest(const JobSpec& requested) const {
  STOKER_RETURN_IF_ERROR(requested.Validate());
  auto refuse = [&](const Status& why) {
    const uint64_t refused = ++manifests_refused_;
    if (refused <= 16 || (refused & (refused - 1)) == 0) {
      STOKER_LOG(kWarning) << "job " << requested.name << ": manifest refused: " << why.ToString() << " ("
                           << refused << " refused so far; only the first 16 and then every power of two are logged)";
    }
    return FailedPreconditionError("job '" + requested.name + "': the coordinator cannot use manifest " +
                                   requested.manifest_path + ": it is not a readable stoker manifest" +
                                   (options_.manifest_dirs.empty() ? "" : " under the coordinator's --manifest-dirs") +
                                   " (the coordinator's log says why)");
  };
  std::string path = requested.manifest_path;
  if (!options_.manifest_dirs.empty()) {
    auto real = env_.RealPath(path);
    if (!real.ok()) return refuse(real.status());
    if (!UnderManifestDirs(*real)) return refuse(InvalidArgumentError(*real + " is outside --manifest-dirs"));
    path = *real;  // opened by the path that was checked
  }
  auto manifest = Manifest::Open(env_, path, options_.manifest_root);
  if (!manifest.ok()) return refuse(manifest.status());
  return ManifestFacts{(*manifest)->fingerprint(), (*manifest)->num_samples()};
}

StatusOr<CoordinatorImpl::JobRuntime*> CoordinatorImpl::CreateJobLocked(const JobSpec& requested,
                                                                        const ManifestFacts& manifest,
                                                                        const std::string& team) {
  if (jobs_.size() >= options_.max_jobs) {
    return ResourceExhaustedError("the coordinator holds " + std::to_string(jobs_.size()) +
                                  " jobs, its limit (--max-jobs); finished jobs are forgotten after --job-retention");
  }
  const uint32_t per_team =
      options_.max_jobs_per_team > 0 ? options_.max_jobs_per_team : std::max<uint32_t>(1, options_.max_jobs / 2);
  const size_t of_team = std::count_if(jobs_.begin(), jobs_.end(), [&](const auto& entry) {
    return (entry.second.created_by ? *entry.second.created_by : TeamOfRecord(entry.second)) == team;
  });
  if (of_team >= per_team) {
    return ResourceExhaustedError((team.empty() ? std::string("clients without a team key") : "team '" + team + "'") +
                                  " hold " + std::to_string(of_team) +
                                  " jobs, its limit (--max-jobs-per-team); finished jobs are forgotten after "
                                  "--job-retention");
  }
  if (requested.world_size > options_.max_ranks_per_job) {
    return ResourceExhaustedError("job '" + requested.name + "' asks for " + std::to_string(requested.world_size) +
                                  " ranks; this coordinator allows " + std::to_string(options_.max_ranks_per_job) +
                                  " (--max-ranks-per-job)");
  }
  JobSpec spec = requested;
  if (spec.manifest_fingerprint != 0 && spec.manifest_fingerprint != manifest.fingerprint) {
    return FailedPreconditionError("job '" + spec.name + "': manifest " + spec.manifest_path +
                                   " is not the one the job was created with (fingerprint differs)");
  }
  spec.manifest_fingerprint = manifest.fingerprint;
  STOKER_ASSIGN_OR_RETURN(Plan plan, Plan::Make(spec, manifest.num_samples));
  ApplyLocked(JobCreated{spec, manifest.num_samples});
  JobRuntime& runtime = AddJobRuntimeLocked(spec, manifest.num_samples);
  runtime.created_by = team;
  STOKER_LOG(kInfo) << "job " << spec.name << " created: " << manifest.num_samples << " samples, "
                    << spec.world_size << " ranks x batch " << spec.batch_size << ", " << plan.steps_per_epoch()
                    << " steps per epoch, " << spec.epochs << " epochs";
  return &runtime;
}

// What refuses a registration of an existing job before anything changes: another spec (its shape aside when a
// version 2 checkpoint may resume the job on another one), a rank or window that cannot be.
Status CoordinatorImpl::CheckRegistrationLocked(const RegisterClientRequest& request, const JobRuntime& job,
                                                bool shape_may_change) const {
  STOKER_RETURN_IF_ERROR(CheckLocalGroup(request.local_group));
  const JobSpec& spec = job.record->spec;
  JobSpec shape = spec;
  if (request.spec.has_value()) {
    std::vector<std::string> diff = request.spec->Differences(spec);
    if (shape_may_change) {
      std::erase_if(diff, [](const std::string& d) { return JobSpec::IsShapeField(d); });
      shape.world_size = request.spec->world_size;
      shape.batches_per_unit = request.spec->batches_per_unit;
    }
    if (!diff.empty()) {
      std::string message = "job '" + request.job + "' already exists with a different spec:";
      for (const auto& d : diff) message += " " + d + ";";
      if (std::any_of(diff.begin(), diff.end(), [](const std::string& d) { return JobSpec::IsShapeField(d); })) {
        message += job.record->shape_changes == 0 ? " (a job changes shape when it resumes from a checkpoint)"
                                                  : " (" + ChangedShape(spec) + ")";
      }
      return FailedPreconditionError(message);
    }
    // A client's re-registration carries the spec it registered, origin and all: one of a plan the job left since.
    const bool has_origin = request.spec->origin_epoch != 0 || request.spec->origin_offset != 0;
    if (!shape_may_change && has_origin &&
        (request.spec->origin_epoch != spec.origin_epoch || request.spec->origin_offset != spec.origin_offset)) {
      return FailedPreconditionError("job '" + request.job + "': " + ChangedShape(spec));
    }
  }
  if (request.rank >= shape.world_size) {
    return InvalidArgumentError("job '" + request.job + "' has ranks 0.." + std::to_string(shape.world_size - 1) +
                                "; rank " + std::to_string(request.rank) + " does not exist");
  }
  if (request.window < shape.batches_per_unit) {
    return InvalidArgumentError("a client window of " + std::to_string(request.window) +
                                " batches cannot hold one unit of " + std::to_string(shape.batches_per_unit));
  }
  if (request.window > options_.max_window) {
    return ResourceExhaustedError("a client window of " + std::to_string(request.window) + " batches is above " +
                                  std::to_string(options_.max_window) + " (--max-window)");
  }
  return Status::Ok();
}

// A session replayed after a restart is its client's until it has been silent for the client timeout, as a live one
// is: another process of the same key could otherwise take the rank before its client's next heartbeat.
bool CoordinatorImpl::HeldLocked(const RankRuntime& r) const {
  return r.session_live || (r.restored && clock_.Now() - r.last_heard <= options_.client_timeout);
}

// A live session is its holder's alone: only the same client of the same identity continues it; nobody takes it
// over, with a checkpoint or without, until it ends (deregistered, or silent for --client-timeout). The exception
// is a live change (ResumePoint::live) by the holder's own team: its trainers agreed that the holder has left.
Status CoordinatorImpl::CheckClaimLocked(const RegisterClientRequest& request, const JobRuntime& job,
                                         const Caller& caller) const {
  const RankRuntime& r = job.ranks[request.rank];
  const RankView view = ViewLocked(job, request.rank);
  const bool same = view.client_id == request.client_id && view.holder == caller.identity &&
                    SessionMatches(view.session_check, request.session);
  const bool held = HeldLocked(r);
  const bool live = request.resume.has_value() && request.resume->live &&
                    FairShare::TeamOf(view.holder) == FairShare::TeamOf(caller.identity);
  if (held && (!same || request.resume.has_value()) && !live) {
    return AlreadyExistsError("rank " + std::to_string(request.rank) + " of job '" + request.job +
                              "' is held by a live client (" + view.client_id + ", last heard " +
                              SecondsAgo(clock_.Now() - r.last_heard) +
                              "); it is free once that client leaves or has been silent for the client timeout");
  }
  return Status::Ok();
}

// A new session starts at `resume_at` (a checkpoint), or where the rank's last client had consumed to; every lease
// of the old session is void (new leases get higher attempts, so stale copies are fenced).
void CoordinatorImpl::StartSessionLocked(const RegisterClientRequest& request, JobRuntime& job, const Caller& caller,
                                         std::optional<uint64_t> resume_at) {
  RankRuntime& r = job.ranks[request.rank];
  const RankView before = ViewLocked(job, request.rank);
  const uint64_t total = job.plan.total_batches();
  const uint64_t start = resume_at.has_value() ? *resume_at : std::min(before.consumed, total);
  if (r.session_live && before.client_id != request.client_id) {  // a live change by its team (CheckClaimLocked)
    STOKER_LOG(kInfo) << "client " << request.client_id << " takes rank " << request.rank << " of job " << request.job
                      << " over from live client " << before.client_id << " (a live shape change)";
  }
  // Without a secret (a client older than this coordinator), the session is bound to its key only.
  if (request.session.empty()) {
    ++stats_.sessions_unbound;
    STOKER_LOG(kWarning) << "client " << request.client_id << " took rank " << request.rank << " of job " << request.job
                         << " without a session secret (an older client): other processes of its key can act for it";
  }
  ApplyLocked(RankSessionStarted{request.job, request.rank, request.client_id, start, request.window, caller.identity,
                                 request.session.empty() ? std::string() : SessionCheck(request.session)});
  stats_.releases.session_reset += r.active.size() + r.pending.size();
  AnswerParkedEmptyLocked(r, false);
  while (!r.active.empty()) DropLocked(r, r.active.begin()->first);
  r.pending.clear();
  r.received_above.clear();
  r.next_unit = start < total ? job.plan.UnitOf(start) : job.plan.total_units();
  r.next_attempt = std::max(r.next_attempt, job.record->ranks[request.rank].attempts_reserved);
  r.session_live = true;
  r.restored = false;
  job.team.reset();  // the rank's holder may be another team's key now
  STOKER_LOG(kInfo) << "client " << request.client_id << " holds rank " << request.rank << " of job " << request.job
                    << " from batch " << start;
}

// A registration that only asks (probe): the job as the request's shape would have it, the shape a checkpoint may
// resume it on. Claims nothing, creates nothing, changes nothing.
StatusOr<RegisterClientResponse> CoordinatorImpl::DescribeLocked(const RegisterClientRequest& request) {
  const JobRuntime* job = FindJobLocked(request.job);
  if (job == nullptr) return NotFoundError("unknown job '" + request.job + "'");
  STOKER_RETURN_IF_ERROR(CheckRegistrationLocked(request, *job, true));
  JobSpec shape = job->record->spec;
  if (request.spec.has_value()) {
    shape.world_size = request.spec->world_size;
    shape.batch_size = request.spec->batch_size;
    shape.batches_per_unit = request.spec->batches_per_unit;
  }
  if (shape.world_size != job->record->spec.world_size || shape.batch_size != job->record->spec.batch_size) {
    shape.origin_epoch = 0;  // (whatever origin a re-plan would give it, the epoch's steps are these)
    shape.origin_offset = 0;
  }
  STOKER_ASSIGN_OR_RETURN(Plan plan, Plan::Make(shape, job->record->num_samples));
  RegisterClientResponse response;
  response.spec = shape;
  response.steps_per_epoch = plan.steps_per_epoch();
  response.samples_per_epoch = plan.num_samples();
  response.start_batch = plan.StartBatch();
  response.heartbeat_interval_ms = static_cast<uint32_t>(ToMillis(options_.heartbeat_interval));
  response.membership_version = membership_version_;
  return response;
}

StatusOr<RegisterClientResponse> CoordinatorImpl::RegisterClient(const RegisterClientRequest& request,
                                                                 const Caller& caller) {
  if (request.probe) {
    MutexLock lock(mu_);
    return DescribeLocked(request);
  }
  std::optional<ManifestFacts> manifest;
  for (;;) {  // at most twice: a job created (or forgotten) while its manifest was read is looked up again
    MutexLock lock(mu_);
    JobRuntime* job = FindJobLocked(request.job);
    if (job == nullptr) {
      if (!request.spec.has_value()) {
        return NotFoundError("unknown job '" + request.job + "' (the first client of a job must send its spec)");
      }
      if (request.spec->name != request.job) {
        return InvalidArgumentError("job name '" + request.job + "' differs from the spec's '" + request.spec->name +
                                    "'");
      }
      if (!manifest.has_value()) {
        lock.Unlock();
        STOKER_ASSIGN_OR_RETURN(manifest, ReadManifest(*request.spec));
        continue;
      }
      STOKER_ASSIGN_OR_RETURN(job, CreateJobLocked(*request.spec, *manifest, FairShare::TeamOf(caller.identity)));
      // A job is created only for a client that then holds a rank of it: one whose registration is refused (a rank
      // the job lacks, a bad window or token) leaves no job behind to take a slot until --job-retention.
      auto registered = RegisterOnJobLocked(request, *job, caller);
      if (!registered.ok()) {
        EraseJobRuntimeLocked(request.job);  // before its record goes: the runtime points into it
        ApplyLocked(JobRemoved{request.job});
      }
      return registered;
    }
    return RegisterOnJobLocked(request, *job, caller);
  }
}

StatusOr<RegisterClientResponse> CoordinatorImpl::RegisterOnJobLocked(const RegisterClientRequest& request,
                                                                      JobRuntime& job_runtime, const Caller& caller) {
  JobRuntime* job = &job_runtime;
  std::optional<CheckpointToken> token;
  if (request.resume.has_value()) {
    STOKER_ASSIGN_OR_RETURN(token, ResumeTokenOf(request));
  }
  STOKER_RETURN_IF_ERROR(CheckRegistrationLocked(request, *job, token.has_value() && token->version == 2));
  STOKER_RETURN_IF_ERROR(CheckSessionSecret(request.session));
  std::optional<uint64_t> resume_at;
  if (token.has_value()) {  // may re-plan the job for the request's shape
    STOKER_ASSIGN_OR_RETURN(resume_at, ResumeStartLocked(request, *token, job, caller));
  }
  STOKER_RETURN_IF_ERROR(CheckClaimLocked(request, *job, caller));
  RankRuntime& r = job->ranks[request.rank];
  const RankView view = ViewLocked(*job, request.rank);
  // A retry of this client's registration, or the client coming back after a coordinator restart or a pause: its
  // session goes on where it was. (The same id with another window is a new process reusing the id: a new session.)
  // Only with the session's secret: another process of the same key knows the id (/state lists it), not that.
  const bool continues = view.client_id == request.client_id && view.holder == caller.identity &&
                         SessionMatches(view.session_check, request.session) && !request.resume.has_value() &&
                         view.window == request.window;
  if (!continues) {
    StartSessionLocked(request, *job, caller, resume_at);
  } else if (!r.session_live) {
    r.session_live = true;
    r.restored = false;
    ++stats_.sessions_resumed;
    STOKER_LOG(kInfo) << "client " << request.client_id << " resumed its session of rank " << request.rank
                      << " of job " << request.job;
  }
  r.last_heard = clock_.Now();
  r.local_group = request.local_group;
  RegisterClientResponse response;
  response.spec = job->record->spec;
  response.steps_per_epoch = job->plan.steps_per_epoch();
  response.samples_per_epoch = job->plan.num_samples();
  response.start_batch = job->record->ranks[request.rank].start_batch;
  response.heartbeat_interval_ms = static_cast<uint32_t>(ToMillis(options_.heartbeat_interval));
  response.workers = WorkerListLocked(caller.identity, r.local_group);
  response.membership_version = membership_version_;
  ServeParkedLocked(request.job, *job, request.rank);
  return response;
}

StatusOr<ClientHeartbeatResponse> CoordinatorImpl::ClientHeartbeat(const ClientHeartbeatRequest& request,
                                                                   const Caller& caller) {
  MutexLock lock(mu_);
  JobRuntime* job = FindJobLocked(request.job);
  if (job == nullptr) return NotFoundError("unknown job '" + request.job + "'");
  if (request.rank >= job->ranks.size()) {
    return AbortedError("job '" + request.job + "' has " + std::to_string(job->ranks.size()) + " ranks now (it " +
                        "changed shape): rank " + std::to_string(request.rank) + " is no longer one of them");
  }
  RankRuntime& r = job->ranks[request.rank];
  const RankView view = ViewLocked(*job, request.rank);
  bool request_list = false;
  STOKER_RETURN_IF_ERROR(CheckLocalGroup(request.local_group));
  if (view.client_id != request.client_id) {
    return AbortedError("client " + request.client_id + " does not hold rank " + std::to_string(request.rank) +
                        " of job '" + request.job + "' (another client took it): register again");
  }
  if (view.holder != caller.identity) {
    return PermissionDeniedError("rank " + std::to_string(request.rank) + " of job '" + request.job +
                                 "' is held under another key");
  }
  if (!SessionMatches(view.session_check, request.session)) {
    return AbortedError("rank " + std::to_string(request.rank) + " of job '" + request.job +
                        "' is held by another session of client " + request.client_id + ": register again");
  }
  if (!r.session_live) {
    // Its last holder, heard again after the coordinator restarted or after a pause: the session goes on.
    r.session_live = true;
    r.restored = false;
    ++stats_.sessions_resumed;
    STOKER_LOG(kInfo) << "client " << request.client_id << " is back on rank " << request.rank << " of job "
                      << request.job;
  }
  const uint64_t total = job->plan.total_batches();
  if (request.received_above.size() > view.window + 1u || request.received_watermark > total ||
      request.consumed > request.received_watermark) {
    return InvalidArgumentError("inconsistent ack from " + request.client_id);
  }
  if (request.rejected_workers.size() > kMaxRejectedWorkers) {
    return InvalidArgumentError("a heartbeat reports at most " + std::to_string(kMaxRejectedWorkers) + " workers");
  }
  const TimePoint heard_before = r.last_heard;
  r.last_heard = clock_.Now();
  CountClientStages(r.stages_of, r.client_stages, request, ToSeconds(r.last_heard - heard_before),
                    &job->stage_seconds[UnitDoneRequest::kStages.size()]);
  if (r.local_group != request.local_group) {  // a coordinator that restarted learns it again
    r.local_group = request.local_group;
    request_list = true;
  }
  capacity_.Client(request.job, request.rank, request.client_id, request.step_seconds, request.stall_seconds,
                   request.samples_delivered, r.last_heard);
  const bool consumed_advanced = request.consumed > view.consumed;
  const bool received_advanced = request.received_watermark > view.received;
  if (consumed_advanced || received_advanced) {
    ApplyLocked(RankProgress{request.job, request.rank, std::max(view.received, request.received_watermark),
                             std::max(view.consumed, request.consumed)});
  }
  const uint64_t watermark = ViewLocked(*job, request.rank).received;
  r.received_above.clear();
  for (uint64_t g : request.received_above) {
    if (g > watermark && g < total) r.received_above.insert(g);
  }
  std::vector<uint64_t> units;
  for (const auto& [unit, lease] : r.active) units.push_back(unit);
  for (uint64_t unit : units) CommitIfCompleteLocked(*job, request.rank, unit);
  // After the ack: the reported workers' units are leased again with what the client already holds skipped.
  for (const std::string& worker_id : request.rejected_workers) {
    ReportWorkerLocked(request.job, *job, worker_id, request.client_id);
  }
  if (consumed_advanced) ServeParkedLocked(request.job, *job, request.rank);
  if (watermark >= total) AnswerParkedEmptyLocked(r, true);

  ClientHeartbeatResponse response;
  response.membership_version = membership_version_;
  if (request.membership_version != membership_version_ || request_list) {
    response.workers_changed = true;
    response.workers = WorkerListLocked(caller.identity, r.local_group);
  }
  for (const auto& [unit, lease] : r.active) response.leases.push_back({request.job, request.rank, unit, lease.attempt});
  return response;
}

}  // namespace stoker::coordinator
