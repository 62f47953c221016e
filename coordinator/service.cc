// CoordinatorService (service.h): the ZeroMQ adapter — receive, decode, dispatch to the Impl, group commit, reply.
#include "coordinator/service.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <variant>

#include "wire/control_codec.h"
#include "base/logging.h"
#include "base/metrics.h"
#include "wire/frames.h"

namespace stoker::coordinator {

StatusOr<CrashPoint> CrashPoint::Parse(const std::string& text) {
  CrashPoint c;
  if (text.empty()) return c;
  size_t colon = text.find(':');
  c.point = text.substr(0, colon);
  c.count = colon == std::string::npos ? 1 : std::strtoull(text.substr(colon + 1).c_str(), nullptr, 10);
  if ((c.point != "synced" && c.point != "replied" && c.point != "torn") || c.count == 0) {
    return InvalidArgumentError("--inject-crash: expected synced|replied|torn[:N], got '" + text + "'");
  }
  return c;
}

CoordinatorService::CoordinatorService(CoordinatorImpl& impl, Journal* journal, zmq::context_t& context,
                                       const ServiceOptions& options, const Clock& clock)
    : impl_(impl),
      journal_(journal),
      options_(options),
      socket_(context, zmq::socket_type::router),
      reply_cache_({options.replies_cached_per_sender, options.max_cached_senders, options.max_cached_reply_bytes}),
      clock_(clock) {
  SocketOptions socket_options;
  socket_options.max_message_bytes = options.max_message_bytes;
  socket_options.router_mandatory = true;   // a reply to a vanished peer fails loudly instead of vanishing
  socket_options.send_hwm = 100000;         // one reply per request: the queue is bounded by the peers' requests
  // Per connection: past this many requests queued, libzmq stops reading that peer (nothing is dropped), so one
  // peer can make the coordinator hold at most receive_hwm x max_message_bytes.
  socket_options.receive_hwm = 1000;
  ConfigureSocket(socket_, socket_options);
  if (!options.curve_secret_key.empty()) MakeCurveServer(socket_, options.curve_public_key, options.curve_secret_key);
  for (size_t i = 0; i < MethodNames().size(); ++i) {
    histograms_.request_seconds.push_back(std::make_unique<prometheus::Histogram>(LatencyBuckets()));
  }
  histograms_.journal_sync_seconds = std::make_unique<prometheus::Histogram>(LatencyBuckets());
}

StatusOr<std::string> CoordinatorService::Bind() { return BindSocket(socket_, options_.listen); }

void CoordinatorService::Count(const char* method, StatusCode code) {
  MutexLock lock(stats_mu_);
  ++stats_.requests;
  ++stats_.by_method_code[std::string(method) + "/" + std::string(StatusCodeName(code))];
}

ServiceStats CoordinatorService::Stats() const {
  ServiceStats s;
  {
    MutexLock lock(stats_mu_);
    s = stats_;
  }
  s.transport_errors = transport_errors_.Counts();
  return s;
}

void CoordinatorService::MaybeCrash(const char* point) {
  if (options_.crash.point != point) return;
  if (++crash_seen_ < options_.crash.count) return;
  STOKER_LOG(kWarning) << "injected crash at '" << point << "' (" << crash_seen_ << ")";
  ::kill(::getpid(), SIGKILL);
}

void CoordinatorService::Queue(const std::string& peer, const std::string& sender, uint64_t request_id,
                               zmq::message_t reply, prometheus::Histogram* latency, TimePoint received) {
  outbox_.push_back({peer, sender, request_id, reply.to_string(), latency, received});
}

void CoordinatorService::Remember(const std::string& sender, uint64_t request_id, const zmq::message_t& reply) {
  reply_cache_.Remember(sender, request_id, reply.to_string(), clock_.Now());
  MutexLock lock(stats_mu_);
  stats_.reply_cache_bytes = reply_cache_.bytes();
  stats_.reply_cache_evictions = reply_cache_.evictions();
}

void CoordinatorService::QueueDeferred() {
  for (DeferredLeaseReply& d : impl_.TakeDeferredReplies()) {
    auto asker = askers_.find(d.handle);
    STOKER_CHECK(asker != askers_.end(), "a deferred reply for a request nobody parked");
    const Asker a = std::move(asker->second);
    askers_.erase(asker);
    parked_.erase({a.cache_key, a.request_id});
    zmq::message_t frame = EncodeReply(a.request_id, Status::Ok(), std::move(d.response));
    Remember(a.cache_key, a.request_id, frame);
    Queue(a.peer, a.cache_key, a.request_id, std::move(frame));
  }
}

Status CoordinatorService::Flush() {
  if (outbox_.empty() && (journal_ == nullptr || !journal_->HasUnsynced())) return Status::Ok();
  if (journal_ != nullptr && journal_->HasUnsynced()) {
    const TimePoint sync_start = clock_.Now();
    if (outage_ && sync_start < outage_->next_retry) return Status::Ok();  // the replies wait for the journal
    if (options_.crash.point == "torn" && ++crash_seen_ >= options_.crash.count) {
      Status s = journal_->TEST_WriteTorn(0.5);
      STOKER_LOG(kWarning) << "injected crash in the middle of a journal write (" << s.ToString() << ")";
      ::kill(::getpid(), SIGKILL);
    }
    Status synced = journal_->Sync([this] { return impl_.Snapshot(); });
    if (!synced.ok()) {
      NoteJournalFailure(synced, sync_start);
      return Status::Ok();
    }
    histograms_.journal_sync_seconds->Observe(ToSeconds(clock_.Now() - sync_start));
    if (outage_) EndJournalOutage(clock_.Now());
    MutexLock lock(stats_mu_);
    ++stats_.journal_syncs;
  }
  MaybeCrash("synced");
  for (const Outgoing& out : outbox_) Send(out);
  bool sent = !outbox_.empty();
  outbox_.clear();
  if (sent) MaybeCrash("replied");
  return Status::Ok();
}

void CoordinatorService::Send(const Outgoing& out) {
  try {
    zmq::message_t id(out.peer.data(), out.peer.size());
    if (!socket_.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return;
    zmq::message_t frame(out.frame.data(), out.frame.size());
    socket_.send(frame, zmq::send_flags::dontwait);
    if (out.latency != nullptr) out.latency->Observe(ToSeconds(clock_.Now() - out.received));
  } catch (const zmq::error_t& e) {
    // EHOSTUNREACH: the peer disconnected; it re-sends its request when it reconnects.
    transport_errors_.Note("send_reply", e);
  }
}

void CoordinatorService::NoteJournalFailure(const Status& status, TimePoint now) {
  if (!outage_) {
    outage_ = JournalOutage{now, now + Millis(500), Millis(500)};
    STOKER_LOG(kError) << "cannot write the journal: " << status.ToString() << ". Holding " << outbox_.size()
                       << " replies and answering new requests UNAVAILABLE until it can; retrying with backoff. "
                       << "Free space on the journal's volume (stoker_coordinator_journal_volume_free_bytes)";
  } else {
    outage_->backoff = std::min<Duration>(outage_->backoff * 2, Millis(8000));
    outage_->next_retry = now + outage_->backoff;
  }
  MutexLock lock(stats_mu_);
  ++stats_.journal_write_failures;
  stats_.journal_writable = false;
  stats_.journal_failure = status.ToString();
}

void CoordinatorService::EndJournalOutage(TimePoint now) {
  const Duration lasted = std::chrono::duration_cast<Duration>(now - outage_->since);
  outage_.reset();
  impl_.ExcuseSilence(lasted);  // nobody could be heard meanwhile: leases and liveness resume where they stood
  STOKER_LOG(kInfo) << "the journal is writable again after " << ToSeconds(lasted) << " s; sending "
                    << outbox_.size() << " held replies";
  MutexLock lock(stats_mu_);
  stats_.journal_writable = true;
  stats_.journal_failure.clear();
}

namespace {

// The role a method belongs to: a worker key makes worker requests only, a client key client requests and those of
// the node-local workers it registered (the Impl holds those to its own ranks: CheckNewWorkerLocked, MayServeLocked,
// GetJob).
std::optional<Role> RoleFor(const RequestBody& body) {
  if (std::holds_alternative<RegisterClientRequest>(body) || std::holds_alternative<ClientHeartbeatRequest>(body)) {
    return Role::kClient;
  }
  if (std::holds_alternative<DeregisterRequest>(body)) return std::nullopt;  // either: each leaves its own
  return Role::kWorker;
}

Status CheckRole(const Caller& caller, const RequestBody& body) {
  if (caller.identity.empty()) return Status::Ok();  // CURVE off: --insecure
  std::optional<PeerIdentity> who = ParseIdentity(caller.identity);
  std::optional<Role> needed = RoleFor(body);
  if (!who) return PermissionDeniedError("an unknown identity");
  if (needed && who->role != *needed && !(*needed == Role::kWorker && who->role == Role::kClient)) {
    return PermissionDeniedError(std::string("a ") + RoleName(who->role) + " key cannot make a " + MethodName(body) +
                                 " request");
  }
  return Status::Ok();
}

}  // namespace

void CoordinatorService::HandleMessage(const std::string& peer, zmq::message_t& frame) {
  const TimePoint received = clock_.Now();
  const Caller caller{PeerIdentityOf(frame)};  // before the frame is consumed: libzmq's, not the sender's, word
  uint64_t request_id = 0;
  auto decoded = DecodeRequest(std::move(frame), &request_id);
  if (!decoded.ok()) {
    {
      MutexLock lock(stats_mu_);
      ++stats_.bad_frames;
    }
    STOKER_LOG(kWarning) << "rejected a request: " << decoded.status().ToString();
    Queue(peer, "", request_id, EncodeReply(request_id, decoded.status(), std::monostate{}));
    return;
  }
  if (outage_) {  // nothing can be made durable: refuse before anything changes, the peer retries
    Count(MethodName(decoded->body), StatusCode::kUnavailable);
    zmq::message_t reply = EncodeReply(decoded->request_id,
                                       UnavailableError("the coordinator cannot write its journal at the moment "
                                                        "(its volume is full?): try again"),
                                       std::monostate{});
    Send({peer, "", decoded->request_id, reply.to_string(), nullptr, received});
    return;
  }
  // Retries are recognised per authenticated identity, sender id and (a worker's) session: neither another identity
  // nor another process of the same key naming the sender id can read them.
  std::string cache_key = caller.identity + "/" + decoded->sender_id;
  if (const auto* lease = std::get_if<LeaseRequest>(&decoded->body)) cache_key += "/" + lease->session;
  if (std::holds_alternative<LeaseRequest>(decoded->body)) {
    // A retried lease request: answer with what the first one got, or wait for the parked one's answer.
    if (parked_.count({cache_key, decoded->request_id}) != 0) return;
    if (const std::string* reply = reply_cache_.Find(cache_key, decoded->request_id, clock_.Now())) {
      outbox_.push_back({peer, cache_key, decoded->request_id, *reply});
      MutexLock lock(stats_mu_);
      ++stats_.retries_answered_from_cache;
      return;
    }
  }
  bool parked = false;
  Status role = CheckRole(caller, decoded->body);
  StatusOr<ReplyBody> result = role.ok() ? Dispatch(peer, cache_key, caller, *decoded, &parked) : role;
  const Status status = result.ok() ? Status::Ok() : result.status();
  Count(MethodName(decoded->body), status.code());
  if (parked) return;
  zmq::message_t reply = EncodeReply(decoded->request_id, status, result.ok() ? *result : ReplyBody{});
  // Only a registered worker's granted leases are worth a cached reply: anything else is answered the same way
  // again, and caching it would let any sender grow the cache.
  if (status.ok() && std::holds_alternative<LeaseRequest>(decoded->body)) Remember(cache_key, decoded->request_id, reply);
  Queue(peer, cache_key, decoded->request_id, std::move(reply), histograms_.request_seconds[decoded->body.index()].get(),
        received);
}

// Calls the Impl's method for the request. A lease request the Impl parks gets a handle the Impl answers under
// later (QueueDeferred); *parked says so and the reply is not sent now.
StatusOr<ReplyBody> CoordinatorService::Dispatch(const std::string& peer, const std::string& cache_key,
                                                 const Caller& caller, const DecodedRequest& request, bool* parked) {
  auto body = [](auto result) -> StatusOr<ReplyBody> {
    if (!result.ok()) return result.status();
    return ReplyBody(std::move(*result));
  };
  auto none = [](const Status& status) -> StatusOr<ReplyBody> {
    if (!status.ok()) return status;
    return ReplyBody(std::monostate{});
  };
  return std::visit(
      [&](const auto& r) -> StatusOr<ReplyBody> {
        using T = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<T, RegisterWorkerRequest>) return body(impl_.RegisterWorker(r, caller));
        if constexpr (std::is_same_v<T, WorkerHeartbeatRequest>) return body(impl_.WorkerHeartbeat(r, caller));
        if constexpr (std::is_same_v<T, UnitDoneRequest>) return none(impl_.UnitDone(r, caller));
        if constexpr (std::is_same_v<T, RegisterClientRequest>) return body(impl_.RegisterClient(r, caller));
        if constexpr (std::is_same_v<T, ClientHeartbeatRequest>) return body(impl_.ClientHeartbeat(r, caller));
        if constexpr (std::is_same_v<T, GetJobRequest>) return body(impl_.GetJob(r.job, caller));
        if constexpr (std::is_same_v<T, DeregisterRequest>) return none(impl_.Deregister(r, caller));
        if constexpr (std::is_same_v<T, LeaseRequest>) {
          const RequestHandle handle = next_handle_++;
          auto result = impl_.RequestLease(handle, r, caller);
          if (!result.ok()) return result.status();
          if (result->has_value()) return ReplyBody(std::move(**result));
          askers_[handle] = Asker{peer, cache_key, request.request_id};
          parked_.insert({cache_key, request.request_id});
          *parked = true;
          return ReplyBody(std::monostate{});
        }
      },
      request.body);
}

// One request off the socket: [routing id][frame]. A message of more frames is discarded whole and counted.
StatusOr<bool> CoordinatorService::ReceiveOne() {
  zmq::message_t routing_id, frame;
  try {
    if (!socket_.recv(routing_id, zmq::recv_flags::dontwait)) return false;
    if (!routing_id.more()) return true;
    if (!socket_.recv(frame, zmq::recv_flags::dontwait)) return true;
    bool extra = false;
    while (frame.more()) {  // a request is exactly one frame: discard the rest
      zmq::message_t discard;
      if (!socket_.recv(discard, zmq::recv_flags::dontwait)) break;
      extra = true;
      if (!discard.more()) break;
    }
    if (extra) {
      MutexLock lock(stats_mu_);
      ++stats_.bad_frames;
      return true;
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return true;
    return UnavailableError(std::string("coordinator socket receive failed: ") + e.what());
  }
  HandleMessage(routing_id.to_string(), frame);
  QueueDeferred();
  return true;
}

Status CoordinatorService::Run(const std::atomic<bool>& stop) {
  TimePoint next_tick = clock_.Now();
  TimePoint next_cache_sweep = next_tick + std::chrono::minutes(1);
  while (!stop.load()) {
    watch_.Beat();
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}};
    STOKER_RETURN_IF_ERROR(
        PollOnce(items, std::chrono::duration_cast<std::chrono::milliseconds>(options_.tick)).WithContext("coordinator"));
    // Everything queued is handled as one batch: one journal sync, then all the replies.
    for (int i = 0; i < 4096 && (items[0].revents & ZMQ_POLLIN); ++i) {
      STOKER_ASSIGN_OR_RETURN(bool more, ReceiveOne());
      if (!more) break;
    }
    const TimePoint now = clock_.Now();
    if (now >= next_tick && !outage_) {  // during a journal outage time stands still for leases and liveness
      impl_.Tick();
      QueueDeferred();
      next_tick = now + options_.tick;
    }
    if (now >= next_cache_sweep) {
      // Senders that went away (a restarted worker has a new id) leave their cached replies behind.
      reply_cache_.ForgetIdle(now, std::chrono::minutes(1));
      MutexLock lock(stats_mu_);
      stats_.reply_cache_bytes = reply_cache_.bytes();
      next_cache_sweep = now + std::chrono::minutes(1);
    }
    STOKER_RETURN_IF_ERROR(Flush());
  }
  return Flush();
}

}  // namespace stoker::coordinator
