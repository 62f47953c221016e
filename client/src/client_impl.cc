// ClientImpl (client_impl.h): claiming the rank, the session with the coordinator (heartbeats, acks, its loss),
// the workers (membership, credits) and what they send.
#include "client/src/client_impl.h"

#include <algorithm>
#include <set>
#include <utility>

#include "auth/data_tickets.h"
#include "base/local_group.h"
#include "base/logging.h"

namespace stoker::client {

namespace {

// A data endpoint this client will connect to: tcp://host:port, at most 256 bytes (the coordinator checks the same);
// ipc:// too when the coordinator itself is reached over ipc:// (local mode: every process is on this host), and a
// node-local worker's socket in this client's local directory, which has no ticket (its trust is the directory's).
Status ValidWorker(const WorkerInfo& info, bool curve, bool ipc, bool node_local) {
  if (node_local) return Status::Ok();
  const bool tcp = info.data_endpoint.rfind("tcp://", 0) == 0;
  if (info.data_endpoint.size() > 256 || !(tcp || (ipc && info.data_endpoint.rfind("ipc:///", 0) == 0))) {
    return InvalidArgumentError("worker " + info.worker_id + " lists a data endpoint that is not tcp://, <= 256 bytes");
  }
  if (curve && (info.data_ticket.size() != 64 || info.data_seal_key.size() != 32)) {
    return InvalidArgumentError("worker " + info.worker_id + " lists no data ticket and seal key for its data port "
                                "(is it --insecure while this client is not, or of an older version?)");
  }
  return Status::Ok();
}

}  // namespace

bool ClientImpl::IsNodeLocal(const WorkerInfo& info) const {
  return !local_group_.empty() && IpcEndpointIn(info.data_endpoint, options_.local_dir);
}

ClientImpl::ClientImpl(const ClientOptions& options, ClientCore& core, bool curve, std::string local_group)
    : options_(options),
      core_(core),
      clock_(core.clock()),
      curve_(curve),
      local_group_(std::move(local_group)),
      session_(NewSessionSecret()),
      session_check_(SessionCheck(session_)),
      tracker_(clock_, kRequestTimeout) {}

ClientImpl::Outbox ClientImpl::TakeOutbox() { return std::exchange(outbox_, Outbox{}); }

uint64_t ClientImpl::Send(RequestBody body) {
  const RequestTracker::Pending& request = tracker_.Add(std::move(body));
  outbox_.requests.push_back(request);
  return request.id;
}

// ---- claiming the rank -----------------------------------------------------------------------------------------

void ClientImpl::Register(const std::optional<ResumePoint>& resume, bool probe) {
  claim_request_ = RegisterClientRequest{core_.client_id(), options_.job, options_.rank, options_.spec,
                                         options_.prefetch, resume, probe, local_group_, session_};
  claim_result_.reset();
  claim_deadline_ = clock_.Now() + options_.claim_timeout;
  StartClaim();
}

// One claim: the registration, sent again while the coordinator does not answer, within the connect timeout.
void ClientImpl::StartClaim() {
  claim_pause_.reset();
  connect_deadline_ = clock_.Now() + options_.connect_timeout;
  SendClaim();
}

void ClientImpl::SendClaim() {
  const TimePoint now = clock_.Now();
  if (now >= connect_deadline_) {
    claim_result_ = DeadlineExceededError("no answer from the coordinator at " + options_.coordinator + " within " +
                                          std::to_string(options_.connect_timeout.count()) + " ms");
    return;
  }
  claim_id_ = Send(claim_request_);
  claim_resend_ = std::min(connect_deadline_, now + kClaimAttempt);
}

void ClientImpl::ClaimReplied(uint64_t request_id, const DecodedReply& reply) {
  if (claim_result_ || claim_pause_) return;  // decided already, or a late answer to an earlier ask
  const StatusCode code = reply.status.code();
  if (code == StatusCode::kUnavailable) {
    if (request_id == claim_id_) SendClaim();  // the coordinator cannot act now: ask again
    return;
  }
  // The rank is held by a live session (a crashed predecessor not yet timed out): ask again until the claim
  // timeout. The coordinator's word decides; nothing here guesses.
  if (code == StatusCode::kAlreadyExists && clock_.Now() < claim_deadline_) {
    claim_pause_ = clock_.Now() + kClaimPause;
    return;
  }
  if (!reply.status.ok()) {
    claim_result_ = reply.status;
  } else if (auto* response = std::get_if<RegisterClientResponse>(&reply.body)) {
    claim_result_ = *response;
  } else {
    claim_result_ = InternalError("coordinator answered registration wrongly");
  }
}

void ClientImpl::TickClaim(TimePoint now) {
  if (claim_result_) return;
  if (claim_pause_) {
    if (now >= *claim_pause_) StartClaim();
  } else if (now >= claim_resend_) {
    SendClaim();
  }
}

// ---- the session -----------------------------------------------------------------------------------------------

void ClientImpl::Start(const RegisterClientResponse& registered) {
  started_ = true;
  const JobSpec& spec = registered.spec;
  // Registering again after a lost session sends the job as registered (its manifest fingerprint and, resumed on
  // another shape, its origin): a coordinator that forgot the job creates it again with the same plan, and one
  // whose job changed shape meanwhile refuses the claim (an attached client's too) instead of giving it a rank of
  // the new plan.
  claim_request_.spec = spec;
  // A worker must be able to hold at least one whole unit for us, or it could never lease one.
  credits_ = std::max(options_.credits_per_worker, spec.batches_per_unit);
  heartbeat_interval_ = Millis(std::max<uint32_t>(50, registered.heartbeat_interval_ms));
  core_.StartHeartbeats(heartbeat_interval_);  // the coordinator just answered the registration
  membership_version_ = registered.membership_version;
  expected_ = BatchExpectation{spec.name,
                               options_.rank,
                               spec.epochs,
                               registered.steps_per_epoch,
                               spec.batch_size,
                               spec.pipeline.output_height,
                               spec.pipeline.output_width,
                               3,
                               options_.payload_frame_bytes,
                               /*sealed=*/curve_,
                               spec.pipeline.DecodesOnGpu()};
  expected_unsealed_ = expected_;
  expected_unsealed_.sealed = false;  // a node-local worker's ipc:// connection
  if (options_.payload_frame_bytes > 0) {
    max_payload_frames_ = static_cast<size_t>(std::max<uint64_t>(1, spec.BatchBytes() / 4096));
  }
  next_heartbeat_ = last_ack_ = clock_.Now();
  last_delivery_ = next_turns_ = clock_.Now();  // a session's first kRotation is its workers' to deliver in
  next_rotation_ = clock_.Now() + kRotationRound;
  UpdateWorkers(registered.workers);
}

void ClientImpl::HandleReply(const DecodedReply& reply) {
  std::optional<RequestTracker::Pending> request = tracker_.Answer(reply.request_id);
  if (!request) return;  // answered already, or given up on
  core_.CoordinatorAnswered();
  if (std::holds_alternative<RegisterClientRequest>(request->body)) {
    if (started_) {
      RegisterReplied(reply);
    } else {
      ClaimReplied(request->id, reply);
    }
  } else if (std::holds_alternative<ClientHeartbeatRequest>(request->body)) {
    HeartbeatReplied(*request, reply);
  }
}

void ClientImpl::Tick() {
  const TimePoint now = clock_.Now();
  if (!started_) {
    TickClaim(now);
    return;
  }
  // Acks go out promptly when something changed (coalesced to one per 2 ms), and as heartbeats regardless.
  if (!session_lost_ && ((core_.AckPending() && now - last_ack_ >= kAckCoalescing) || now >= next_heartbeat_)) {
    SendHeartbeat();
    last_ack_ = now;
    next_heartbeat_ = now + heartbeat_interval_;
  }
  for (const auto& [id, connection] : connections_) {
    if (now - connection.credited >= kCreditRefresh) GiveCredit(id, credits_);
  }
  if (now >= next_rotation_) {
    next_rotation_ = now + kRotationRound;
    RotateWorkers(now);
  }
  for (const RequestTracker::Pending& p : tracker_.TakeExpired()) {
    if (std::holds_alternative<RegisterClientRequest>(p.body)) registering_ = false;
    heartbeat_numbers_.erase(p.id);
  }
}

void ClientImpl::SendHeartbeat() {
  ClientHeartbeatRequest hb;
  hb.client_id = core_.client_id();
  hb.job = options_.job;
  hb.rank = options_.rank;
  hb.membership_version = membership_version_;
  hb.local_group = local_group_;
  hb.rejected_workers = reported_;
  hb.session = session_;
  const uint64_t number = core_.TakeAck(hb);
  heartbeat_numbers_[Send(std::move(hb))] = number;
}

void ClientImpl::RegisterReplied(const DecodedReply& reply) {
  registering_ = false;
  if (!reply.status.ok()) {
    STOKER_LOG(kWarning) << "re-registration refused: " << reply.status.ToString();
    if (reply.status.code() != StatusCode::kUnavailable) {
      // Another client holds the rank now (we were gone too long), or the job is gone: this client's stream has
      // ended. Stop asking workers for batches and tell the application.
      LoseSession(reply.status.WithContext("this client lost its rank"));
    }
  } else if (auto* r = std::get_if<RegisterClientResponse>(&reply.body);
             r != nullptr && SpecFingerprint(r->spec) != SpecFingerprint(core_.spec())) {
    // The job was re-planned while this client was away (a live shape change by its other ranks): this client's
    // plan is not the job's any more. Its rank joins the new shape only with a checkpoint token (a new Client).
    Send(DeregisterRequest{core_.client_id(), options_.job, options_.rank, session_});
    LoseSession(FailedPreconditionError("job '" + options_.job + "' changed shape to " +
                                        std::to_string(r->spec.world_size) + " ranks x " +
                                        std::to_string(r->spec.batch_size) +
                                        ": join it from the agreed checkpoint (a live shape change)"));
  } else if (r != nullptr) {
    core_.ForgetAttempts();  // a new coordinator session: its attempts are the ones that count
    membership_version_ = r->membership_version;
    UpdateWorkers(r->workers);
  }
}

void ClientImpl::HeartbeatReplied(const RequestTracker::Pending& request, const DecodedReply& reply) {
  auto number = heartbeat_numbers_.find(request.id);
  const uint64_t heartbeat = number != heartbeat_numbers_.end() ? number->second : 0;
  if (number != heartbeat_numbers_.end()) heartbeat_numbers_.erase(number);
  if (session_lost_) return;
  if (reply.status.code() == StatusCode::kAborted || reply.status.code() == StatusCode::kNotFound) {
    // The coordinator no longer counts us as the rank's holder (we were silent too long, or it restarted).
    if (!registering_) {
      STOKER_LOG(kWarning) << "session lost (" << reply.status.message() << "); registering again";
      registering_ = true;
      // Without the resume point: this is the same process carrying on, not a restart.
      RegisterClientRequest again = claim_request_;
      again.resume.reset();
      Send(std::move(again));
    }
    return;
  }
  auto* r = std::get_if<ClientHeartbeatResponse>(&reply.body);
  if (!reply.status.ok() || r == nullptr) return;
  if (r->workers_changed) {
    membership_version_ = r->membership_version;
    UpdateWorkers(r->workers);
  }
  core_.NoteLeases(r->leases, heartbeat);
}

void ClientImpl::LoseSession(const Status& why) {
  for (const auto& [id, connection] : connections_) GiveCredit(id, 0);
  for (const auto& [id, connection] : connections_) outbox_.closes.push_back(id);
  connections_.clear();
  listed_.clear();
  session_lost_ = true;
  core_.Fail(why);
}

uint64_t ClientImpl::Leave() {
  for (const auto& [id, connection] : connections_) GiveCredit(id, 0);
  return Send(DeregisterRequest{core_.client_id(), options_.job, options_.rank, session_});
}

// ---- the workers -----------------------------------------------------------------------------------------------

void ClientImpl::UpdateWorkers(const std::vector<WorkerInfo>& list) {
  listed_.clear();
  uint32_t refused = 0;
  for (const WorkerInfo& info : list) {
    if (IsRejected(info.worker_id)) continue;
    if (Status s = ValidWorker(info, curve_, options_.coordinator.rfind("ipc://", 0) == 0, IsNodeLocal(info));
        !s.ok()) {
      STOKER_LOG(kWarning) << s.message();
      ++refused;
      continue;
    }
    listed_.push_back(info);
  }
  std::map<std::string, const WorkerInfo*> present;
  for (const WorkerInfo& info : listed_) present[info.worker_id] = &info;
  for (auto it = connections_.begin(); it != connections_.end();) {
    auto listed = present.find(it->first);
    if (listed == present.end()) {
      outbox_.closes.push_back(it->first);
      it = connections_.erase(it);
      continue;
    }
    // Moved, or registered again by a new process (a new ticket key): opened again there.
    if (listed->second->data_endpoint != it->second.endpoint || listed->second->data_ticket != it->second.ticket) {
      Open(*listed->second);
    }
    ++it;
  }
  std::erase_if(passed_over_, [&](const std::string& id) { return present.count(id) == 0; });
  OpenListed();
  if (refused > 0 || listed_.size() > options_.max_workers) {
    STOKER_LOG(kWarning) << "connected to " << connections_.size() << " of " << list.size() << " listed workers ("
                         << refused << " refused; at most " << options_.max_workers
                         << " at once, ClientOptions.max_workers, and " << kMaxOpensPerRound << " new a second)";
  }
}

const WorkerInfo* ClientImpl::Listed(const std::string& worker_id) const {
  for (const WorkerInfo& info : listed_) {
    if (info.worker_id == worker_id) return &info;
  }
  return nullptr;
}

// Opens listed workers not yet connected nor passed over, in the list's order (the coordinator puts those that
// have delivered first): at most kMaxOpensPerRound, up to max_workers in all.
void ClientImpl::OpenListed() {
  uint32_t opened = 0;
  for (const WorkerInfo& info : listed_) {
    if (opened >= kMaxOpensPerRound || connections_.size() >= options_.max_workers) break;
    if (connections_.count(info.worker_id) != 0 || passed_over_.count(info.worker_id) != 0) continue;
    Open(info);
    ++opened;
  }
  if (opened > 0) NoteWorkers();
}

// A connection to `info` (anew, or again at its new endpoint), credited.
void ClientImpl::Open(const WorkerInfo& info) {
  connections_[info.worker_id] =
      Connection{info.data_endpoint, info.data_ticket, clock_.Now(), clock_.Now(), IsNodeLocal(info)};
  outbox_.opens.push_back(info);
  GiveCredit(info.worker_id, credits_);
}

// Every round (a second): listed workers not yet connected are opened where there is room. While the client is
// starving (no worker delivered for kRotation) with every place taken and listed workers left over, connections
// open that long make room for them, at most kMaxOpensPerRound a round: made-up workers listed first cannot keep a
// client from the ones that work, and a client that is fed never churns its connections.
// Node-local workers keep their place. Once every listed worker has been connected or passed over (or failed to
// open), the next kRotation starts the turns over.
void ClientImpl::RotateWorkers(TimePoint now) {
  if (session_lost_) return;
  auto waiting = [&] {
    size_t n = 0;
    for (const WorkerInfo& info : listed_) {
      n += connections_.count(info.worker_id) == 0 && passed_over_.count(info.worker_id) == 0;
    }
    return n;
  };
  size_t left = waiting();
  if (left == 0 && !passed_over_.empty() && now >= next_turns_) {
    passed_over_.clear();
    next_turns_ = now + kRotation;
    left = waiting();
  }
  if (connections_.size() >= options_.max_workers && left > 0 && now - last_delivery_ >= kRotation) {
    uint32_t closed = 0;
    for (auto it = connections_.begin(); it != connections_.end() && closed < std::min<size_t>(left, kMaxOpensPerRound);) {
      const Connection& c = it->second;
      if (c.local || now - c.opened < kRotation) {
        ++it;
        continue;
      }
      GiveCredit(it->first, 0);
      outbox_.closes.push_back(it->first);
      passed_over_.insert(it->first);
      it = connections_.erase(it);
      ++closed;
    }
    if (closed > 0) next_turns_ = now + kRotation;
  }
  OpenListed();
}

// A worker whose batch was not the plan's (signed by its own session when sealed): its connection goes for good,
// and every heartbeat reports it, so the coordinator leases this job nothing more from it.
void ClientImpl::RejectWorker(const std::string& worker_id) {
  if (worker_id.empty() || IsRejected(worker_id)) return;
  STOKER_LOG(kWarning) << "worker " << worker_id << " sent a batch whose samples are not the plan's: "
                       << "disconnected from it and reported to the coordinator";
  if (rejected_.size() < kMaxRejected) rejected_.insert(worker_id);
  reported_.push_back(worker_id);
  if (reported_.size() > kMaxRejectedWorkers) reported_.erase(reported_.begin());
  if (connections_.count(worker_id) != 0) {
    GiveCredit(worker_id, 0);
    outbox_.closes.push_back(worker_id);
    connections_.erase(worker_id);
  }
  std::erase_if(listed_, [&](const WorkerInfo& info) { return info.worker_id == worker_id; });
  NoteWorkers();
  OpenListed();
}

bool ClientImpl::IsRejected(const std::string& worker_id) const { return rejected_.count(worker_id) != 0; }

void ClientImpl::OpenFailed(const std::string& worker_id, const Status& why) {
  STOKER_LOG(kWarning) << why.message();
  connections_.erase(worker_id);
  passed_over_.insert(worker_id);  // tried again in the next turns, no sooner than kRotation from now
  next_turns_ = clock_.Now() + kRotation;
  NoteWorkers();
}

void ClientImpl::NoteWorkers() {
  std::vector<std::string> endpoints;
  for (const auto& [id, connection] : connections_) endpoints.push_back(id + " " + connection.endpoint);
  core_.NoteWorkers(std::move(endpoints));
}

void ClientImpl::GiveCredit(const std::string& worker_id, uint32_t credits) {
  outbox_.credits.push_back(
      {worker_id, Credit{options_.job, options_.rank, core_.client_id(), credits, options_.payload_frame_bytes,
                         session_check_}});
  auto it = connections_.find(worker_id);
  if (it != connections_.end()) it->second.credited = clock_.Now();
}

void ClientImpl::HandleWorkerMessage(const std::string& worker_id, StatusOr<WorkerMessage> message,
                                     std::vector<zmq::message_t> payload, HostBufferPool::Buffer opened) {
  if (!message.ok()) {
    STOKER_LOG(kDebug) << "dropped a batch: " << message.status().message();
    core_.CountBadFrame();
    return;
  }
  if (auto* error = std::get_if<DataError>(&*message)) {
    WorkerCannotServe(error->status);
    return;
  }
  if (std::holds_alternative<SealWelcome>(*message)) {  // the adapter's business; on an insecure connection, noise
    core_.CountBadFrame();
    return;
  }
  first_worker_error_.reset();
  BatchHeader& header = std::get<BatchHeader>(*message);
  if (!PlannedSamples(header)) {
    // Only a live lease's batch is the sender's lie; another (an old plan's, sent before its lease was revoked, or
    // one whose lease this client has not heard of yet) is only dropped.
    if (core_.CountWrongSamples(header.unit, header.attempt)) RejectWorker(worker_id);
    return;
  }
  last_delivery_ = clock_.Now();
  std::unique_ptr<ReceivedBatch> batch = MakeReceivedBatch(std::move(header), expected_.steps_per_epoch,
                                                           std::move(payload), /*join_frames=*/!core_.stages());
  batch->opened = std::move(opened);
  core_.Accept(std::move(batch));
}

// Whether the batch carries exactly the samples the plan puts at its (epoch, rank, index), with the plan's padding:
// the client's own check, whatever a worker claims.
bool ClientImpl::PlannedSamples(const BatchHeader& h) {
  planned_.resize(h.count);
  core_.plan().BatchSamples(h.epoch, h.rank, h.index, planned_);
  for (uint32_t i = 0; i < h.count; ++i) {
    const bool padding = (h.flags[i] & kSampleFlagPadding) != 0;
    if (planned_[i].sample_id != h.sample_ids[i] || planned_[i].padding != padding) return false;
  }
  return true;
}

// Workers keep saying they cannot serve the job and none has sent a batch since: tell the application rather than
// let it wait forever (e.g. no worker can open the manifest).
void ClientImpl::WorkerCannotServe(const Status& error) {
  core_.CountWorkerError();
  STOKER_LOG(kWarning) << "a worker cannot serve job " << options_.job << ": " << error.ToString();
  const TimePoint now = clock_.Now();
  if (!first_worker_error_) first_worker_error_ = now;
  if (now - *first_worker_error_ > kWorkerErrorGrace) {
    core_.Fail(error.WithContext("no worker can serve this job (for " +
                                 std::to_string(ToMillis(kWorkerErrorGrace) / 1000) + " s)"));
  }
}

}  // namespace stoker::client
