// IoThread (io_thread.h): registration, heartbeats and acks, credits, worker membership, and batch frames.
#include "client/src/io_thread.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <set>

#include "auth/curve.h"
#include "base/logging.h"
#include "wire/frames.h"

namespace stoker::client {

namespace {

int ProcessIoThreads() {
  static const int threads = [] {
    int n = static_cast<int>(std::clamp(std::thread::hardware_concurrency() / 4, 1u, 8u));
    if (const char* env = std::getenv("STOKER_CLIENT_IO_THREADS")) n = std::clamp(std::atoi(env), 1, 64);
    return n;
  }();
  return threads;
}

// The I/O thread for the next worker connection, round robin. libzmq gives a new connection the least loaded
// thread, but load counts registered descriptors, which appear only once a TCP connect completes: connections
// made together all land on one thread, and that one thread then receives (and, with CURVE, decrypts) every batch.
// Measured on the GPU machine: one of four I/O threads at 1.00 core, the others idle.
uint64_t NextIoAffinity() {
  static std::atomic<uint64_t> next{0};
  const int threads = std::min(ProcessIoThreads(), 64);
  return uint64_t{1} << (next.fetch_add(1) % static_cast<uint64_t>(threads));
}

}  // namespace

zmq::context_t& ProcessContext() {
  static zmq::context_t* const context = new zmq::context_t(ProcessIoThreads());
  return *context;
}

IoThread::IoThread(const ClientOptions& options, Security security, std::shared_ptr<ClientCore> core)
    : options_(options),
      security_(std::move(security)),
      core_(std::move(core)),
      clock_(*core_->clock),
      channel_(ProcessContext(), *core_->clock, std::chrono::seconds(5), core_->transport_errors) {}

IoThread::~IoThread() {
  {
    MutexLock lock(core_->mu);
    core_->closing = true;
  }
  core_->stage_wanted.NotifyAll();
  core_->Wake();
  if (thread_.joinable()) thread_.join();
}

StatusOr<RegisterClientResponse> IoThread::Register(const std::optional<ResumePoint>& resume) {
  if (!security_.insecure) {
    std::vector<TrustedKey> coordinators = security_.Trusted(Role::kCoordinator);
    if (coordinators.empty()) return FailedPreconditionError("the trust file has no coordinator key");
    MakeCurveClient(channel_.socket(), security_.own, coordinators.front().public_z85);
  }
  STOKER_RETURN_IF_ERROR(channel_.Connect(options_.coordinator));
  const TimePoint claim_deadline = clock_.Now() + options_.claim_timeout;
  while (true) {
    StatusOr<RegisterClientResponse> result = RegisterOnce(resume);
    // The rank is held by a live session (a crashed predecessor not yet timed out): ask again until the claim
    // timeout. The coordinator's word decides; nothing here guesses.
    if (result.status().code() != StatusCode::kAlreadyExists || clock_.Now() >= claim_deadline) return result;
    zmq::pollitem_t items[] = {{channel_.socket().handle(), 0, ZMQ_POLLIN, 0}};
    STOKER_RETURN_IF_ERROR(PollOnce(items, std::chrono::milliseconds(250)));  // a pause between asks, bounded
    channel_.Receive([](ControlChannel::Pending&, DecodedReply&) {});        // a late reply to an earlier ask
  }
}

// One registration, retried while the coordinator does not answer (within the connect timeout).
StatusOr<RegisterClientResponse> IoThread::RegisterOnce(const std::optional<ResumePoint>& resume) {
  RegisterClientRequest request{core_->client_id, options_.job, options_.rank, options_.spec, options_.prefetch, resume};
  const TimePoint deadline = clock_.Now() + options_.connect_timeout;
  std::optional<StatusOr<RegisterClientResponse>> result;
  while (clock_.Now() < deadline) {
    const uint64_t id = channel_.Send(request);
    const TimePoint attempt_end = std::min(deadline, clock_.Now() + std::chrono::seconds(2));
    while (clock_.Now() < attempt_end && channel_.IsPending(id)) {
      zmq::pollitem_t items[] = {{channel_.socket().handle(), 0, ZMQ_POLLIN, 0}};
      STOKER_RETURN_IF_ERROR(PollOnce(items, std::chrono::milliseconds(50)));
      channel_.Receive([&](ControlChannel::Pending&, DecodedReply& reply) {
        if (!reply.status.ok()) {
          if (reply.status.code() != StatusCode::kUnavailable) result = StatusOr<RegisterClientResponse>(reply.status);
        } else if (auto* response = std::get_if<RegisterClientResponse>(&reply.body)) {
          result = StatusOr<RegisterClientResponse>(*response);
        } else {
          result = StatusOr<RegisterClientResponse>(InternalError("coordinator answered registration wrongly"));
        }
      });
      if (result) return *result;
    }
  }
  return DeadlineExceededError("no answer from the coordinator at " + options_.coordinator + " within " +
                               std::to_string(options_.connect_timeout.count()) + " ms");
}

void IoThread::Start(const RegisterClientResponse& registered) {
  // A worker must be able to hold at least one whole unit for us, or it could never lease one.
  credits_ = std::max(options_.credits_per_worker, registered.spec.batches_per_unit);
  heartbeat_interval_ = Millis(std::max<uint32_t>(50, registered.heartbeat_interval_ms));
  {
    MutexLock lock(core_->mu);
    core_->heartbeat_interval = heartbeat_interval_;
    core_->coordinator_heard = clock_.Now();  // it just answered the registration
  }
  membership_version_ = registered.membership_version;
  const JobSpec& spec = registered.spec;
  expected_ = BatchExpectation{spec.name,
                               options_.rank,
                               spec.epochs,
                               registered.steps_per_epoch,
                               spec.batch_size,
                               spec.pipeline.output_height,
                               spec.pipeline.output_width,
                               3,
                               options_.payload_frame_bytes};
  if (options_.payload_frame_bytes > 0) {
    max_payload_frames_ = static_cast<size_t>(std::max<uint64_t>(1, spec.BatchBytes() / 4096));
  }
  UpdateWorkers(registered.workers);
  thread_ = std::thread([this] { Run(); });
}

void IoThread::Run() {
  ::pthread_setname_np(::pthread_self(), "stoker-io");
  TimePoint next_heartbeat = clock_.Now();
  TimePoint last_ack = next_heartbeat;
  while (true) {
    {
      MutexLock lock(core_->mu);
      if (core_->closing) break;
    }
    Turn(next_heartbeat, last_ack);
  }
  Leave();
}

void IoThread::Turn(TimePoint& next_heartbeat, TimePoint& last_ack) {
  std::vector<zmq::pollitem_t> items;
  items.push_back({channel_.socket().handle(), 0, ZMQ_POLLIN, 0});
  items.push_back({nullptr, core_->doorbell, ZMQ_POLLIN, 0});
  std::vector<WorkerConnection*> order;
  for (auto& [id, w] : workers_) {
    items.push_back({w.socket->handle(), 0, ZMQ_POLLIN, 0});
    order.push_back(&w);
  }
  core_->MarkIoTurn();
  Status polled = PollOnce(items, std::chrono::milliseconds(10));
  if (!polled.ok()) STOKER_LOG(kError) << "client " << polled.ToString();
  if (items[1].revents & ZMQ_POLLIN) {
    uint64_t ignored;
    ssize_t n = ::read(core_->doorbell, &ignored, sizeof(ignored));
    (void)n;  // only wakes the poll
  }
  // Workers first: the coordinator's replies can change the worker list, destroying sockets `order` points to.
  for (size_t i = 0; i < order.size(); ++i) {
    if (items[i + 2].revents & ZMQ_POLLIN) DrainWorker(*order[i]);
  }
  if (items[0].revents & ZMQ_POLLIN) DrainControl();
  const TimePoint now = clock_.Now();
  bool dirty;
  {
    MutexLock lock(core_->mu);
    dirty = core_->ack_dirty;
  }
  // Acks go out promptly when something changed (coalesced to one per 2 ms), and as heartbeats regardless.
  if (!session_lost_ && ((dirty && now - last_ack >= Millis(2)) || now >= next_heartbeat)) {
    SendHeartbeat();
    last_ack = now;
    next_heartbeat = now + heartbeat_interval_;
  }
  for (auto& [id, w] : workers_) {
    if (now - w.credited >= kCreditRefresh) SendCredit(w, credits_);
  }
  for (ControlChannel::Pending& p : channel_.TakeExpired()) {
    if (std::holds_alternative<RegisterClientRequest>(p.body)) registering_ = false;
    heartbeat_numbers_.erase(p.id);
  }
}

// Leaving: withdraw credit so workers stop making batches for us, and free the rank.
void IoThread::Leave() {
  for (auto& [id, w] : workers_) SendCredit(w, 0);
  const uint64_t deregister = channel_.Send(DeregisterRequest{core_->client_id, options_.job, options_.rank});
  const TimePoint deadline = clock_.Now() + Millis(200);
  while (channel_.IsPending(deregister) && clock_.Now() < deadline) {
    zmq::pollitem_t items[] = {{channel_.socket().handle(), 0, ZMQ_POLLIN, 0}};
    if (!PollOnce(items, std::chrono::milliseconds(20)).ok()) break;
    if (items[0].revents & ZMQ_POLLIN) DrainControl();
  }
}

void IoThread::SendHeartbeat() {
  ClientHeartbeatRequest hb;
  hb.client_id = core_->client_id;
  hb.job = options_.job;
  hb.rank = options_.rank;
  hb.membership_version = membership_version_;
  {
    MutexLock lock(core_->mu);
    hb.consumed = core_->window->consumed();
    hb.received_watermark = core_->window->received_watermark();
    hb.received_above.assign(core_->window->received_above().begin(), core_->window->received_above().end());
    hb.step_seconds = core_->stats.step_seconds;
    hb.stall_seconds = core_->stats.stall_seconds;
    hb.samples_delivered = core_->stats.samples_delivered;
    core_->ack_dirty = false;
  }
  const uint64_t number = core_->HeartbeatSent();
  heartbeat_numbers_[channel_.Send(std::move(hb))] = number;
}

void IoThread::SendCredit(WorkerConnection& w, uint32_t credits) {
  zmq::message_t frame = EncodeCredit(
      Credit{options_.job, options_.rank, core_->client_id, credits, options_.payload_frame_bytes});
  try {
    w.socket->send(frame, zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    core_->transport_errors.Note("send_credit", e);
  }
  w.credited = clock_.Now();
}

namespace {

// A data endpoint this client will connect to: tcp://host:port, at most 256 bytes (the coordinator checks the same).
Status ValidWorker(const WorkerInfo& info, bool curve) {
  if (info.data_endpoint.size() > 256 || info.data_endpoint.rfind("tcp://", 0) != 0) {
    return InvalidArgumentError("worker " + info.worker_id + " lists a data endpoint that is not tcp://, <= 256 bytes");
  }
  if (curve && info.data_public_key.size() != 40 && info.data_ticket.size() != 64) {
    return InvalidArgumentError("worker " + info.worker_id + " lists neither a CURVE key nor a data ticket for its "
                                "data port (is it --insecure while this client is not?)");
  }
  return Status::Ok();
}

}  // namespace

// One DEALER to the worker's data port, as a CURVE client of the key the coordinator listed for it. Creating a
// socket can fail (EMFILE: out of file descriptors): an error, never a crash.
Status IoThread::ConnectWorker(const WorkerInfo& info) {
  STOKER_RETURN_IF_ERROR(ValidWorker(info, !security_.insecure));
  WorkerConnection w;
  w.endpoint = info.data_endpoint;
  try {
    w.socket = std::make_unique<zmq::socket_t>(ProcessContext(), zmq::socket_type::dealer);
    SocketOptions o;
    o.max_message_bytes = static_cast<int64_t>(core_->spec.BatchBytes()) + (1 << 20);
    o.receive_hwm = 0;  // the coordinator's window, not a message count, bounds what can arrive
    ConfigureSocket(*w.socket, o);
    w.socket->set(zmq::sockopt::affinity, NextIoAffinity());
    if (!security_.insecure) {
      // A plain data port (the worker's --plain-data) takes this client's ticket, a CURVE port its server key.
      if (!info.data_ticket.empty()) {
        MakePlainClient(*w.socket, security_.own.identity(), info.data_ticket);
      } else {
        MakeCurveClient(*w.socket, security_.own, info.data_public_key);
      }
    }
    w.socket->connect(info.data_endpoint);
  } catch (const zmq::error_t& e) {
    core_->transport_errors.Note("connect_worker", e);
    return UnavailableError("cannot connect to worker " + info.worker_id + ": " + e.what());
  }
  STOKER_LOG(kDebug) << "connected to worker " << info.worker_id << " at " << info.data_endpoint;
  workers_[info.worker_id] = std::move(w);
  SendCredit(workers_[info.worker_id], credits_);
  return Status::Ok();
}

void IoThread::UpdateWorkers(const std::vector<WorkerInfo>& list) {
  std::set<std::string> present;
  uint32_t refused = 0;
  for (const WorkerInfo& info : list) {
    present.insert(info.worker_id);
    auto it = workers_.find(info.worker_id);
    if (it != workers_.end() && it->second.endpoint == info.data_endpoint) continue;
    if (it == workers_.end() && workers_.size() >= options_.max_workers) {
      ++refused;  // every connection is a file descriptor: a list this long would exhaust the process's
      continue;
    }
    if (Status s = ConnectWorker(info); !s.ok()) {
      STOKER_LOG(kWarning) << s.message();
      ++refused;
    }
  }
  if (refused > 0) {
    STOKER_LOG(kWarning) << "not connected to " << refused << " of " << list.size() << " listed workers (at most "
                         << options_.max_workers << ", ClientOptions.max_workers)";
  }
  for (auto it = workers_.begin(); it != workers_.end();) {
    it = present.count(it->first) ? std::next(it) : workers_.erase(it);
  }
  MutexLock lock(core_->mu);
  core_->stats.connected_workers = static_cast<uint32_t>(workers_.size());
  core_->worker_endpoints.clear();
  for (const auto& [id, w] : workers_) core_->worker_endpoints.push_back(id + " " + w.endpoint);
}

// ---- the coordinator's replies ---------------------------------------------------------------------------------

void IoThread::DrainControl() {
  channel_.Receive([this](ControlChannel::Pending& request, DecodedReply& reply) {
    {
      MutexLock lock(core_->mu);
      core_->coordinator_heard = clock_.Now();
    }
    if (std::holds_alternative<RegisterClientRequest>(request.body)) {
      HandleRegisterReply(reply);
    } else if (std::holds_alternative<ClientHeartbeatRequest>(request.body)) {
      HandleHeartbeatReply(request, reply);
    }
  });
}

void IoThread::HandleRegisterReply(const DecodedReply& reply) {
  registering_ = false;
  if (!reply.status.ok()) {
    STOKER_LOG(kWarning) << "re-registration refused: " << reply.status.ToString();
    if (reply.status.code() != StatusCode::kUnavailable) {
      // Another client holds the rank now (we were gone too long), or the job is gone: this client's stream has
      // ended. Stop asking workers for batches and tell the application.
      LoseSession(reply.status.WithContext("this client lost its rank"));
    }
  } else if (auto* r = std::get_if<RegisterClientResponse>(&reply.body)) {
    {
      MutexLock lock(core_->mu);
      core_->window->ForgetAttempts();  // a new coordinator session: its attempts are the ones that count
    }
    membership_version_ = r->membership_version;
    UpdateWorkers(r->workers);
  }
}

void IoThread::HandleHeartbeatReply(const ControlChannel::Pending& request, const DecodedReply& reply) {
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
      channel_.Send(RegisterClientRequest{core_->client_id, options_.job, options_.rank, options_.spec,
                                          options_.prefetch, std::nullopt});
    }
    return;
  }
  auto* r = std::get_if<ClientHeartbeatResponse>(&reply.body);
  if (!reply.status.ok() || r == nullptr) return;
  if (r->workers_changed) {
    membership_version_ = r->membership_version;
    UpdateWorkers(r->workers);
  }
  core_->NoteLeases(r->leases, heartbeat);
}

void IoThread::LoseSession(const Status& why) {
  for (auto& [id, w] : workers_) SendCredit(w, 0);
  workers_.clear();
  session_lost_ = true;
  core_->Fail(why);
}

// ---- the workers' batches --------------------------------------------------------------------------------------

void IoThread::DrainWorker(WorkerConnection& w) {
  for (int i = 0; i < 64; ++i) {
    zmq::message_t header;
    try {
      if (!w.socket->recv(header, zmq::recv_flags::dontwait)) return;
    } catch (const zmq::error_t& e) {
      core_->transport_errors.Note("recv_batch", e);
      return;
    }
    std::vector<zmq::message_t> payload = ReceivePayload(w, header.more());
    Accept(std::move(header), std::move(payload));
  }
}

// The payload's frames, as many as the header will say; never more bytes than a batch has, nor more frames than
// max_payload_frames_ (a sender that goes on has its frames discarded and the batch dropped: memory stays bounded
// by one batch). ZeroMQ delivers a message whole, so every frame of it is there already.
std::vector<zmq::message_t> IoThread::ReceivePayload(WorkerConnection& w, bool more) {
  std::vector<zmq::message_t> payload;
  size_t payload_bytes = 0;
  bool too_many = false;
  while (more) {
    zmq::message_t frame;
    try {
      if (!w.socket->recv(frame, zmq::recv_flags::dontwait)) break;
    } catch (const zmq::error_t& e) {
      core_->transport_errors.Note("recv_batch", e);
      break;
    }
    more = frame.more();
    payload_bytes += frame.size();
    if (!too_many && payload.size() < max_payload_frames_ && payload_bytes <= expected_.payload_bytes()) {
      payload.push_back(std::move(frame));
    } else {
      too_many = true;
    }
  }
  if (too_many) payload.clear();
  return payload;
}

void IoThread::Accept(zmq::message_t header, std::vector<zmq::message_t> payload) {
  std::vector<size_t> sizes;
  sizes.reserve(payload.size());
  for (const zmq::message_t& f : payload) sizes.push_back(f.size());
  auto message = DecodeWorkerMessage(std::move(header), sizes, expected_);
  if (!message.ok()) {
    STOKER_LOG(kDebug) << "dropped a batch: " << message.status().message();
    core_->CountBadFrame();
    return;
  }
  if (auto* error = std::get_if<DataError>(&*message)) {
    WorkerCannotServe(error->status);
    return;
  }
  first_worker_error_.reset();
  if (!PlannedSamples(std::get<BatchHeader>(*message))) {
    STOKER_LOG(kDebug) << "dropped a batch whose samples are not the plan's";
    core_->CountWrongSamples();
    return;
  }
  core_->Accept(MakeReceivedBatch(std::move(std::get<BatchHeader>(*message)), expected_.steps_per_epoch,
                                  std::move(payload), /*join_frames=*/!core_->stager));
}

// Whether the batch carries exactly the samples the plan puts at its (epoch, rank, index), with the plan's padding:
// the client's own check, whatever a worker claims.
bool IoThread::PlannedSamples(const BatchHeader& h) {
  planned_.resize(h.count);
  core_->plan->BatchSamples(h.epoch, h.rank, h.index, planned_);
  for (uint32_t i = 0; i < h.count; ++i) {
    const bool padding = (h.flags[i] & kSampleFlagPadding) != 0;
    if (planned_[i].sample_id != h.sample_ids[i] || planned_[i].padding != padding) return false;
  }
  return true;
}

// Workers keep saying they cannot serve the job and none has sent a batch since: tell the application rather than
// let it wait forever (e.g. no worker can open the manifest).
void IoThread::WorkerCannotServe(const Status& error) {
  core_->CountWorkerError();
  STOKER_LOG(kWarning) << "a worker cannot serve job " << options_.job << ": " << error.ToString();
  const TimePoint now = clock_.Now();
  if (!first_worker_error_) first_worker_error_ = now;
  if (now - *first_worker_error_ > kWorkerErrorGrace) {
    core_->Fail(error.WithContext("no worker can serve this job (for " +
                                  std::to_string(kWorkerErrorGrace.count() / 1000) + " s)"));
  }
}

}  // namespace stoker::client
