// CoordinatorImpl, resuming from a checkpoint: where a registration with a token starts, and re-planning a job
// for another shape (ranks x batch size) when the token was written on a different one (docs/design.md, "Resume
// on another shape").
//
// A version 2 token says how much of an epoch's order was trained on: (epoch, offset). A job whose plan has a
// step starting there continues at that step. Otherwise the job is re-planned: its spec takes the registration's
// shape and the token's point as its origin, every rank starts afresh at the new plan's first batch, and every
// lease of the old shape is void (attempts above all the old ones). Only when no client of the job has trained
// since its session began: a stray token cannot take a running job from under its ranks. A live change
// (ResumePoint::live) is the exception: the ranks still training agreed on the point, and their sessions end, but
// only ranks the caller's own team holds, and never a change that other ranks are still joining at another point.
#include <algorithm>

#include "base/logging.h"
#include "coordinator/impl.h"
#include "dataset/checkpoint.h"

namespace stoker::coordinator {
namespace {

std::string Shape(const JobSpec& spec) {
  return std::to_string(spec.world_size) + " ranks x " + std::to_string(spec.batch_size);
}

std::string PointText(const Plan::Point& p) {
  return "epoch " + std::to_string(p.epoch) + " sample " + std::to_string(p.offset);
}

bool SameShape(const JobSpec& a, const JobSpec& b) {
  return a.world_size == b.world_size && a.batch_size == b.batch_size && a.batches_per_unit == b.batches_per_unit;
}

}  // namespace

StatusOr<CheckpointToken> CoordinatorImpl::ResumeTokenOf(const RegisterClientRequest& request) {
  const ResumePoint& resume = *request.resume;
  if (resume.token.empty()) {  // a client that sends the version 1 fields alone
    return MakeCheckpointTokenV1(request.job, request.rank, resume.position, resume.spec_fingerprint);
  }
  STOKER_ASSIGN_OR_RETURN(CheckpointToken token, DecodeCheckpointToken(resume.token));
  if (token.job != request.job) {
    return FailedPreconditionError("the checkpoint is of job '" + token.job + "', not '" + request.job + "'");
  }
  return token;
}

StatusOr<uint64_t> CoordinatorImpl::ResumeStartLocked(const RegisterClientRequest& request,
                                                      const CheckpointToken& token, JobRuntime*& job,
                                                      const Caller& caller) {
  const JobSpec& spec = job->record->spec;
  const bool live = request.resume->live;
  if (live && (token.version != 2 || !request.spec.has_value())) {
    return InvalidArgumentError("a live shape change needs a version 2 checkpoint token and the job's spec (the "
                                "shape it changes to)");
  }
  if (token.version == 1) {
    const uint64_t expected = SpecFingerprint(spec);
    if (token.spec_fingerprint != expected) {
      return FailedPreconditionError("the checkpoint was taken in a different job spec or dataset than job '" +
                                     request.job + "' now has (spec fingerprint " +
                                     std::to_string(token.spec_fingerprint) + ", the job's is " +
                                     std::to_string(expected) +
                                     "): resuming would deliver different data (a version 1 token resumes only on "
                                     "the shape it was written on)");
    }
    if (token.position > job->plan.total_batches()) {
      return InvalidArgumentError("checkpoint position " + std::to_string(token.position) +
                                  " is past the job's end (" + std::to_string(job->plan.total_batches()) +
                                  " batches per rank)");
    }
    return token.position;
  }
  if (std::vector<std::string> diff = ContentDifferences(token, spec); !diff.empty()) {
    std::string message = "the checkpoint does not fit job '" + request.job + "': resuming would deliver different "
                          "data:";
    for (const auto& d : diff) message += " " + d + ";";
    return FailedPreconditionError(message);
  }
  if (token.point.epoch > spec.epochs || (token.point.epoch == spec.epochs && token.point.offset != 0) ||
      (token.point.epoch < spec.epochs && token.point.offset >= job->record->num_samples)) {
    return InvalidArgumentError("checkpoint point (" + PointText(token.point) + ") is past job '" + request.job +
                                "' (" + std::to_string(spec.epochs) + " epochs of " +
                                std::to_string(job->record->num_samples) + " samples)");
  }
  JobSpec shape = spec;
  if (request.spec.has_value()) {
    shape.world_size = request.spec->world_size;
    shape.batch_size = request.spec->batch_size;
    shape.batches_per_unit = request.spec->batches_per_unit;
  }
  if (live) STOKER_RETURN_IF_ERROR(CheckLiveLocked(*job, token));
  if (SameShape(shape, spec)) {
    if (auto at = job->plan.BatchAt(token.point); at.has_value()) {
      if (at != job->plan.StartBatch() && !EveryRankJoinedLocked(*job)) return NotJoinedError(*job, token);
      if (live) STOKER_RETURN_IF_ERROR(CheckNotBehindLocked(*job, request.rank, *at));
      return *at;
    }
  }
  STOKER_RETURN_IF_ERROR(ReshapeLocked(job, shape, token, live ? &caller : nullptr));
  return job->plan.StartBatch();
}

// A live change is the job's ranks' agreement on a point (a version 2 token, ResumeStartLocked checked): it never
// goes back behind the job's last change (a stale token would deal again what was trained on since), and is not
// made from another point while ranks of that change are still joining it (whose steps would count?). From the
// same point the ranks may agree on yet another shape.
Status CoordinatorImpl::CheckLiveLocked(const JobRuntime& job, const CheckpointToken& token) const {
  const JobSpec& spec = job.record->spec;
  const Plan::Point changed_at{spec.origin_epoch, spec.origin_offset};
  const Plan::Point point = Plan::NormalOrigin(spec, job.record->num_samples, token.point);
  if (std::pair(point.epoch, point.offset) < std::pair(changed_at.epoch, changed_at.offset)) {
    return FailedPreconditionError("this checkpoint resumes from " + PointText(token.point) + ", behind job '" +
                                   spec.name + "''s last shape change (from " + PointText(changed_at) +
                                   "): a live change never goes back over what was trained on since");
  }
  const bool joined = EveryRankJoinedLocked(job);
  if (point != changed_at && !joined) return NotJoinedError(job, token);
  // From the change's own point again once every rank has joined it and some trained: those steps would be dealt
  // again. (While a rank has not joined, no step of ranks that step together can have been trained.)
  if (point == changed_at && joined &&
      std::any_of(job.record->ranks.begin(), job.record->ranks.end(),
                  [](const RankRecord& r) { return r.consumed > r.start_batch; })) {
    return FailedPreconditionError("this checkpoint resumes from " + PointText(token.point) + ", where job '" +
                                   spec.name + "' last changed shape, and its ranks have trained since: resume "
                                   "from the point they trained to");
  }
  return Status::Ok();
}

// A live registration of the same shape (a rank taken over) more than a step behind another held rank: a stale
// state, which would deal that rank's trained steps again. (One step behind is a step that failed.)
Status CoordinatorImpl::CheckNotBehindLocked(const JobRuntime& job, uint32_t rank, uint64_t at) const {
  for (uint32_t other = 0; other < job.ranks.size(); ++other) {
    const RankRecord& r = job.record->ranks[other];
    if (other != rank && HeldLocked(job.ranks[other]) && r.consumed > at + 1) {
      return FailedPreconditionError("this checkpoint resumes rank " + std::to_string(rank) + " at batch " +
                                     std::to_string(at) + " and rank " + std::to_string(other) + " of job '" +
                                     job.record->spec.name + "' has consumed to batch " +
                                     std::to_string(r.consumed) + ": resume from the point the ranks trained to");
    }
  }
  return Status::Ok();
}

// After a shape change every rank must resume from the same point: a rank that has not claimed its place in the
// new shape yet and comes with a token of another step would leave the steps between uncovered or covered twice.
bool CoordinatorImpl::EveryRankJoinedLocked(const JobRuntime& job) const {
  return job.record->shape_changes == 0 ||
         std::all_of(job.record->ranks.begin(), job.record->ranks.end(), [](const RankRecord& r) {
           return r.session != 0;
         });
}

Status CoordinatorImpl::NotJoinedError(const JobRuntime& job, const CheckpointToken& token) const {
  return FailedPreconditionError("this checkpoint resumes from " + PointText(token.point) + "; job '" +
                                 job.record->spec.name + "' changed shape to resume from " +
                                 PointText(job.plan.PointOf(job.plan.StartBatch())) +
                                 " and not every rank has joined it: resume every rank from the same checkpoint");
}

Status CoordinatorImpl::ReshapeLocked(JobRuntime*& job, const JobSpec& shape, const CheckpointToken& token,
                                      const Caller* live_caller) {
  const std::string name = job->record->spec.name;
  const uint64_t num_samples = job->record->num_samples;
  if (shape.world_size > options_.max_ranks_per_job) {
    return ResourceExhaustedError("job '" + name + "' asks for " + std::to_string(shape.world_size) +
                                  " ranks; this coordinator allows " + std::to_string(options_.max_ranks_per_job) +
                                  " (--max-ranks-per-job)");
  }
  // A rank whose client is training now keeps the job in its shape, unless the change is live; a live change ends
  // only sessions of the caller's team (another team's key cannot end a job's sessions, trained on or not).
  std::vector<std::string> busy;
  bool others = false;
  for (uint32_t rank = 0; rank < job->ranks.size(); ++rank) {
    const RankRecord& record = job->record->ranks[rank];
    if (!HeldLocked(job->ranks[rank])) continue;
    // (Only live sessions count as training: a session replayed after a restart may have ended before it.)
    if (job->ranks[rank].session_live && record.consumed > record.start_batch) {
      busy.push_back(std::to_string(rank) + " (" + record.client_id + ")");
    }
    others |= live_caller != nullptr && FairShare::TeamOf(record.holder) != FairShare::TeamOf(live_caller->identity);
  }
  if (others) {
    return PermissionDeniedError("job '" + name + "' has ranks of another team training; a live shape change ends "
                                 "only sessions of the caller's team");
  }
  if (!busy.empty() && live_caller == nullptr) {
    std::string list;
    for (const auto& b : busy) list += (list.empty() ? "" : ", ") + b;
    return AlreadyExistsError("job '" + name + "' runs as " + Shape(job->record->spec) + " and its rank" +
                              (busy.size() > 1 ? "s " : " ") + list +
                              " are training; a checkpoint resumes it on another shape once those clients leave or "
                              "have been silent for the client timeout");
  }
  JobSpec spec = shape;
  const Plan::Point origin = Plan::NormalOrigin(spec, num_samples, token.point);
  spec.origin_epoch = origin.epoch;
  spec.origin_offset = origin.offset;
  STOKER_ASSIGN_OR_RETURN(Plan plan, Plan::Make(spec, num_samples));

  // Every lease of the old shape is void: its parked requests are answered, its leases dropped, and the new
  // ranks' attempts start above every attempt the old ones handed out.
  uint64_t floor = 1;
  for (uint32_t rank = 0; rank < job->ranks.size(); ++rank) {
    RankRuntime& r = job->ranks[rank];
    floor = std::max({floor, r.next_attempt, job->record->ranks[rank].attempts_reserved});
    stats_.releases.session_reset += r.active.size() + r.pending.size();
    AnswerParkedEmptyLocked(r, false);
    while (!r.active.empty()) DropLocked(r, r.active.begin()->first);
  }
  const JobSpec old = job->record->spec;
  auto quarantined = std::move(job->quarantined);
  auto reported = std::move(job->reported_workers);  // a liar stays one whatever the shape
  const size_t reports = job->quarantine_reports;
  const std::optional<std::string> created_by = job->created_by;
  ApplyLocked(JobReshaped{spec, floor, job->record->shape_changes + 1});
  job = &AddJobRuntimeLocked(spec, num_samples);
  job->created_by = created_by;  // its team's job slot, as before
  job->quarantined = std::move(quarantined);
  job->reported_workers = std::move(reported);
  job->quarantine_reports = reports;
  quarantine_reports_ += reports;
  for (RankRuntime& r : job->ranks) r.next_attempt = floor;
  job->idle_since.reset();
  ++stats_.shape_changes;
  std::string ended;
  for (const auto& b : busy) ended += (ended.empty() ? "" : ", ") + b;
  if (live_caller != nullptr) ++stats_.live_shape_changes;
  STOKER_LOG(kInfo) << "job " << name << " changed shape" << (live_caller != nullptr ? " live" : "") << ": "
                    << Shape(old) << " -> " << Shape(spec) << " from " << PointText(origin) << " (a checkpoint of rank "
                    << token.rank << " at " << PointText(token.point) << "); "
                    << plan.steps_per_epoch() - plan.FirstBatch(origin.epoch) << " steps of that epoch left"
                    << (ended.empty() ? "" : "; the sessions of rank(s) " + ended + " ended");
  return Status::Ok();
}

}  // namespace stoker::coordinator
