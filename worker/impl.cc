// WorkerImpl (impl.h): the coordinator's replies, jobs, clients' streams, time and draining. The life of a unit
// (leases, builds, routes, reports) is in impl_units.cc.
#include "worker/impl.h"

#include <algorithm>
#include <utility>

#include "auth/data_tickets.h"
#include "base/metrics.h"
#include "wire/frames.h"
#include "base/logging.h"

namespace stoker::worker {

WorkerImpl::WorkerImpl(const WorkerOptions& options, std::string id, uint32_t threads, const Clock& clock,
                       const BuildCounters& counters)
    : options_(options),
      id_(std::move(id)),
      session_(NewSessionSecret()),
      threads_(threads),
      clock_(clock),
      counters_(counters),
      tracker_(clock, options.request_timeout) {}

WorkerImpl::Outbox WorkerImpl::TakeOutbox() {
  Outbox out;
  std::swap(out, outbox_);
  return out;
}

uint64_t WorkerImpl::Send(RequestBody body) {
  const RequestTracker::Pending& request = tracker_.Add(std::move(body));
  outbox_.requests.push_back(request);
  return request.id;
}

// ---- the coordinator -------------------------------------------------------------------------------------------

void WorkerImpl::Register(const std::string& advertised_endpoint, bool data_sealed) {
  advertised_ = advertised_endpoint;
  data_sealed_ = data_sealed;
  SendRegister();
}

void WorkerImpl::SendRegister() {
  Send(RegisterWorkerRequest{id_, advertised_, threads_, GetBuildInfo().version, "", data_sealed_,
                            options_.local_group, session_});
}

void WorkerImpl::SendHeartbeat() {
  WorkerHeartbeatRequest hb{id_, {}, draining_, counters_.busy_ns.load() * 1e-9, counters_.samples.load(), session_};
  for (const auto& [key, unit] : units_) {
    hb.leases.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), unit.lease.attempt});
  }
  Send(std::move(hb));
  next_heartbeat_ = clock_.Now() + heartbeat_interval_;
}

void WorkerImpl::HandleReply(const DecodedReply& reply) {
  // UNAVAILABLE: the coordinator cannot act now (its journal cannot be written). The request stays pending and is
  // handled as unanswered when its deadline passes (sent again, or given up), which paces the retries.
  if (reply.status.code() == StatusCode::kUnavailable) return;
  std::optional<RequestTracker::Pending> request = tracker_.Answer(reply.request_id);
  if (!request) return;  // answered already, or given up on
  const RequestBody& body = request->body;
  const bool heartbeat_or_lease =
      std::holds_alternative<WorkerHeartbeatRequest>(body) || std::holds_alternative<LeaseRequest>(body);
  if (reply.status.code() == StatusCode::kFailedPrecondition && heartbeat_or_lease) {
    // The coordinator does not know us (it lost its journal, or we were silent too long): register again.
    if (registered_) STOKER_LOG(kWarning) << "coordinator forgot this worker: " << reply.status.message();
    registered_ = false;
    if (std::holds_alternative<LeaseRequest>(body)) LeaseAnswered(request->id, {});
    SendRegister();
    return;
  }
  if (std::holds_alternative<RegisterWorkerRequest>(body)) {
    RegisterReplied(reply);
  } else if (std::holds_alternative<WorkerHeartbeatRequest>(body)) {
    HeartbeatReplied(*request, reply);
  } else if (std::holds_alternative<LeaseRequest>(body)) {
    LeaseReplied(*request, reply);
  } else if (std::holds_alternative<UnitDoneRequest>(body)) {
    if (!reply.status.ok() && reply.status.code() != StatusCode::kAborted) {
      STOKER_LOG(kWarning) << "unit done not accepted: " << reply.status.ToString();
    }
  } else if (auto* get = std::get_if<GetJobRequest>(&body)) {
    JobReplied(get->job, reply);
  } else if (std::holds_alternative<DeregisterRequest>(body)) {
    deregistered_ = true;
  }
}

void WorkerImpl::RegisterReplied(const DecodedReply& reply) {
  if (!reply.status.ok()) {
    // ALREADY_EXISTS: this id is still registered at another data port or by another process (a worker restarted
    // with a fixed id) until the coordinator counts that one lost; RESOURCE_EXHAUSTED: the coordinator is full. Both pass:
    // ask again every second. Anything else (a key of the wrong role, a bad endpoint) stays refused.
    const StatusCode code = reply.status.code();
    const bool for_now = code == StatusCode::kAlreadyExists || code == StatusCode::kResourceExhausted;
    if (!for_now) {
      STOKER_LOG(kError) << "registration refused: " << reply.status.ToString();
      return;
    }
    if (!std::exchange(register_refused_, true)) {
      STOKER_LOG(kWarning) << "registration refused for now: " << reply.status.ToString() << " (asking again every "
                           << "second)";
    }
    register_again_ = clock_.Now() + Millis(1000);
    return;
  }
  register_refused_ = false;
  auto* r = std::get_if<RegisterWorkerResponse>(&reply.body);
  if (r == nullptr) return;
  heartbeat_interval_ = Millis(std::max<uint32_t>(50, r->heartbeat_interval_ms));
  if (!r->data_ticket_key.empty()) outbox_.ticket_key = r->data_ticket_key;
  if (!registered_) STOKER_LOG(kInfo) << "registered with " << options_.coordinator << " as " << id_;
  registered_ = true;
  next_heartbeat_ = clock_.Now();
}

void WorkerImpl::HeartbeatReplied(const RequestTracker::Pending& request, const DecodedReply& reply) {
  auto* r = std::get_if<WorkerHeartbeatResponse>(&reply.body);
  if (r == nullptr) return;
  for (const LeaseRef& ref : r->revoked) Revoke({ref.job, ref.rank, ref.unit}, ref.attempt);
  // Renewed: every lease the heartbeat named that the coordinator did not revoke, counted from when the heartbeat
  // left (the coordinator's own expiry runs from when it arrived, which is later).
  for (const LeaseRef& ref : std::get<WorkerHeartbeatRequest>(request.body).leases) {
    auto it = units_.find({ref.job, ref.rank, ref.unit});
    if (it != units_.end() && it->second.lease.attempt == ref.attempt) {
      it->second.expires = std::max(it->second.expires, request.sent + Millis(it->second.lease.ttl_ms));
    }
  }
}

void WorkerImpl::LeaseReplied(const RequestTracker::Pending& request, const DecodedReply& reply) {
  const auto& lease = std::get<LeaseRequest>(request.body);
  if (!reply.status.ok()) {
    STOKER_LOG(kWarning) << "lease for " << lease.job << " rank " << lease.rank
                         << " refused: " << reply.status.ToString();
    HoldStream(request.id, kRefusedLeaseHold);  // asked again no sooner: a refusal is not answered in a loop
    LeaseAnswered(request.id, {});
    if (reply.status.code() == StatusCode::kNotFound) FailJob(lease.job, reply.status);
    return;
  }
  auto* r = std::get_if<LeaseResponse>(&reply.body);
  LeaseResponse response = r ? *r : LeaseResponse{};
  for (const LeaseGrant& grant : response.leases) StartUnit(grant);
  LeaseAnswered(request.id, response);
}

void WorkerImpl::JobReplied(const std::string& job, const DecodedReply& reply) {
  auto* spec = std::get_if<JobSpec>(&reply.body);
  auto held = jobs_.find(job);
  if (held != jobs_.end()) {
    // Asked again for a rank beyond the plan held (CheckCredit). Unless the job changed its spec or is gone, the
    // plan held stays (a failed answer does not fail a job this worker serves) and the waiting streams are refused.
    const bool changed =
        reply.status.ok() && spec != nullptr && held->second->spec_fingerprint != SpecFingerprint(*spec);
    if (!changed && reply.status.code() != StatusCode::kNotFound) {
      fetching_.erase(job);
      DropStreamsBeyondPlan(job);
      return;
    }
  }
  if (!reply.status.ok()) {
    FailJob(job, reply.status);
  } else if (spec != nullptr) {
    // Opening a manifest reads all of it: the adapter does it off its I/O thread and answers with JobLoaded.
    outbox_.loads.push_back(*spec);
  } else {
    FailJob(job, InternalError("the coordinator answered a job request without the job's spec"));
  }
}

void WorkerImpl::RequestExpired(RequestTracker::Pending& request) {
  if (std::holds_alternative<RegisterWorkerRequest>(request.body)) {
    SendRegister();
  } else if (std::holds_alternative<LeaseRequest>(request.body)) {
    LeaseAnswered(request.id, {});
  } else if (auto* get = std::get_if<GetJobRequest>(&request.body)) {
    fetching_.erase(get->job);
    if (jobs_.count(get->job) != 0) {
      DropStreamsBeyondPlan(get->job);  // asked again for a rank beyond its plan, unanswered: refuse the rank
    } else {
      FetchJob(get->job);
    }
  } else if (std::holds_alternative<UnitDoneRequest>(request.body)) {
    Send(std::move(request.body));  // the coordinator must hear it: try again
  }
}

// ---- jobs ------------------------------------------------------------------------------------------------------

void WorkerImpl::FetchJob(const std::string& name) {
  if (jobs_.count(name) != 0 || fetching_.count(name) != 0) return;
  fetching_.insert(name);
  Send(GetJobRequest{id_, name});
}

void WorkerImpl::JobLoaded(const std::string& name, StatusOr<std::shared_ptr<const JobContext>> job) {
  fetching_.erase(name);
  if (!job.ok()) {
    FailJob(name, job.status());
    return;
  }
  jobs_[name] = *job;
  failed_jobs_.erase(name);
  STOKER_LOG(kInfo) << "job " << name << " loaded: " << (*job)->plan.num_samples() << " samples, "
                    << (*job)->plan.world_size() << " ranks";
  DropStreamsBeyondPlan(name);
}

// Streams that waited for the job's spec for a rank it does not have: told so, and dropped.
void WorkerImpl::DropStreamsBeyondPlan(const std::string& name) {
  auto job = jobs_.find(name);
  if (job == jobs_.end()) return;
  std::vector<StreamKey> beyond;
  for (const auto& [key, stream] : streams_) {
    if (std::get<0>(key) == name && std::get<1>(key) >= job->second->plan.world_size()) beyond.push_back(key);
  }
  for (const StreamKey& key : beyond) {
    ++credit_refusals_.malformed;
    outbox_.errors.push_back({streams_[key].peer, DataError{name, std::get<1>(key),
                                                            InvalidArgumentError("job '" + name + "' has no rank " +
                                                                                 std::to_string(std::get<1>(key)))}});
    DropStream(key);
  }
}

// The job cannot be served here: tell its clients, hand back its units, and refuse it for a while.
void WorkerImpl::FailJob(const std::string& name, const Status& status) {
  STOKER_LOG(kWarning) << "job " << name << " unavailable on this worker: " << status.ToString();
  fetching_.erase(name);
  if (failed_jobs_.size() >= kMaxFailedJobs && failed_jobs_.count(name) == 0) {
    // Full: the entry nearest its retry gives way (it would have been tried again soonest anyway).
    auto soonest = std::min_element(failed_jobs_.begin(), failed_jobs_.end(), [](const auto& a, const auto& b) {
      return a.second.retry_at < b.second.retry_at;
    });
    failed_jobs_.erase(soonest);
  }
  failed_jobs_[name] = {status, clock_.Now() + kFailedJobRetry};
  jobs_.erase(name);
  for (auto it = units_.begin(); it != units_.end();) {
    auto next = std::next(it);
    if (std::get<0>(it->first) == name) GiveBack(it, UnitOutcome::kAbandoned);
    it = next;
  }
  for (auto it = streams_.begin(); it != streams_.end();) {
    if (std::get<0>(it->first) == name) {
      outbox_.errors.push_back({it->second.peer, DataError{name, std::get<1>(it->first), status}});
      it = streams_.erase(it);
    } else {
      ++it;
    }
  }
}

// A job no client has asked this worker for in a while releases what it holds (the manifest mapping, open shards):
// a long-running worker serves many jobs over its life.
void WorkerImpl::ForgetIdleJobs(TimePoint now) {
  std::erase_if(failed_jobs_, [now](const auto& entry) { return now >= entry.second.retry_at; });
  std::erase_if(shape_checked_, [now](const auto& entry) { return now - entry.second >= kShapeRecheck; });
  std::set<std::string> active;
  for (const auto& [key, stream] : streams_) active.insert(std::get<0>(key));
  for (const auto& [key, unit] : units_) active.insert(std::get<0>(key));
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (active.count(it->first) != 0) {
      job_last_active_[it->first] = now;
      ++it;
    } else if (now - job_last_active_[it->first] > kJobIdleRelease) {
      STOKER_LOG(kInfo) << "job " << it->first << " idle: released";
      job_last_active_.erase(it->first);
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

// ---- clients' streams ------------------------------------------------------------------------------------------

Status WorkerImpl::CheckCredit(const StreamKey& key, const Credit& credit) {
  if (!IsValidJobName(credit.job) || credit.client_id.size() > 256 ||
      (!credit.session.empty() && credit.session.size() != kSessionCheckBytes)) {
    ++credit_refusals_.malformed;
    return InvalidArgumentError("a credit's job name is 1-64 characters of [A-Za-z0-9._-], its client id at most "
                                "256 bytes and its session check empty or 32 bytes");
  }
  auto failed = failed_jobs_.find(credit.job);
  if (failed != failed_jobs_.end()) {
    if (clock_.Now() < failed->second.retry_at) {
      ++credit_refusals_.failed_job;
      return failed->second.status;
    }
    failed_jobs_.erase(failed);
  }
  if (credit.credits == 0 || streams_.count(key) != 0) return Status::Ok();
  auto job = jobs_.find(credit.job);
  // A new fetch slot is counted over the fetches of jobs not held (a held job's recheck below takes none), and only
  // for a credit that would take one.
  auto fetch_slots_full = [this] {
    return std::count_if(fetching_.begin(), fetching_.end(), [this](const std::string& name) {
             return jobs_.count(name) == 0;
           }) >= static_cast<std::ptrdiff_t>(kMaxJobFetches);
  };
  if (streams_.size() >= kMaxStreams ||
      (job == jobs_.end() && fetching_.count(credit.job) == 0 && fetch_slots_full())) {
    ++credit_refusals_.busy;
    return UnavailableError("this worker holds as many streams or job fetches as it takes: try again");
  }
  if (job != jobs_.end() && credit.rank >= job->second->plan.world_size()) {
    // The job may have been resumed on more ranks since this worker loaded it: ask again (the stream waits for the
    // answer, JobReplied), at most once a kShapeRecheck per job; otherwise the rank does not exist.
    if (fetching_.count(credit.job) != 0) return Status::Ok();
    auto checked = shape_checked_.find(credit.job);
    if (checked == shape_checked_.end() || clock_.Now() - checked->second >= kShapeRecheck) {
      shape_checked_[credit.job] = clock_.Now();
      fetching_.insert(credit.job);
      Send(GetJobRequest{id_, credit.job});
      return Status::Ok();
    }
    ++credit_refusals_.malformed;
    return InvalidArgumentError("job '" + credit.job + "' has no rank " + std::to_string(credit.rank));
  }
  return Status::Ok();
}

void WorkerImpl::HandleCredit(const std::string& peer, const std::string& identity, const Credit& credit) {
  StreamKey key{credit.job, credit.rank, credit.client_id, identity, credit.session};
  if (Status refused = CheckCredit(key, credit); !refused.ok()) {
    outbox_.errors.push_back({peer, DataError{credit.job, credit.rank, refused}});
    return;
  }
  if (credit.credits == 0) {  // withdrawn: the client is leaving
    DropStream(key);
    return;
  }
  Stream& stream = streams_[key];
  stream.peer = peer;
  stream.credits = std::min<uint32_t>(credit.credits, 1024);
  stream.max_frame_bytes =
      credit.max_frame_bytes == 0 ? 0 : std::max<uint64_t>(credit.max_frame_bytes, kMinPayloadFrameBytes);
  stream.refreshed = clock_.Now();
  FetchJob(credit.job);
}

// The client of `key` is gone: its batches cannot be delivered. Hand its units back for re-leasing.
void WorkerImpl::DropStream(const StreamKey& key) {
  for (auto it = units_.begin(); it != units_.end();) {
    auto next = std::next(it);
    if (StreamOf(it->second) == key) GiveBack(it, UnitOutcome::kUndeliverable);
    it = next;
  }
  streams_.erase(key);
}

void WorkerImpl::DropSilentStreams(TimePoint now) {
  std::vector<StreamKey> silent;
  for (const auto& [key, stream] : streams_) {
    if (now - stream.refreshed > options_.credit_ttl) silent.push_back(key);
  }
  for (const auto& key : silent) {
    STOKER_LOG(kInfo) << "client " << std::get<2>(key) << " of " << std::get<0>(key) << " rank " << std::get<1>(key)
                      << " stopped refreshing its credit";
    DropStream(key);
  }
}

WorkerImpl::StreamKey WorkerImpl::StreamOf(const UnitWork& work) const {
  // A node-local worker's port is unsealed: its clients have no authenticated identity there (the socket's directory
  // is the trust), so its streams are keyed without one.
  StreamKey key{work.lease.job, work.lease.rank, work.lease.client_id,
                options_.local_group.empty() ? work.lease.client_identity : std::string(), work.lease.session_check};
  if (!work.lease.session_check.empty()) return key;
  // A session bound to no secret (a client older than sessions, or one restored from a journal older than them):
  // the client's stream whatever check its credits carry, the one credited last if there are several (as before
  // sessions, when the last credit re-pointed the stream).
  auto client_of = [](const StreamKey& k) {
    return std::tie(std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k));
  };
  auto latest = streams_.end();
  for (auto it = streams_.lower_bound(key); it != streams_.end() && client_of(it->first) == client_of(key); ++it) {
    if (latest == streams_.end() || it->second.refreshed > latest->second.refreshed) latest = it;
  }
  return latest != streams_.end() ? latest->first : key;
}

// Batches leased for this stream's client and not yet sent: what its credit is spent on.
uint32_t WorkerImpl::InHand(const StreamKey& key) const {
  uint32_t n = 0;
  for (const auto& [unit_key, work] : units_) {
    if (StreamOf(work) == key) n += work.to_send - work.sent;
  }
  return n;
}

bool WorkerImpl::serving() const {
  for (const auto& [key, stream] : streams_) {
    if (!stream.job_done) return true;
  }
  return false;
}

// ---- time ------------------------------------------------------------------------------------------------------

void WorkerImpl::Tick() {
  const TimePoint now = clock_.Now();
  if (registered_ && now >= next_heartbeat_) SendHeartbeat();
  if (register_again_ && now >= *register_again_) {  // once per refusal: a registration unanswered is sent again
    register_again_.reset();                          // when its request expires
    SendRegister();
  }
  for (RequestTracker::Pending& p : tracker_.TakeExpired()) RequestExpired(p);
  for (auto it = units_.begin(); it != units_.end();) {
    auto next = std::next(it);
    if (now > it->second.expires) Fence(it);
    it = next;
  }
  DropSilentStreams(now);
  if (now >= next_idle_check_) {  // it walks every stream: once a second is plenty for what expires in seconds
    next_idle_check_ = now + kIdleCheckEvery;
    ForgetIdleJobs(now);
  }
  if (registered_ && !draining_) RequestLeases();
}

// ---- draining --------------------------------------------------------------------------------------------------

void WorkerImpl::StartDrain() {
  if (draining_) return;
  draining_ = true;
  drain_deadline_ = clock_.Now() + options_.drain_grace;
  STOKER_LOG(kInfo) << "draining: " << units_.size() << " units in hand, grace " << ToMillis(options_.drain_grace)
                    << " ms";
  SendHeartbeat();  // says `draining`: the coordinator leases nothing new here
}

bool WorkerImpl::DrainDue() const { return draining_ && (units_.empty() || clock_.Now() >= drain_deadline_); }

void WorkerImpl::AbandonAll() {
  if (!units_.empty()) STOKER_LOG(kWarning) << "grace period over: handing back " << units_.size() << " units";
  while (!units_.empty()) GiveBack(units_.begin(), UnitOutcome::kAbandoned);
}

uint64_t WorkerImpl::Deregister() { return Send(DeregisterRequest{id_, "", 0, session_}); }

// ---- state -----------------------------------------------------------------------------------------------------

void WorkerImpl::WriteState(JsonWriter& j) const {
  const TimePoint now = clock_.Now();
  j.Key("storage_hand_backs").Value(storage_hand_backs_).Key("last_storage_failure").Value(last_storage_failure_);
  j.Key("jobs").BeginArray();
  for (const auto& [name, job] : jobs_) j.Value(name);
  j.EndArray().Key("failed_jobs").BeginObject();
  for (const auto& [name, failed] : failed_jobs_) j.Key(name).Value(failed.status.ToString());
  j.EndObject().Key("streams").BeginArray();
  for (const auto& [key, stream] : streams_) {
    j.BeginObject()
        .Key("job").Value(std::get<0>(key))
        .Key("rank").Value(std::get<1>(key))
        .Key("client").Value(std::get<2>(key))
        .Key("identity").Value(std::get<3>(key))
        .Key("session_bound").Value(!std::get<4>(key).empty())  // whether its credits carry a check: never the check
        .Key("credits").Value(stream.credits)
        .Key("in_hand").Value(InHand(key))
        .Key("lease_request_pending").Value(stream.lease_request != 0)
        .Key("job_done").Value(stream.job_done)
        .EndObject();
  }
  j.EndArray().Key("units").BeginArray();
  for (const auto& [key, unit] : units_) {
    j.BeginObject()
        .Key("job").Value(std::get<0>(key))
        .Key("rank").Value(std::get<1>(key))
        .Key("unit").Value(std::get<2>(key))
        .Key("attempt").Value(unit.lease.attempt)
        .Key("sent").Value(unit.sent)
        .Key("to_send").Value(unit.to_send)
        .Key("expires_in_ms").Value(static_cast<int64_t>(ToMillis(unit.expires - now)))
        .EndObject();
  }
  j.EndArray();
}

}  // namespace stoker::worker
