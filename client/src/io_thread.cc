// IoThread (io_thread.h): the client's sockets, polls and frames, handed to ClientImpl, and its Outbox carried out.
#include "client/src/io_thread.h"

#include <pthread.h>
#include <sodium.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>

#include "auth/curve.h"
#include "base/task_pool.h"
#include "base/logging.h"
#include "wire/control_channel.h"
#include "wire/data_codec.h"
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

// Sealed batches at least this large are opened on the process's openers, frame by frame in parallel; smaller ones
// on the I/O thread, where the hand-over would cost more than the opening.
constexpr size_t kOpenOnPoolBytes = 1 << 20;

// The process's openers of sealed batches: $STOKER_CLIENT_OPEN_THREADS, else as many as its ZeroMQ I/O threads.
// Never destroyed, like the ZeroMQ context: a client may close during static destruction.
TaskPool<std::monostate>& OpenPool() {
  static TaskPool<std::monostate>* const pool = [] {
    int n = ProcessIoThreads();
    if (const char* env = std::getenv("STOKER_CLIENT_OPEN_THREADS")) n = std::clamp(std::atoi(env), 1, 64);
    return new TaskPool<std::monostate>(static_cast<unsigned>(n), "stoker-open");
  }();
  return *pool;
}

}  // namespace

// A sealed batch whose frames the openers are opening.
struct IoThread::Opening {
  std::string worker_id;
  SealedConnection::Sealed sealed;
  StatusOr<WorkerMessage> message{InternalError("not decoded yet")};
  std::vector<zmq::message_t> payload;
  HostBufferPool::Buffer into;  // the spare pinned buffer it is opened into; empty: in place
  std::vector<size_t> offsets;  // each frame's place in `into`
  std::atomic<size_t> left{0};
  std::atomic<bool> failed{false};
  std::atomic<int64_t> open_ns{0};  // the openers' time on its frames (ClientStats::receive_seconds)
};

zmq::context_t& ProcessContext() {
  static zmq::context_t* const context = new zmq::context_t(ProcessIoThreads());
  return *context;
}

IoThread::IoThread(const ClientOptions& options, Security security, std::shared_ptr<ClientCore> core,
                   std::string local_group)
    : options_(options),
      security_(std::move(security)),
      core_(std::move(core)),
      clock_(core_->clock()),
      impl_(options, *core_, /*curve=*/!security_.insecure, std::move(local_group)),
      control_(ProcessContext(), zmq::socket_type::dealer) {
  ConfigureControlSocket(control_);
}

IoThread::~IoThread() {
  core_->Close();
  if (thread_.joinable()) thread_.join();
}

StatusOr<RankClaim> IoThread::Register(const std::optional<ResumePoint>& resume) {
  STOKER_ASSIGN_OR_RETURN(RegisterClientResponse registered, Ask(resume, false));
  return RankClaim(std::move(registered), [this] { Leave(); });
}

StatusOr<RegisterClientResponse> IoThread::Describe() { return Ask(std::nullopt, true); }

StatusOr<RegisterClientResponse> IoThread::Ask(const std::optional<ResumePoint>& resume, bool probe) {
  if (!security_.insecure) {
    std::vector<TrustedKey> coordinators = security_.Trusted(Role::kCoordinator);
    if (coordinators.empty()) return FailedPreconditionError("the trust file has no coordinator key");
    MakeCurveClient(control_, security_.own, coordinators.front().public_z85);
  }
  try {
    control_.connect(options_.coordinator);
  } catch (const zmq::error_t& e) {
    return InvalidArgumentError("cannot connect to coordinator '" + options_.coordinator + "': " + e.what());
  }
  impl_.Register(resume, probe);
  CarryOut();
  while (!impl_.claim()) {
    STOKER_ASSIGN_OR_RETURN(bool answered, PollControl(std::chrono::milliseconds(50)));
    if (answered) DrainControl();
    impl_.Tick();
    CarryOut();
  }
  return *impl_.claim();
}

void IoThread::Start(RankClaim claim) {
  impl_.Start(claim.Commit());
  CarryOut();
  thread_ = std::thread([this] { Run(); });
}

void IoThread::Run() {
  ::pthread_setname_np(::pthread_self(), "stoker-io");
  while (!core_->closing()) Turn();
  Leave();
}

void IoThread::Turn() {
  std::vector<zmq::pollitem_t> items;
  items.push_back({control_.handle(), 0, ZMQ_POLLIN, 0});
  items.push_back({nullptr, core_->doorbell(), ZMQ_POLLIN, 0});
  std::vector<std::pair<const std::string*, WorkerConnection*>> order;
  for (auto& [id, w] : workers_) {
    items.push_back({w.socket->handle(), 0, ZMQ_POLLIN, 0});
    order.emplace_back(&id, &w);
  }
  core_->MarkIoTurn();
  Status polled = PollOnce(items, std::chrono::milliseconds(10));
  if (!polled.ok()) STOKER_LOG(kError) << "client " << polled.ToString();
  if (items[1].revents & ZMQ_POLLIN) {
    uint64_t ignored;
    ssize_t n = ::read(core_->doorbell(), &ignored, sizeof(ignored));
    (void)n;  // only wakes the poll
  }
  // Workers first: the coordinator's replies can change the worker list, destroying sockets `order` points to.
  for (size_t i = 0; i < order.size(); ++i) {
    if (items[i + 2].revents & ZMQ_POLLIN) DrainWorker(*order[i].first, *order[i].second);
  }
  FinishOpens();
  if (items[0].revents & ZMQ_POLLIN) DrainControl();
  impl_.Tick();
  CarryOut();
  WatchConnections();
}

// Leaving (or giving back a claim no session used): workers stop making batches for us, and the rank is free.
void IoThread::Leave() {
  const uint64_t deregister = impl_.Leave();
  CarryOut();
  const TimePoint deadline = clock_.Now() + Millis(200);
  while (impl_.IsPending(deregister) && clock_.Now() < deadline) {
    StatusOr<bool> answered = PollControl(std::chrono::milliseconds(20));
    if (!answered.ok()) break;
    if (*answered) DrainControl();
  }
}

StatusOr<bool> IoThread::PollControl(std::chrono::milliseconds timeout) {
  zmq::pollitem_t items[] = {{control_.handle(), 0, ZMQ_POLLIN, 0}};
  STOKER_RETURN_IF_ERROR(PollOnce(items, timeout));
  return (items[0].revents & ZMQ_POLLIN) != 0;
}

// Every reply waiting, each handed over and its consequences carried out before the next.
void IoThread::DrainControl() {
  while (std::optional<zmq::message_t> frame = ReceiveControlFrame(control_, core_->transport_errors())) {
    StatusOr<DecodedReply> reply = DecodeReply(std::move(*frame));
    if (!reply.ok()) {
      STOKER_LOG(kWarning) << "bad reply from the coordinator: " << reply.status().ToString();
      continue;
    }
    impl_.HandleReply(*reply);
    CarryOut();
  }
}

void IoThread::CarryOut() {
  ClientImpl::Outbox out = impl_.TakeOutbox();
  for (const RequestTracker::Pending& r : out.requests) {
    SendControlFrame(control_, r.id, r.body, core_->transport_errors());
  }
  for (const WorkerInfo& info : out.opens) {
    if (Status opened = OpenWorker(info); !opened.ok()) {
      workers_.erase(info.worker_id);  // no connection to it, as the Impl now knows
      impl_.OpenFailed(info.worker_id, opened);
    }
  }
  for (const auto& [worker_id, credit] : out.credits) {
    auto it = workers_.find(worker_id);
    if (it != workers_.end()) SendCredit(it->second, credit);
  }
  for (const std::string& worker_id : out.closes) workers_.erase(worker_id);
}

void IoThread::SendCredit(WorkerConnection& w, const Credit& credit) {
  w.credits = credit.credits;
  if (w.seal && (!w.seal->ready() || w.seal->offering())) {
    // Under the keys the welcome brings: the worker dropped the old ones for the offer (and would count it refused).
    w.pending_credit = credit;
    return;
  }
  zmq::message_t frame = EncodeCredit(credit);
  try {
    if (!w.seal) {
      w.socket->send(frame, zmq::send_flags::dontwait);
      return;
    }
    std::vector<uint8_t> tag = w.seal->SealCredit({static_cast<const uint8_t*>(frame.data()), frame.size()});
    zmq::message_t trailer(tag.data(), tag.size());
    if (w.socket->send(frame, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      w.socket->send(trailer, zmq::send_flags::dontwait);
    }
  } catch (const zmq::error_t& e) {
    core_->transport_errors().Note("send_credit", e);
  }
}

void IoThread::SendOffer(WorkerConnection& w) {
  w.last_offer = clock_.Now();
  zmq::message_t frame = EncodeSealHello(w.seal->Offer());
  try {
    w.socket->send(frame, zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    core_->transport_errors().Note("send_offer", e);
  }
}

// One DEALER to the worker's data port, as a CURVE client of the key the coordinator listed for it. Creating a
// socket can fail (EMFILE: out of file descriptors): an error, never a crash.
Status IoThread::OpenWorker(const WorkerInfo& info) {
  STOKER_ASSIGN_OR_RETURN(WorkerConnection w, Connect(info));
  STOKER_LOG(kDebug) << "connected to worker " << info.worker_id << " at " << info.data_endpoint;
  WorkerConnection& placed = workers_[info.worker_id] = std::move(w);
  if (placed.seal) SendOffer(placed);
  return Status::Ok();
}

StatusOr<IoThread::WorkerConnection> IoThread::Connect(const WorkerInfo& info) {
  WorkerConnection w;
  try {
    w.socket = std::make_unique<zmq::socket_t>(ProcessContext(), zmq::socket_type::dealer);
    SocketOptions o;
    o.max_message_bytes = static_cast<int64_t>(core_->spec().BatchBytes()) + (1 << 20);
    o.receive_hwm = 0;  // the coordinator's window, not a message count, bounds what can arrive
    ConfigureSocket(*w.socket, o);
    w.socket->set(zmq::sockopt::affinity, NextIoAffinity());
    if (!security_.insecure && !impl_.IsNodeLocal(info)) {  // a node-local worker's socket: trusted as its directory
      // The data port takes this client's ticket; the connection is then sealed with keys from its seal key. The
      // connection's routing id is ours and random, so the worker keeps its session (and the keys) when ZeroMQ
      // reconnects after a reset, instead of meeting a stranger that must offer again.
      MakePlainClient(*w.socket, security_.own.identity(), info.data_ticket);
      std::string routing_id(16, '\0');
      randombytes_buf(routing_id.data(), routing_id.size());
      routing_id[0] = static_cast<char>(routing_id[0] | 1);  // ZeroMQ reserves ids starting with a zero byte
      w.socket->set(zmq::sockopt::routing_id, routing_id);
      w.seal = std::make_unique<SealedConnection>(security_.own.identity(), info.worker_id, info.data_seal_key);
    }
    w.socket->connect(info.data_endpoint);
  } catch (const zmq::error_t& e) {
    core_->transport_errors().Note("connect_worker", e);
    return UnavailableError("cannot connect to worker " + info.worker_id + ": " + e.what());
  }
  return w;
}

// A sealed connection can die while the list still names its worker: a worker refuses every ticket until its
// registration has brought the ticket key, and libzmq (4.3) never retries a refused handshake. A worker that joined
// a moment before we dialed it, or one restarted in place (same id and port) before it registered, is never heard on
// that socket again. So a connection silent for kProbeSilence while it holds our credit is offered again (a live
// worker answers), and one whose offer goes unanswered for reopen_after is opened anew, the wait doubling until a
// welcome. An offer makes a new session, and a batch being sealed under the old one goes back: hence the long silence.
void IoThread::WatchConnections() {
  const TimePoint now = clock_.Now();
  if (now < next_watch_) return;
  next_watch_ = now + Millis(500);
  for (auto& [id, w] : workers_) {
    if (!w.seal) continue;  // unsealed: no handshake to refuse, and ZeroMQ reconnects by itself
    const bool answered = w.last_heard >= w.last_offer;
    if (answered && w.credits > 0 && now - w.last_heard >= kProbeSilence) {
      SendOffer(w);
    } else if (!answered && now - w.last_offer >= w.reopen_after) {
      const WorkerInfo* listed = impl_.Listed(id);  // its latest ticket; CarryOut has closed connections unlisted
      if (listed == nullptr) continue;
      StatusOr<WorkerConnection> fresh = Connect(*listed);
      if (!fresh.ok()) continue;  // counted as connect_worker; tried again at the next watch
      STOKER_LOG(kWarning) << "worker " << id << " answered nothing on its data connection for "
                           << ToMillis(now - w.last_offer) << " ms: connecting to it again";
      core_->CountWorkerReconnect();
      fresh->pending_credit = std::move(w.pending_credit);
      fresh->credits = w.credits;
      fresh->reopen_after = std::min(2 * w.reopen_after, kMaxReopen);
      w = std::move(*fresh);
      SendOffer(w);
    }
  }
}

// ---- the workers' batches --------------------------------------------------------------------------------------

void IoThread::DrainWorker(const std::string& id, WorkerConnection& w) {
  for (int i = 0; i < 64; ++i) {
    zmq::message_t header;
    if (!ReceiveFrame(w, header)) return;
    w.last_heard = clock_.Now();
    std::vector<zmq::message_t> payload = ReceivePayload(w, header.more());
    // A sealed batch's last frame is its trailer, and its header's bytes are associated data: kept as they came.
    std::optional<zmq::message_t> trailer;
    if (w.seal && payload.size() > 1) {
      trailer = std::move(payload.back());
      payload.pop_back();
    }
    const std::string header_bytes = w.seal ? header.to_string() : std::string();
    std::vector<size_t> sizes;
    sizes.reserve(payload.size());
    for (const zmq::message_t& f : payload) sizes.push_back(f.size());
    StatusOr<WorkerMessage> message = DecodeWorkerMessage(
        std::move(header), sizes, w.seal ? impl_.expectation() : impl_.unsealed_expectation());
    const std::span<const uint8_t> header_span(reinterpret_cast<const uint8_t*>(header_bytes.data()),
                                               header_bytes.size());
    if (w.seal && !Unseal(id, w, message, header_span, payload, trailer ? &*trailer : nullptr)) continue;
    impl_.HandleWorkerMessage(id, std::move(message), std::move(payload));
  }
}

bool IoThread::Unseal(const std::string& worker_id, WorkerConnection& w, StatusOr<WorkerMessage>& message,
                      std::span<const uint8_t> header, std::vector<zmq::message_t>& payload,
                      const zmq::message_t* trailer) {
  if (!message.ok()) return true;  // the Impl counts it
  if (const auto* welcome = std::get_if<SealWelcome>(&*message)) {
    if (Status keyed = w.seal->Welcome(*welcome); !keyed.ok()) {
      STOKER_LOG(kWarning) << "a worker's seal welcome: " << keyed.ToString();
      core_->CountBadFrame();
      return false;
    }
    w.reopen_after = kFirstReopen;
    if (w.pending_credit) SendCredit(w, *std::exchange(w.pending_credit, std::nullopt));
    return false;
  }
  if (const auto* error = std::get_if<DataError>(&*message)) {
    // About the connection: it has no session at the worker for these keys (evicted, replaced, or not registered
    // yet when the offer came). Offer again: at most five times a second, and while an offer is still unanswered
    // only after two seconds (a new offer replaces it, and its welcome would no longer fit).
    if (error->job.empty() && error->status.code() == StatusCode::kFailedPrecondition) {
      const Duration since = clock_.Now() - w.last_offer;
      if (since >= (w.seal->offering() ? Millis(2000) : Millis(200))) SendOffer(w);
      return false;
    }
    return true;
  }
  if (trailer == nullptr) {
    core_->CountSealRefused(/*replayed=*/false);
    return false;
  }
  const std::span<const uint8_t> trailer_bytes(static_cast<const uint8_t*>(trailer->data()), trailer->size());
  size_t bytes = 0;
  for (const zmq::message_t& f : payload) bytes += f.size();
  // On the GPU path the batch is opened straight into a spare pinned buffer where one is free: its decryption is
  // then its one host copy, and Stage has nothing to copy. Otherwise in place, and Stage copies it.
  HostBufferPool::Buffer into;
  if (const std::shared_ptr<HostBufferPool> spare = core_->spare_buffers(); spare && bytes <= spare->bytes()) {
    into = spare->Take();
  }
  if (bytes >= kOpenOnPoolBytes) {
    StatusOr<SealedConnection::Sealed> sealed = w.seal->Prepare(header, payload.size(), trailer_bytes);
    if (sealed.ok()) {
      OpenOnPool(worker_id, std::move(*sealed), std::move(message), std::move(payload), std::move(into));
      return false;
    }
  }
  const auto open_start = std::chrono::steady_clock::now();  // what the work took, not the protocol's time
  Status opened = w.seal->Open(header, payload, trailer_bytes, into.get());
  core_->CountReceiveSeconds(ToSeconds(std::chrono::steady_clock::now() - open_start));
  if (!opened.ok()) {
    STOKER_LOG(kDebug) << "dropped a sealed batch: " << opened.ToString();
    core_->CountSealRefused(opened.code() == StatusCode::kAlreadyExists);
    return false;
  }
  if (into) {
    impl_.HandleWorkerMessage(worker_id, std::move(message), {}, std::move(into));
    return false;
  }
  return true;
}

void IoThread::OpenOnPool(const std::string& worker_id, SealedConnection::Sealed sealed,
                          StatusOr<WorkerMessage> message, std::vector<zmq::message_t> payload,
                          HostBufferPool::Buffer into) {
  auto opening = std::make_shared<Opening>();
  opening->worker_id = worker_id;
  opening->sealed = std::move(sealed);
  opening->message = std::move(message);
  opening->payload = std::move(payload);
  opening->into = std::move(into);
  size_t at = 0;
  for (const zmq::message_t& frame : opening->payload) {
    opening->offsets.push_back(at);
    at += frame.size();
  }
  opening->left.store(opening->payload.size());
  for (size_t f = 0; f < opening->payload.size(); ++f) {
    OpenPool().Push([opening, f, opened = opened_, core = core_](std::monostate&) {
      uint8_t* out = opening->into ? opening->into.get() + opening->offsets[f] : nullptr;
      const auto start = std::chrono::steady_clock::now();
      if (!SealedConnection::OpenFrame(opening->sealed, f, opening->payload[f], out).ok()) opening->failed.store(true);
      opening->open_ns.fetch_add(std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - start).count(),
                                 std::memory_order_relaxed);
      if (opening->left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
      {
        MutexLock lock(opened->mu);
        opened->done.push_back(opening);
      }
      core->Wake();
    });
  }
}

void IoThread::FinishOpens() {
  std::vector<std::shared_ptr<Opening>> done;
  {
    MutexLock lock(opened_->mu);
    done.swap(opened_->done);
  }
  for (const std::shared_ptr<Opening>& o : done) {
    core_->CountReceiveSeconds(ToSeconds(Duration(o->open_ns.load(std::memory_order_relaxed))));
    auto it = workers_.find(o->worker_id);
    Status accepted = o->failed.load() ? DataLossError("a sealed frame failed its tag")
                      : it == workers_.end() || !it->second.seal
                          ? CancelledError("the connection closed while its batch was opened")
                          : it->second.seal->Accept(o->sealed);
    if (!accepted.ok()) {
      // The batch is one message: none of it stays readable when any frame failed.
      if (o->into) {
        const size_t bytes = o->offsets.empty() ? 0 : o->offsets.back() + o->payload.back().size();
        std::memset(o->into.get(), 0, bytes);
      } else {
        for (zmq::message_t& frame : o->payload) std::memset(frame.data(), 0, frame.size());
      }
      if (accepted.code() != StatusCode::kCancelled) {
        core_->CountSealRefused(accepted.code() == StatusCode::kAlreadyExists);
      }
      continue;
    }
    if (o->into) o->payload.clear();  // opened into pinned memory: the received frames go now
    impl_.HandleWorkerMessage(o->worker_id, std::move(o->message), std::move(o->payload), std::move(o->into));
  }
}

bool IoThread::ReceiveFrame(WorkerConnection& w, zmq::message_t& frame) {
  try {
    return w.socket->recv(frame, zmq::recv_flags::dontwait).has_value();
  } catch (const zmq::error_t& e) {
    core_->transport_errors().Note("recv_batch", e);
    return false;
  }
}

// The payload's frames, as many as the header will say; never more bytes than a batch has, nor more frames than
// the Impl allows (a sender that goes on has its frames discarded and the batch dropped: memory stays bounded by
// one batch). ZeroMQ delivers a message whole, so every frame of it is there already.
std::vector<zmq::message_t> IoThread::ReceivePayload(WorkerConnection& w, bool more) {
  std::vector<zmq::message_t> payload;
  size_t payload_bytes = 0;
  bool too_many = false;
  while (more) {
    zmq::message_t frame;
    if (!ReceiveFrame(w, frame)) break;
    more = frame.more();
    payload_bytes += frame.size();
    // A sealed connection's batches carry a trailer after the payload: 8 bytes and a tag per frame.
    const size_t max_frames = impl_.max_payload_frames() + (w.seal ? 1 : 0);
    const size_t max_bytes = impl_.expectation().payload_bytes() +
                             (w.seal ? 8 + kSealTagBytes * impl_.max_payload_frames() : 0);
    if (!too_many && payload.size() < max_frames && payload_bytes <= max_bytes) {
      payload.push_back(std::move(frame));
    } else {
      too_many = true;
    }
  }
  if (too_many) payload.clear();
  return payload;
}

}  // namespace stoker::client
