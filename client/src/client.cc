// The client's two halves: the consumer side (Next, Batch release) and the I/O thread, which owns every socket —
// a DEALER to the coordinator (register, heartbeat + ack) and one DEALER per worker (credits out, batches in).
// They share ClientCore: the ring of prefetch slots, the positions, the counters. A batch arrives into slot
// (g mod window); the coordinator only leases batches below consumed + window, so that slot is always free.
// With a BatchStager (the GPU path) a third thread stages batches in plan order into the stager's `depth` slots
// (pinned memory, device buffers) as they arrive and as the consumer releases the slot's previous batch; Next()
// hands out only staged batches.
#include "stoker/client.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "client/src/client_metrics.h"
#include "common/checkpoint.h"
#include "common/control_channel.h"
#include "common/control_codec.h"
#include "common/json_writer.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/plan.h"
#include "client/src/received_batch.h"
#include "common/wire.h"
#include "stoker/schema/data.capnp.h"

namespace stoker {
namespace internal {

enum class SlotState : uint8_t { kFree, kFilled, kDelivered };

struct ClientCore {
  // Constant after Connect.
  JobSpec spec;
  std::string client_id;
  uint64_t steps = 0;
  uint64_t total = 0;  // batches of all epochs
  uint32_t window = 0;
  uint64_t start = 0;
  std::optional<Plan> plan;
  int doorbell = -1;   // wakes the I/O thread (a slot was released, or closing)
  std::shared_ptr<StallProbe> stall_probe;
  std::shared_ptr<BatchStager> stager;  // null: the host path
  MetricLabels labels;  // pipeline, rank, gpu, gpu_uuid
  std::string metrics_address;
  // Per batch (thread-safe themselves): the wait in Next(), the time between consecutive batches, host-to-device
  // copies (the GPU path observes these; the host path makes none).
  prometheus::Histogram wait_histogram{StepBuckets()};
  prometheus::Histogram step_histogram{StepBuckets()};
  prometheus::Histogram h2d_histogram{StepBuckets()};

  std::mutex mu;
  std::condition_variable ready;
  std::condition_variable stage_wanted;  // a slot filled or was released: the staging thread may have work
  std::vector<std::unique_ptr<ReceivedBatch>> slots;  // guarded by mu
  std::vector<SlotState> state;                       // guarded by mu
  std::vector<uint64_t> slot_index;                   // guarded by mu: the global index a slot holds
  uint64_t next = 0;                                  // guarded by mu: the next global index Next() returns
  uint64_t consumed = 0;                              // guarded by mu: every index below is released
  uint64_t staged = 0;                                // guarded by mu: with a stager, every index below is staged
  uint64_t received_watermark = 0;                    // guarded by mu
  std::set<uint64_t> received_above;                  // guarded by mu
  std::map<uint64_t, uint64_t> lease_attempts;        // guarded by mu: unit -> its current attempt
  bool end_of_epoch_pending = false;                  // guarded by mu
  uint32_t ended_epoch = 0;                           // guarded by mu
  bool ack_dirty = false;                             // guarded by mu
  bool closing = false;                               // guarded by mu
  Status fatal;                                       // guarded by mu
  ClientStats stats;                                  // guarded by mu
  bool delivered_any = false;                         // guarded by mu
  std::chrono::steady_clock::time_point last_return;  // guarded by mu: when Next() last returned a batch
  std::vector<std::string> worker_endpoints;          // guarded by mu
  uint64_t h2d_bytes = 0;                             // guarded by mu
  std::chrono::steady_clock::time_point coordinator_heard;  // guarded by mu: its last reply
  std::chrono::milliseconds heartbeat_interval{250};        // guarded by mu
  std::atomic<int64_t> io_turned_ns{0};  // steady-clock time the I/O thread last went round its loop

  ~ClientCore() {
    if (doorbell >= 0) ::close(doorbell);  // the core outlives the Client while batches are out: it owns the fd
  }

  void Wake() const {
    uint64_t one = 1;
    ssize_t n = ::write(doorbell, &one, sizeof(one));
    (void)n;
  }

  // Ends the stream for the application: Next() returns this error from now on.
  void Fail(const Status& status) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!fatal.ok()) return;
      fatal = status;
    }
    ready.notify_all();
    stage_wanted.notify_all();
  }

  void Release(uint64_t global) {
    {
      std::lock_guard<std::mutex> lock(mu);
      size_t slot = global % window;
      if (state[slot] != SlotState::kDelivered || slot_index[slot] != global) return;
      state[slot] = SlotState::kFree;
      while (consumed < next && state[consumed % window] == SlotState::kFree) ++consumed;
      ack_dirty = true;
    }
    stage_wanted.notify_all();
    Wake();
  }

  // The staging thread (only with a stager): batch `staged` goes to stager slot staged % depth once it has
  // arrived and the consumer has released the batch that slot held before (staged - depth < consumed).
  void StageLoop() {
    ::pthread_setname_np(::pthread_self(), "stoker-stage");  // top -H, and gpu_feed_bench's CPU breakdown
    const uint64_t depth = stager->depth();
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      stage_wanted.wait(lock, [&] {
        if (closing || !fatal.ok()) return true;
        if (staged >= total || staged >= consumed + depth) return false;
        const size_t slot = staged % window;
        return state[slot] == SlotState::kFilled && slot_index[slot] == staged;
      });
      if (closing || !fatal.ok()) return;
      const uint64_t g = staged;
      ReceivedBatch& batch = *slots[g % window];  // nobody else touches a filled, unstaged slot
      lock.unlock();
      StageReport report;
      Status status = stager->Stage(g % depth, batch, &report);
      if (report.h2d_seconds >= 0) h2d_histogram.Observe(report.h2d_seconds);
      lock.lock();
      if (!status.ok()) {
        if (fatal.ok()) fatal = status.WithContext("staging batch " + std::to_string(g));
        ready.notify_all();
        return;
      }
      h2d_bytes += report.h2d_bytes;
      staged = g + 1;
      ready.notify_all();
    }
  }
};

}  // namespace internal

namespace internal {

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The stoker_client_* families for one client (docs/observability.md). Runs on the scraping thread.
void CollectClient(ClientCore& c, MetricFamilies& out) {
  using prometheus::MetricType;
  ClientStats s;
  uint32_t prefetched = 0;
  uint64_t h2d_bytes = 0;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    s = c.stats;
    for (SlotState st : c.state) prefetched += st == SlotState::kFilled;
    h2d_bytes = c.h2d_bytes;
    s.position = c.next;
  }
  const MetricLabels& l = c.labels;
  auto one = [&](const char* name, const char* help, MetricType type, double value) {
    out.push_back(FamilyBuilder(name, help, type).Add(l, value).Build());
  };
  auto with = [&](std::initializer_list<std::pair<std::string, std::string>> extra) {
    MetricLabels labels = l;
    labels.insert(labels.end(), extra.begin(), extra.end());
    return labels;
  };
  one("stoker_client_info",
      "1 per client: its pipeline, rank and GPU (join dcgm-exporter's UUID on gpu_uuid, or anything on pod).",
      MetricType::Gauge, 1);
  one("stoker_client_batches_total", "Batches next() delivered.", MetricType::Counter,
      static_cast<double>(s.batches_delivered));
  one("stoker_client_samples_total", "Samples next() delivered (padding included).", MetricType::Counter,
      static_cast<double>(s.samples_delivered));
  auto histogram = [&](const char* name, const char* help, const prometheus::Histogram& h) {
    out.push_back(FamilyBuilder(name, help, MetricType::Histogram).Add(l, h).Build());
  };
  histogram("stoker_client_input_wait_seconds", "Per batch after the first: host seconds next() blocked waiting for it.",
            c.wait_histogram);
  histogram("stoker_client_step_seconds",
            "Seconds between consecutive batches next() returned: the training step as the input side sees it (the "
            "denominator of the stall ratio).",
            c.step_histogram);
  one("stoker_client_input_stall_seconds_total",
      "Of the waits in next() after the first batch, the seconds during which the consumer had nothing left to run: "
      "the GPU idle for lack of input. The primary starvation signal.",
      MetricType::Counter, s.stall_seconds);
  one("stoker_client_startup_wait_seconds_total", "Seconds next() waited for this client's first batch.",
      MetricType::Counter, s.startup_seconds);
  one("stoker_client_h2d_bytes_total", "Bytes copied host to device (0 on the host path).", MetricType::Counter,
      static_cast<double>(h2d_bytes));
  histogram("stoker_client_h2d_seconds",
            "Per batch: seconds its host-to-device copy took, from CUDA events (none on the host path).",
            c.h2d_histogram);
  one("stoker_client_prefetch_batches", "Batches received and ready, not yet handed out by next().",
      MetricType::Gauge, prefetched);
  one("stoker_client_prefetch_capacity_batches", "Configured prefetch depth.", MetricType::Gauge, c.window);
  one("stoker_client_last_batch_timestamp_seconds",
      "Unix time next() last returned a batch (connect time before the first).", MetricType::Gauge,
      s.last_batch_unix_seconds);
  one("stoker_client_end_of_job", "1 once every batch of every epoch was delivered.", MetricType::Gauge,
      s.end_of_job ? 1 : 0);
  one("stoker_client_received_bytes_total", "Pixel bytes received from workers.", MetricType::Counter,
      static_cast<double>(s.bytes_received));
  one("stoker_client_connected_workers", "Workers this client holds a data connection to.", MetricType::Gauge,
      s.connected_workers);
  one("stoker_client_position_batches", "Global index of the next batch next() returns.", MetricType::Gauge,
      static_cast<double>(s.position));
  FamilyBuilder dropped("stoker_client_dropped_batches_total", "Batches received and not delivered, by reason.",
                        MetricType::Counter);
  dropped.Add(with({{"reason", "duplicate"}}), static_cast<double>(s.dropped_duplicate))
      .Add(with({{"reason", "stale_attempt"}}), static_cast<double>(s.dropped_stale_attempt))
      .Add(with({{"reason", "bad_frame"}}), static_cast<double>(s.dropped_bad_frame))
      .Add(with({{"reason", "out_of_window"}}), static_cast<double>(s.dropped_out_of_window));
  out.push_back(dropped.Build());
  one("stoker_client_worker_errors_total", "Error messages received from workers.", MetricType::Counter,
      static_cast<double>(s.worker_errors));
}

std::string ClientStateJson(ClientCore& c) {
  std::lock_guard<std::mutex> lock(c.mu);
  JsonWriter j;
  j.BeginObject();
  j.Key("client_id").Value(c.client_id);
  for (const auto& [key, value] : c.labels) j.Key(key).Value(value);
  j.Key("next").Value(c.next).Key("consumed").Value(c.consumed).Key("total").Value(c.total);
  j.Key("steps_per_epoch").Value(c.steps);
  j.Key("received_watermark").Value(c.received_watermark);
  j.Key("received_above").BeginArray();
  for (uint64_t i : c.received_above) j.Value(i);
  j.EndArray();
  j.Key("slots").BeginArray();
  for (size_t i = 0; i < c.state.size(); ++i) {
    const char* st = c.state[i] == SlotState::kFree ? "free" : c.state[i] == SlotState::kFilled ? "filled" : "out";
    j.BeginObject().Key("state").Value(st);
    if (c.state[i] != SlotState::kFree) j.Key("index").Value(c.slot_index[i]);
    j.EndObject();
  }
  j.EndArray();
  j.Key("leases").BeginArray();
  for (const auto& [unit, attempt] : c.lease_attempts) {
    j.BeginObject().Key("unit").Value(unit).Key("attempt").Value(attempt).EndObject();
  }
  j.EndArray();
  j.Key("workers").BeginArray();
  for (const std::string& w : c.worker_endpoints) j.Value(w);
  j.EndArray();
  j.Key("fatal").Value(c.fatal.ok() ? std::string() : c.fatal.ToString());
  j.Key("wait_seconds").Value(c.stats.wait_seconds).Key("stall_seconds").Value(c.stats.stall_seconds);
  j.Key("step_seconds").Value(c.stats.step_seconds).Key("end_of_job").Value(c.stats.end_of_job);
  j.EndObject();
  return j.str();
}

using SteadyTime = std::chrono::steady_clock::time_point;

// Asks the consumer's stall probe, outside the core's lock, how much of a wait was stall, and adds it.
void AddProbedStall(ClientCore& c, const std::optional<std::pair<SteadyTime, SteadyTime>>& window, double waited) {
  if (!window) return;
  const double stalled = std::clamp(c.stall_probe->StalledSeconds(window->first, window->second), 0.0, waited);
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.stall_seconds += stalled;
}

}  // namespace internal

using internal::AddProbedStall;
using internal::SteadyTime;
using internal::ClientCore;
using internal::ReceivedBatch;
using internal::SlotState;
using internal::UnixSeconds;

// ---- Batch -----------------------------------------------------------------------------------------------------

Batch::Batch() = default;
Batch::Batch(std::shared_ptr<ClientCore> core, std::unique_ptr<ReceivedBatch> data)
    : core_(std::move(core)), data_(std::move(data)) {}
Batch::Batch(Batch&&) noexcept = default;
Batch& Batch::operator=(Batch&& other) noexcept {
  if (this != &other) {
    Release();
    core_ = std::move(other.core_);
    data_ = std::move(other.data_);
  }
  return *this;
}
Batch::~Batch() { Release(); }

void Batch::Release() {
  if (data_ && core_) core_->Release(data_->global);
  data_.reset();
  core_.reset();
}

uint32_t Batch::epoch() const { return data_->epoch; }
uint64_t Batch::position() const { return data_->global; }
uint64_t Batch::index() const { return data_->index; }
uint32_t Batch::rank() const { return data_->rank; }
uint32_t Batch::size() const { return data_->count; }
uint32_t Batch::height() const { return data_->height; }
uint32_t Batch::width() const { return data_->width; }
uint32_t Batch::channels() const { return data_->channels; }
const uint8_t* Batch::pixels() const { return data_->pixels(); }
size_t Batch::pixel_bytes() const { return data_->pixel_bytes; }
std::span<const int64_t> Batch::labels() const { return data_->labels; }
std::span<const uint64_t> Batch::sample_ids() const { return data_->sample_ids; }
std::span<const uint8_t> Batch::flags() const { return data_->flags; }
uint64_t Batch::attempt() const { return data_->attempt; }
const std::string& Batch::worker_id() const { return data_->worker_id; }

// ---- the I/O thread --------------------------------------------------------------------------------------------

class Client::IoThread {
 public:
  IoThread(const ClientOptions& options, std::shared_ptr<ClientCore> core)
      : options_(options),
        core_(std::move(core)),
        context_(1),
        channel_(context_, clock_, std::chrono::seconds(5)) {}

  ~IoThread() {
    {
      std::lock_guard<std::mutex> lock(core_->mu);
      core_->closing = true;
    }
    core_->stage_wanted.notify_all();
    core_->Wake();
    if (thread_.joinable()) thread_.join();
  }

  // Registers the rank synchronously (Connect's caller waits), retrying while the coordinator is unreachable.
  StatusOr<RegisterClientResponse> Register(const std::optional<ResumePoint>& resume) {
    STOKER_RETURN_IF_ERROR(channel_.Connect(options_.coordinator));
    RegisterClientRequest request{core_->client_id, options_.job, options_.rank, options_.spec, options_.prefetch,
                                  resume};
    auto deadline = std::chrono::steady_clock::now() + options_.connect_timeout;
    std::optional<StatusOr<RegisterClientResponse>> result;
    while (std::chrono::steady_clock::now() < deadline) {
      uint64_t id = channel_.Send(request);
      auto attempt_end = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(2));
      while (std::chrono::steady_clock::now() < attempt_end && channel_.IsPending(id)) {
        zmq::pollitem_t items[] = {{channel_.socket().handle(), 0, ZMQ_POLLIN, 0}};
        zmq::poll(items, 1, std::chrono::milliseconds(50));
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

  void Start(const RegisterClientResponse& registered) {
    // A worker must be able to hold at least one whole unit for us, or it could never lease one.
    credits_ = std::max(options_.credits_per_worker, registered.spec.batches_per_unit);
    heartbeat_interval_ = std::chrono::milliseconds(std::max<uint32_t>(50, registered.heartbeat_interval_ms));
    {
      std::lock_guard<std::mutex> lock(core_->mu);
      core_->heartbeat_interval = heartbeat_interval_;
      core_->coordinator_heard = std::chrono::steady_clock::now();  // it just answered the registration
    }
    membership_version_ = registered.membership_version;
    if (options_.payload_frame_bytes > 0) {
      max_payload_frames_ = static_cast<size_t>(std::max<uint64_t>(1, core_->spec.BatchBytes() / 4096));
    }
    UpdateWorkers(registered.workers);
    thread_ = std::thread([this] { Run(); });
  }

 private:
  struct WorkerConnection {
    std::string endpoint;
    std::unique_ptr<zmq::socket_t> socket;
    std::chrono::steady_clock::time_point credited;
  };

  using SteadyTime = std::chrono::steady_clock::time_point;

  void Run() {
    ::pthread_setname_np(::pthread_self(), "stoker-io");
    SteadyTime next_heartbeat = std::chrono::steady_clock::now();
    SteadyTime last_ack = next_heartbeat;
    while (true) {
      {
        std::lock_guard<std::mutex> lock(core_->mu);
        if (core_->closing) break;
      }
      std::vector<zmq::pollitem_t> items;
      items.push_back({channel_.socket().handle(), 0, ZMQ_POLLIN, 0});
      items.push_back({nullptr, core_->doorbell, ZMQ_POLLIN, 0});
      std::vector<WorkerConnection*> order;
      for (auto& [id, w] : workers_) {
        items.push_back({w.socket->handle(), 0, ZMQ_POLLIN, 0});
        order.push_back(&w);
      }
      core_->io_turned_ns.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                                std::memory_order_relaxed);
      try {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(10));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) STOKER_LOG(kError) << "client poll failed: " << e.what();
      }
      if (items[1].revents & ZMQ_POLLIN) {
        uint64_t ignored;
        ssize_t n = ::read(core_->doorbell, &ignored, sizeof(ignored));
        (void)n;
      }
      // Workers first: the coordinator's replies can change the worker list, destroying sockets `order` points to.
      for (size_t i = 0; i < order.size(); ++i) {
        if (items[i + 2].revents & ZMQ_POLLIN) DrainWorker(*order[i]);
      }
      if (items[0].revents & ZMQ_POLLIN) DrainControl();
      SteadyTime now = std::chrono::steady_clock::now();
      bool dirty;
      {
        std::lock_guard<std::mutex> lock(core_->mu);
        dirty = core_->ack_dirty;
      }
      // Acks go out promptly when something changed (coalesced to one per 2 ms), and as heartbeats regardless.
      if (!session_lost_ && ((dirty && now - last_ack >= std::chrono::milliseconds(2)) || now >= next_heartbeat)) {
        SendHeartbeat();
        last_ack = now;
        next_heartbeat = now + heartbeat_interval_;
      }
      for (auto& [id, w] : workers_) {
        if (now - w.credited >= kCreditRefresh) SendCredit(w, credits_);
      }
      for (ControlChannel::Pending& p : channel_.TakeExpired()) {
        if (std::holds_alternative<RegisterClientRequest>(p.body)) registering_ = false;
      }
    }
    // Leaving: withdraw credit so workers stop making batches for us, and free the rank.
    for (auto& [id, w] : workers_) SendCredit(w, 0);
    uint64_t deregister = channel_.Send(DeregisterRequest{core_->client_id, options_.job, options_.rank});
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (channel_.IsPending(deregister) && std::chrono::steady_clock::now() < deadline) {
      zmq::pollitem_t items[] = {{channel_.socket().handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 1, std::chrono::milliseconds(20));
      if (items[0].revents & ZMQ_POLLIN) DrainControl();
    }
  }

  void SendHeartbeat() {
    ClientHeartbeatRequest hb;
    hb.client_id = core_->client_id;
    hb.job = options_.job;
    hb.rank = options_.rank;
    hb.membership_version = membership_version_;
    {
      std::lock_guard<std::mutex> lock(core_->mu);
      hb.consumed = core_->consumed;
      hb.received_watermark = core_->received_watermark;
      hb.received_above.assign(core_->received_above.begin(), core_->received_above.end());
      hb.step_seconds = core_->stats.step_seconds;
      hb.stall_seconds = core_->stats.stall_seconds;
      hb.samples_delivered = core_->stats.samples_delivered;
      core_->ack_dirty = false;
    }
    channel_.Send(std::move(hb));
  }

  void SendCredit(WorkerConnection& w, uint32_t credits) {
    capnp::MallocMessageBuilder message(kControlFirstSegmentWords);
    auto msg = message.initRoot<wire::DataMessage>();
    msg.setProtocolVersion(wire::PROTOCOL_VERSION);
    auto c = msg.initCredit();
    c.setJob(options_.job);
    c.setRank(options_.rank);
    c.setClientId(core_->client_id);
    c.setCredits(credits);
    c.setMaxFrameBytes(options_.payload_frame_bytes);
    zmq::message_t frame = ToFrame(message);
    try {
      w.socket->send(frame, zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
    }
    w.credited = std::chrono::steady_clock::now();
  }

  void UpdateWorkers(const std::vector<WorkerInfo>& list) {
    std::set<std::string> present;
    for (const WorkerInfo& info : list) {
      present.insert(info.worker_id);
      auto it = workers_.find(info.worker_id);
      if (it != workers_.end() && it->second.endpoint == info.data_endpoint) continue;
      WorkerConnection w;
      w.endpoint = info.data_endpoint;
      w.socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
      SocketOptions o;
      o.max_message_bytes = static_cast<int64_t>(core_->spec.BatchBytes()) + (1 << 20);
      o.receive_hwm = 0;  // the coordinator's window, not a message count, bounds what can arrive
      ConfigureSocket(*w.socket, o);
      try {
        w.socket->connect(info.data_endpoint);
      } catch (const zmq::error_t& e) {
        STOKER_LOG(kWarning) << "cannot connect to worker " << info.worker_id << " at " << info.data_endpoint << ": "
                             << e.what();
        continue;
      }
      STOKER_LOG(kDebug) << "connected to worker " << info.worker_id << " at " << info.data_endpoint;
      workers_[info.worker_id] = std::move(w);
      SendCredit(workers_[info.worker_id], credits_);
    }
    for (auto it = workers_.begin(); it != workers_.end();) {
      it = present.count(it->first) ? std::next(it) : workers_.erase(it);
    }
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->stats.connected_workers = static_cast<uint32_t>(workers_.size());
    core_->worker_endpoints.clear();
    for (const auto& [id, w] : workers_) core_->worker_endpoints.push_back(id + " " + w.endpoint);
  }

  void DrainControl() {
    channel_.Receive([this](ControlChannel::Pending& request, DecodedReply& reply) {
      {
        std::lock_guard<std::mutex> lock(core_->mu);
        core_->coordinator_heard = std::chrono::steady_clock::now();
      }
      if (std::holds_alternative<RegisterClientRequest>(request.body)) {
        registering_ = false;
        if (!reply.status.ok()) {
          STOKER_LOG(kWarning) << "re-registration refused: " << reply.status.ToString();
          if (reply.status.code() != StatusCode::kUnavailable) {
            // Another client holds the rank now (we were gone too long), or the job is gone: this client's
            // stream has ended. Stop asking workers for batches and tell the application.
            LoseSession(reply.status.WithContext("this client lost its rank"));
          }
        } else if (auto* r = std::get_if<RegisterClientResponse>(&reply.body)) {
          {
            std::lock_guard<std::mutex> lock(core_->mu);
            core_->lease_attempts.clear();  // a new coordinator session: its attempts are the ones that count
          }
          membership_version_ = r->membership_version;
          UpdateWorkers(r->workers);
        }
      } else if (std::holds_alternative<ClientHeartbeatRequest>(request.body)) {
        HandleHeartbeatReply(reply);
      }
    });
  }

  void HandleHeartbeatReply(const DecodedReply& reply) {
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
    std::lock_guard<std::mutex> lock(core_->mu);
    const Plan& plan = *core_->plan;
    for (const LeaseRef& lease : r->leases) {
      if (lease.unit >= plan.total_units() || plan.UnitEnd(lease.unit) <= core_->next) continue;
      // The coordinator's word is the truth: after it restarts without its journal attempts start again low.
      core_->lease_attempts[lease.unit] = lease.attempt;
    }
    // Forget units wholly delivered: any copy of theirs is a duplicate by index anyway.
    while (!core_->lease_attempts.empty() && plan.UnitEnd(core_->lease_attempts.begin()->first) <= core_->next) {
      core_->lease_attempts.erase(core_->lease_attempts.begin());
    }
  }

  void DrainWorker(WorkerConnection& w) {
    for (int i = 0; i < 64; ++i) {
      zmq::message_t header;
      try {
        if (!w.socket->recv(header, zmq::recv_flags::dontwait)) return;
      } catch (const zmq::error_t&) {
        return;
      }
      // The payload's frames, as many as the header will say; never more bytes than a batch has, nor more frames
      // than max_payload_frames_ (a sender that goes on has its frames discarded and the batch dropped: memory
      // stays bounded by one batch).
      std::vector<zmq::message_t> payload;
      size_t payload_bytes = 0;
      bool too_many = false;
      bool more = header.more();
      while (more) {
        zmq::message_t frame;
        try {
          if (!w.socket->recv(frame, zmq::recv_flags::dontwait)) break;  // ZeroMQ delivers a message whole
        } catch (const zmq::error_t&) {
          break;
        }
        more = frame.more();
        payload_bytes += frame.size();
        if (!too_many && payload.size() < max_payload_frames_ && payload_bytes <= core_->spec.BatchBytes()) {
          payload.push_back(std::move(frame));
        } else {
          too_many = true;
        }
      }
      if (too_many) payload.clear();
      Accept(std::move(header), std::move(payload));
    }
  }

  void Drop(uint64_t ClientStats::*counter, const std::string& why) {
    std::lock_guard<std::mutex> lock(core_->mu);
    ++(core_->stats.*counter);
    if (!why.empty()) STOKER_LOG(kDebug) << "dropped a batch: " << why;
  }

  void Accept(zmq::message_t header_frame, std::vector<zmq::message_t> payload) {
    const JobSpec& spec = core_->spec;
    auto parsed = ParsedFrame::Parse(std::move(header_frame), BatchHeaderReaderOptions(spec.batch_size));
    if (!parsed.ok()) return Drop(&ClientStats::dropped_bad_frame, parsed.status().message());
    auto batch = std::make_unique<ReceivedBatch>();
    Status error_from_worker;
    Status valid = CatchWireErrors("batch header", [&]() -> Status {
      auto msg = (*parsed)->Root<wire::DataMessage>();
      if (msg.getProtocolVersion() != wire::PROTOCOL_VERSION) {
        return InvalidArgumentError("protocol version " + std::to_string(msg.getProtocolVersion()));
      }
      if (msg.which() == wire::DataMessage::ERROR) {
        error_from_worker = FromWire(msg.getError().getStatus());
        return Status::Ok();
      }
      if (msg.which() != wire::DataMessage::BATCH) return InvalidArgumentError("not a batch");
      auto h = msg.getBatch();
      if (std::string_view(h.getJob().cStr()) != spec.name || h.getRank() != options_.rank) {
        return InvalidArgumentError("batch for another job or rank");
      }
      if (h.getEpoch() >= spec.epochs || h.getIndex() >= core_->steps) return InvalidArgumentError("index out of range");
      if (h.getCount() != spec.batch_size || h.getHeight() != spec.pipeline.output_height ||
          h.getWidth() != spec.pipeline.output_width || h.getChannels() != 3) {
        return InvalidArgumentError("shape differs from the job's");
      }
      auto labels = h.getLabels();
      auto ids = h.getSampleIds();
      auto flags = h.getFlags();
      if (labels.size() != spec.batch_size || ids.size() != spec.batch_size || flags.size() != spec.batch_size) {
        return InvalidArgumentError("list lengths differ from the batch size");
      }
      const uint32_t frames = std::max<uint32_t>(h.getPayloadFrames(), 1);
      if (payload.empty() || payload.size() != frames) {
        return InvalidArgumentError("the header announces " + std::to_string(frames) + " payload frames, " +
                                    std::to_string(payload.size()) + " came");
      }
      size_t total = 0;
      for (const zmq::message_t& f : payload) {
        if (frames > 1 && (options_.payload_frame_bytes == 0 || f.size() > options_.payload_frame_bytes)) {
          return InvalidArgumentError("payload frames larger than this client asked for");
        }
        total += f.size();
      }
      if (h.getPayloadBytes() != spec.BatchBytes() || total != spec.BatchBytes()) {
        return InvalidArgumentError("payload length differs from count x height x width x channels");
      }
      batch->epoch = h.getEpoch();
      batch->index = h.getIndex();
      batch->global = uint64_t{batch->epoch} * core_->steps + batch->index;
      batch->rank = h.getRank();
      batch->unit = h.getUnit();
      batch->attempt = h.getAttempt();
      batch->worker_id = h.getWorkerId().cStr();
      batch->count = h.getCount();
      batch->height = h.getHeight();
      batch->width = h.getWidth();
      batch->channels = h.getChannels();
      batch->labels.resize(spec.batch_size);
      batch->sample_ids.resize(spec.batch_size);
      batch->flags.resize(spec.batch_size);
      for (uint32_t i = 0; i < spec.batch_size; ++i) {
        batch->labels[i] = labels[i];
        batch->sample_ids[i] = ids[i];
        batch->flags[i] = flags[i];
      }
      return Status::Ok();
    });
    if (!valid.ok()) return Drop(&ClientStats::dropped_bad_frame, valid.message());
    if (!error_from_worker.ok()) {
      {
        std::lock_guard<std::mutex> lock(core_->mu);
        ++core_->stats.worker_errors;
      }
      STOKER_LOG(kWarning) << "a worker cannot serve job " << options_.job << ": " << error_from_worker.ToString();
      // Workers keep saying they cannot serve the job and none has sent a batch since: tell the application
      // rather than let it wait forever (e.g. no worker can open the manifest).
      auto now = std::chrono::steady_clock::now();
      if (!first_worker_error_) first_worker_error_ = now;
      if (now - *first_worker_error_ > kWorkerErrorGrace) {
        core_->Fail(error_from_worker.WithContext("no worker can serve this job (for " +
                                                  std::to_string(kWorkerErrorGrace.count() / 1000) + " s)"));
      }
      return;
    }
    first_worker_error_.reset();
    batch->pixel_bytes = spec.BatchBytes();
    batch->payload = std::move(payload[0]);
    batch->more_payload.reserve(payload.size() - 1);
    for (size_t i = 1; i < payload.size(); ++i) batch->more_payload.push_back(std::move(payload[i]));
    if (!batch->more_payload.empty() && !core_->stager) {
      zmq::message_t joined(batch->pixel_bytes);  // the host path hands over one contiguous buffer
      batch->CopyPayloadTo(static_cast<uint8_t*>(joined.data()));
      batch->payload = std::move(joined);
      batch->more_payload.clear();
    }
    const uint64_t g = batch->global;
    {
      std::lock_guard<std::mutex> lock(core_->mu);
      auto known = core_->lease_attempts.find(batch->unit);
      if (known != core_->lease_attempts.end() && batch->attempt < known->second) {
        ++core_->stats.dropped_stale_attempt;
        return;
      }
      size_t slot = g % core_->window;
      if (g < core_->next || g < core_->start ||
          (core_->state[slot] != SlotState::kFree && core_->slot_index[slot] == g)) {
        ++core_->stats.dropped_duplicate;
        return;
      }
      if (g >= core_->consumed + core_->window || core_->state[slot] != SlotState::kFree) {
        ++core_->stats.dropped_out_of_window;
        return;
      }
      ++core_->stats.batches_received;
      core_->stats.bytes_received += batch->pixel_bytes;
      core_->state[slot] = SlotState::kFilled;
      core_->slot_index[slot] = g;
      core_->slots[slot] = std::move(batch);
      if (g == core_->received_watermark) {
        ++core_->received_watermark;
        while (!core_->received_above.empty() && *core_->received_above.begin() == core_->received_watermark) {
          core_->received_above.erase(core_->received_above.begin());
          ++core_->received_watermark;
        }
      } else if (g > core_->received_watermark) {
        core_->received_above.insert(g);
      }
      core_->ack_dirty = true;
    }
    core_->ready.notify_all();
    core_->stage_wanted.notify_all();
  }

  static constexpr std::chrono::milliseconds kCreditRefresh{1000};
  static constexpr std::chrono::milliseconds kWorkerErrorGrace{15000};

  void LoseSession(const Status& why) {
    for (auto& [id, w] : workers_) SendCredit(w, 0);
    workers_.clear();
    session_lost_ = true;
    core_->Fail(why);
  }

  const ClientOptions options_;
  std::shared_ptr<ClientCore> core_;
  RealClock clock_;
  zmq::context_t context_;
  ControlChannel channel_;
  std::map<std::string, WorkerConnection> workers_;
  uint64_t membership_version_ = 0;
  std::chrono::milliseconds heartbeat_interval_{250};
  uint32_t credits_ = 1;
  bool registering_ = false;
  bool session_lost_ = false;  // the coordinator gave the rank to another client: no more credits, no more acks
  std::optional<SteadyTime> first_worker_error_;  // since the last accepted batch
  // The most payload frames one batch may come in: 1, or with payload_frame_bytes one per 4 KiB of a batch (a
  // worker may cut finer than asked; set once the job's shape is known).
  size_t max_payload_frames_ = 1;
  std::thread thread_;
};

// ---- Client ----------------------------------------------------------------------------------------------------

StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) { return Connect(options, {}); }

StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options, const StagerFactory& make_stager) {
  if (options.job.empty()) return InvalidArgumentError("ClientOptions.job is empty");
  if (options.prefetch == 0) return InvalidArgumentError("ClientOptions.prefetch must be at least 1");
  if (options.credits_per_worker == 0) return InvalidArgumentError("ClientOptions.credits_per_worker must be >= 1");
  if (options.payload_frame_bytes != 0 && options.payload_frame_bytes < kMinPayloadFrameBytes) {
    return InvalidArgumentError("ClientOptions.payload_frame_bytes must be 0 (one frame) or at least " +
                                std::to_string(kMinPayloadFrameBytes) + " bytes");
  }
  if (options.spec && options.spec->name != options.job) {
    return InvalidArgumentError("ClientOptions.job '" + options.job + "' differs from spec.name '" +
                                options.spec->name + "'");
  }
  std::optional<ResumePoint> resume;
  if (!options.resume_token.empty()) {
    STOKER_ASSIGN_OR_RETURN(CheckpointToken token, DecodeCheckpointToken(options.resume_token));
    if (token.job != options.job || token.rank != options.rank) {
      return InvalidArgumentError("the checkpoint token is for job '" + token.job + "' rank " +
                                  std::to_string(token.rank) + ", not job '" + options.job + "' rank " +
                                  std::to_string(options.rank));
    }
    resume = ResumePoint{token.position, token.spec_fingerprint};
  }
  auto core = std::make_shared<ClientCore>();
  core->client_id = options.client_id.empty() ? NewPeerId("c") : options.client_id;
  core->doorbell = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (core->doorbell < 0) return InternalError("eventfd failed");
  auto client = std::unique_ptr<Client>(new Client());
  client->core_ = core;
  client->rank_ = options.rank;
  client->io_ = std::make_unique<IoThread>(options, core);
  auto registered = client->io_->Register(resume);
  if (!registered.ok()) return registered.status();
  core->spec = registered->spec;
  auto plan = Plan::Make(registered->spec, registered->samples_per_epoch);
  if (!plan.ok()) {
    client->io_->Start(*registered);  // only to give the rank back as it closes
    return plan.status().WithContext("the job the coordinator described is inconsistent");
  }
  core->plan = *plan;
  core->steps = registered->steps_per_epoch;
  core->total = registered->steps_per_epoch * registered->spec.epochs;
  core->window = options.prefetch;
  core->start = registered->start_batch;
  core->next = core->consumed = core->received_watermark = core->staged = registered->start_batch;
  core->slots.resize(core->window);
  core->state.assign(core->window, SlotState::kFree);
  core->slot_index.assign(core->window, 0);
  core->stall_probe = options.stall_probe;
  core->last_return = std::chrono::steady_clock::now();
  core->stats.last_batch_unix_seconds = UnixSeconds();
  if (make_stager) {
    auto stager = make_stager(core->spec);
    if (!stager.ok()) {
      client->io_->Start(*registered);  // only to give the rank back as it closes
      return stager.status();
    }
    if ((*stager)->depth() == 0 || (*stager)->depth() > core->window) {
      client->io_->Start(*registered);
      return InvalidArgumentError("the device depth (" + std::to_string((*stager)->depth()) +
                                  ") must be between 1 and the prefetch window (" + std::to_string(core->window) + ")");
    }
    core->stager = std::move(*stager);
    client->stage_thread_ = std::thread([core] { core->StageLoop(); });
  }
  client->io_->Start(*registered);
  client->JoinMetrics(options);
  return client;
}

void Client::JoinMetrics(const ClientOptions& options) {
  ClientCore& c = *core_;
  std::string gpu_uuid = internal::GpuUuidForOrdinal(options.gpu);
  c.labels = {{"pipeline", c.spec.name},
              {"rank", std::to_string(rank_)},
              {"gpu", options.gpu >= 0 ? std::to_string(options.gpu) : "none"},
              {"gpu_uuid", gpu_uuid}};
  std::weak_ptr<ClientCore> weak = core_;
  internal::ClientProcess::Member member;
  member.collect = [weak](MetricFamilies& out) {
    if (auto core = weak.lock()) internal::CollectClient(*core, out);
  };
  member.live = [weak]() -> Status {
    auto core = weak.lock();
    if (!core) return Status::Ok();
    const int64_t turned = core->io_turned_ns.load(std::memory_order_relaxed);
    const auto stuck = std::chrono::steady_clock::now().time_since_epoch() - std::chrono::steady_clock::duration(turned);
    if (turned != 0 && stuck > std::chrono::seconds(10)) {
      return UnavailableError("the client's I/O thread has not turned for " +
                              std::to_string(std::chrono::duration_cast<std::chrono::seconds>(stuck).count()) + " s");
    }
    return Status::Ok();
  };
  member.ready = [weak]() -> Status {
    auto core = weak.lock();
    if (!core) return UnavailableError("closed");
    // Ready = connected: the rank is ours and the coordinator answered within a few heartbeats. Batches may
    // still flow from workers while the coordinator is away; /readyz says it is away.
    std::lock_guard<std::mutex> lock(core->mu);
    if (!core->fatal.ok()) return core->fatal;
    const auto silent = std::chrono::steady_clock::now() - core->coordinator_heard;
    const auto limit = std::max<std::chrono::steady_clock::duration>(4 * core->heartbeat_interval,
                                                                     std::chrono::seconds(2));
    if (silent > limit) {
      return UnavailableError("no reply from the coordinator for " +
                              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(silent).count()) +
                              " ms");
    }
    return Status::Ok();
  };
  member.state = [weak]() -> std::string {
    auto core = weak.lock();
    return core ? internal::ClientStateJson(*core) : std::string("{}");
  };
  member.gpu = options.gpu;
  member.gpu_uuid = gpu_uuid;
  auto& process = internal::ClientProcess::Get();
  metrics_member_ = process.Join(std::move(member));
  std::string listen = options.metrics_listen;
  if (listen.empty()) {
    if (const char* env = std::getenv("STOKER_METRICS_LISTEN")) listen = env;
  }
  if (listen.empty()) return;
  auto served = process.Serve(listen);
  std::lock_guard<std::mutex> lock(c.mu);
  if (served.ok()) {
    c.metrics_address = *served;
  } else {
    STOKER_LOG(kWarning) << "client metrics endpoint on " << listen << " not started: "
                         << served.status().message() << " (training goes on without it)";
  }
}

Client::~Client() {
  if (metrics_member_ != 0) internal::ClientProcess::Get().Leave(metrics_member_);
  io_.reset();  // joins the I/O thread, which withdraws credits and deregisters
  if (stage_thread_.joinable()) stage_thread_.join();  // the I/O thread's end set `closing`
}

std::string Client::Checkpoint() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  return EncodeCheckpointToken({core_->spec.name, rank_, core_->next, SpecFingerprint(core_->spec)});
}

StatusOr<Delivery> Client::Next(std::chrono::milliseconds timeout) {
  ClientCore& c = *core_;
  std::unique_lock<std::mutex> lock(c.mu);
  Delivery d;
  if (c.end_of_epoch_pending) {
    c.end_of_epoch_pending = false;
    d.kind = Delivery::Kind::kEndOfEpoch;
    d.epoch = c.ended_epoch;
    return d;
  }
  if (c.next >= c.total) {
    d.kind = Delivery::Kind::kEndOfJob;
    d.epoch = c.spec.epochs;
    return d;
  }
  const size_t slot = c.next % c.window;
  if (c.stager && c.next >= c.consumed + c.stager->depth()) {
    // The batch could only be staged into a slot the consumer still holds: waiting would never end.
    return ResourceExhaustedError("the consumer holds " + std::to_string(c.next - c.consumed) +
                                   " unreleased batches, as many as the device depth (" +
                                   std::to_string(c.stager->depth()) +
                                   "): release one before asking for the next, or raise the depth");
  }
  auto ready = [&] {
    return !c.fatal.ok() || (c.state[slot] == SlotState::kFilled && c.slot_index[slot] == c.next &&
                             (!c.stager || c.next < c.staged));
  };
  double waited = 0;
  std::optional<std::pair<SteadyTime, SteadyTime>> probe_window;  // a wait for the stall probe to judge
  if (!ready()) {
    const auto start = std::chrono::steady_clock::now();
    bool arrived;
    if (timeout == std::chrono::milliseconds::max()) {
      c.ready.wait(lock, ready);
      arrived = true;
    } else {
      arrived = c.ready.wait_for(lock, timeout, ready);
    }
    const auto end = std::chrono::steady_clock::now();
    waited = std::chrono::duration<double>(end - start).count();
    c.stats.wait_seconds += waited;
    if (!c.delivered_any) {
      c.stats.startup_seconds += waited;  // before the first batch the consumer has nothing to overlap with
    } else if (c.stall_probe) {
      probe_window.emplace(start, end);  // asked after the lock is dropped: a probe may be slow, or call Stats()
    } else {
      c.stats.stall_seconds += waited;
    }
    if (!arrived) {
      Status late = DeadlineExceededError("no batch " + std::to_string(c.next % c.steps) + " of epoch " +
                                          std::to_string(c.next / c.steps) + " within " +
                                          std::to_string(timeout.count()) + " ms (" +
                                          std::to_string(c.stats.connected_workers) + " workers connected)");
      lock.unlock();
      AddProbedStall(c, probe_window, waited);
      return late;
    }
  }
  if (!c.fatal.ok()) return c.fatal;
  std::unique_ptr<ReceivedBatch> data = std::move(c.slots[slot]);
  c.state[slot] = SlotState::kDelivered;
  ++c.next;
  ++c.stats.batches_delivered;
  c.stats.samples_delivered += data->count;
  const auto now = std::chrono::steady_clock::now();
  if (c.delivered_any) {
    const double step = std::chrono::duration<double>(now - c.last_return).count();
    c.stats.step_seconds += step;
    c.step_histogram.Observe(step);
    c.wait_histogram.Observe(waited);
  }
  c.delivered_any = true;
  c.last_return = now;
  c.stats.last_batch_unix_seconds = UnixSeconds();
  if (c.next >= c.total) c.stats.end_of_job = true;
  d.kind = Delivery::Kind::kBatch;
  d.epoch = data->epoch;
  if (data->index + 1 == c.steps) {
    c.end_of_epoch_pending = true;
    c.ended_epoch = data->epoch;
  }
  lock.unlock();
  AddProbedStall(c, probe_window, waited);
  d.batch = Batch(core_, std::move(data));
  return d;
}

Status Client::PutBack(Batch batch) {
  ClientCore& c = *core_;
  if (!batch.valid() || batch.core_ != core_) return InvalidArgumentError("not a batch of this client");
  std::lock_guard<std::mutex> lock(c.mu);
  const uint64_t g = batch.data_->global;
  const size_t slot = g % c.window;
  if (g + 1 != c.next || c.state[slot] != SlotState::kDelivered || c.slot_index[slot] != g) {
    return FailedPreconditionError("only the batch Next() returned last can be put back");
  }
  const uint32_t count = batch.data_->count;
  c.slots[slot] = std::move(batch.data_);
  batch.core_.reset();  // nothing to release: the slot is filled again
  c.state[slot] = SlotState::kFilled;
  c.next = g;
  --c.stats.batches_delivered;
  c.stats.samples_delivered -= count;
  c.stats.end_of_job = false;
  c.end_of_epoch_pending = false;  // its end of epoch comes again after it
  return Status::Ok();
}

const JobSpec& Client::spec() const { return core_->spec; }
uint64_t Client::steps_per_epoch() const { return core_->steps; }
uint64_t Client::start_batch() const { return core_->start; }
const std::string& Client::client_id() const { return core_->client_id; }

ClientStats Client::Stats() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  ClientStats s = core_->stats;
  s.position = core_->next;
  uint32_t filled = 0;
  for (SlotState st : core_->state) filled += st == SlotState::kFilled;
  s.prefetched = filled;
  s.metrics_address = core_->metrics_address;
  return s;
}

}  // namespace stoker
