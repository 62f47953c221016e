// The worker's transport adapter: the I/O thread's loop around WorkerImpl (worker/impl.h). It owns both sockets —
// a DEALER to the coordinator and the ROUTER clients connect to — the doorbell the pipeline threads ring, the pipeline
// threads themselves and the batch buffers; it turns what arrives into calls on the Impl and carries out what the
// Impl asks for (requests, errors to clients, batches to build, jobs to load).
#include "worker/worker.h"

#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <opencv2/core.hpp>
#include <thread>
#include <vector>

#include "wire/control_channel.h"
#include "auth/curve.h"
#include "wire/data_codec.h"
#include "base/json_writer.h"
#include "base/logging.h"
#include "base/metrics.h"
#include "base/sync.h"
#include "base/task_pool.h"
#include "wire/frames.h"
#include "worker/batch_buffer.h"
#include "worker/batch_build.h"
#include "worker/batch_sender.h"
#include "worker/data_port.h"
#include "worker/impl.h"

namespace stoker::worker {
namespace {

constexpr const char* kStages[] = {"read", "decode", "augment", "collate", "send"};

void Ring(int doorbell) {
  uint64_t one = 1;
  ssize_t n = ::write(doorbell, &one, sizeof(one));
  (void)n;  // the eventfd's counter cannot overflow at one ring per batch
}

}  // namespace

class Worker::Adapter {
 public:
  Adapter(const WorkerOptions& options, Env& env, const Clock& clock, zmq::context_t& context)
      : options_(options),
        env_(env),
        clock_(clock),
        id_(options.worker_id.empty() ? NewPeerId("w") : options.worker_id),
        threads_(options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency())),
        context_(context),
        control_(context, zmq::socket_type::dealer),
        pool_(std::make_shared<BatchBufferPool>()),
        storage_(MakeWorkerStorage(options.storage, options.read_ahead_bytes)),
        impl_(options, id_, threads_, clock, counters_),
        data_port_(context, pool_, id_, Histogram("collate"), Histogram("send"), transport_errors_) {
    ConfigureControlSocket(control_);
    if (options.inject_wrong_samples) data_port_.sender().InjectWrongSamples();
    doorbell_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    STOKER_CHECK(doorbell_ >= 0, "eventfd failed");
    cv::setNumThreads(0);  // parallelism is across samples; OpenCV must not spawn its own threads per call
    tasks_ = std::make_unique<TaskPool<ThreadContext>>(threads_);
  }

  ~Adapter() {
    tasks_.reset();  // joins the pipeline threads before the batches they reference go away
    for (auto& [name, f] : loading_) f.wait();
    ::close(doorbell_);
  }

  const std::string& id() const { return id_; }

  StatusOr<std::string> Bind() {
    STOKER_RETURN_IF_ERROR(SecureSockets());
    STOKER_ASSIGN_OR_RETURN(std::string bound, data_port_.Bind(options_.listen));
    // A node-local worker's socket is unsealed: only this user may connect, whatever the directory's mode (a pod's
    // emptyDir is 0777) or the umask.
    if (!options_.local_group.empty() && ::chmod(bound.substr(std::strlen("ipc://")).c_str(), 0600) != 0) {
      return FailedPreconditionError("cannot make the node-local socket " + bound + " this user's only: " +
                                     std::strerror(errno));
    }
    advertised_ = options_.advertise_endpoint.empty() ? AdvertisedEndpoint(bound, options_.advertise_host)
                                                      : options_.advertise_endpoint;
    try {
      control_.connect(options_.coordinator);
    } catch (const zmq::error_t& e) {
      return InvalidArgumentError("cannot connect to coordinator '" + options_.coordinator + "': " + e.what());
    }
    PublishState(clock_.Now());  // /state says who this worker is from the moment its endpoint is published
    return advertised_;
  }

  Status Run(const std::atomic<bool>& stop, const std::atomic<bool>& drain) {
    impl_.Register(advertised_, data_port_.sealed());
    CarryOut();
    last_turn_ = clock_.Now();
    while (!stop.load()) {
      const TimePoint now = clock_.Now();
      watch_.Beat();
      AccountIdleThreads(now);
      if (now >= next_state_publish_) PublishState(now);
      if (drain.load()) impl_.StartDrain();
      if (impl_.DrainDue()) return FinishDrain(stop);
      zmq::pollitem_t items[] = {{control_.handle(), 0, ZMQ_POLLIN, 0},
                                 {data_port_.socket().handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, doorbell_, ZMQ_POLLIN, 0}};
      STOKER_RETURN_IF_ERROR(PollOnce(items, std::chrono::milliseconds(20)).WithContext("worker"));
      if (items[0].revents & ZMQ_POLLIN) DrainControl();
      if (items[1].revents & ZMQ_POLLIN) DrainData();
      if (items[2].revents & ZMQ_POLLIN) {
        uint64_t ignored;
        ssize_t n = ::read(doorbell_, &ignored, sizeof(ignored));
        (void)n;  // only wakes the poll
      }
      FinishLoads();
      SendCompleted();
      impl_.Tick();
      CarryOut();
    }
    return CancelledError("stopped");
  }

  WorkerStats Stats() const {
    MutexLock lock(stats_mu_);
    WorkerStats s = stats_;
    s.samples = counters_.samples.load();
    s.quarantined = counters_.quarantined.load();
    s.quarantined_remembered = counters_.remembered.load();
    s.gpu_sent_file = counters_.sent_file.load();
    s.gpu_sent_cut = counters_.sent_cut.load();
    s.gpu_sent_pixels = counters_.sent_pixels.load();
    s.bytes_read = counters_.bytes_read.load();
    s.busy_seconds = counters_.busy_ns.load() * 1e-9;
    s.read_seconds = counters_.read_ns.load() * 1e-9;
    s.decode_seconds = counters_.decode_ns.load() * 1e-9;
    s.augment_seconds = counters_.augment_ns.load() * 1e-9;
    s.quarantine_reasons = counters_.QuarantineReasons();
    s.transport_errors = transport_errors_.Counts();
    s.threads = threads_;
    if (const ZapHandler* zap = data_port_.zap()) {
      s.handshakes_admitted = zap->admitted();
      s.handshakes_refused = zap->Refused();
    }
    const FetchQueue::Gauges ahead = storage_->fetcher->queue()->gauges();
    s.read_ahead_bytes = ahead.bytes;
    s.read_ahead_units = ahead.units;
    s.read_ahead_queued = ahead.queued;
    s.read_ahead_limit_bytes = ahead.budget;
    return s;
  }

  const storage::StorageStats& storage_stats() const { return storage_->stats; }

  const WorkerHistograms& histograms() const { return histograms_; }
  const LoopWatch& watch() const { return watch_; }

  std::string StateJson() const {
    MutexLock lock(stats_mu_);
    return state_json_;
  }

 private:
  std::shared_ptr<prometheus::Histogram> Histogram(const char* stage) {
    if (histograms_.stage_seconds.empty()) {
      for (const char* s : kStages) {
        histograms_.stage_seconds[s] = std::make_shared<prometheus::Histogram>(StepBuckets());
      }
    }
    return histograms_.stage_seconds.at(stage);
  }

  // CURVE toward the coordinator with the worker's key; the data port ticket-checked and sealed (DataPort).
  Status SecureSockets() {
    const Security& security = options_.security;
    if (security.insecure) return Status::Ok();
    std::vector<TrustedKey> coordinators = security.Trusted(Role::kCoordinator);
    if (coordinators.empty()) return FailedPreconditionError("the trust file has no coordinator key");
    MakeCurveClient(control_, security.own, coordinators.front().public_z85);
    if (!options_.local_group.empty()) {  // node-local: the socket's directory is the trust, nothing to seal
      STOKER_LOG(kInfo) << "CURVE on toward the coordinator: this worker is " << security.own.identity()
                        << ", node-local: batches go unsealed over " << options_.listen;
      return Status::Ok();
    }
    STOKER_RETURN_IF_ERROR(data_port_.Secure(context_, security));
    STOKER_LOG(kInfo) << "CURVE on: this worker is " << security.own.identity() << "; batches are sealed";
    return Status::Ok();
  }

  // Does what the Impl asked for: requests to the coordinator, errors to clients, batches to build, jobs to load.
  void CarryOut() {
    WorkerImpl::Outbox out = impl_.TakeOutbox();
    for (const RequestTracker::Pending& r : out.requests) SendControlFrame(control_, r.id, r.body, transport_errors_);
    for (const auto& [peer, error] : out.errors) data_port_.SendError(peer, error);
    if (!options_.skip_decode) StartReadAhead(out.builds);
    for (std::shared_ptr<BatchBuild>& build : out.builds) Build(std::move(build));
    for (const JobSpec& spec : out.loads) Load(spec);
    if (!out.ticket_key.empty()) data_port_.SetTicketKey(out.ticket_key);
    UpdateStats();
  }

  void DrainControl() {
    while (auto frame = ReceiveControlFrame(control_, transport_errors_)) {
      auto reply = DecodeReply(std::move(*frame));
      if (!reply.ok()) {
        STOKER_LOG(kWarning) << "bad reply from the coordinator: " << reply.status().ToString();
        continue;
      }
      impl_.HandleReply(*reply);
    }
  }

  // Credits from clients that pass the data port's checks (worker/data_port.h).
  void DrainData() {
    data_port_.Drain([this](const std::string& peer, const std::string& identity, const Credit& credit) {
      impl_.HandleCredit(peer, identity, credit);
    });
  }

  // ---- jobs and batches --------------------------------------------------------------------------------------

  // Opening a manifest reads all of it: off this thread, so heartbeats keep flowing meanwhile.
  void Load(const JobSpec& spec) {
    loading_[spec.name] = std::async(std::launch::async, [this, spec] {
      auto job = LoadJobContext(env_, spec, options_.manifest_root, options_.max_open_shards, id_, storage_.get());
      Ring(doorbell_);
      return job;
    });
  }

  void FinishLoads() {
    for (auto it = loading_.begin(); it != loading_.end();) {
      if (it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        ++it;
        continue;
      }
      auto job = it->second.get();
      const std::string name = it->first;
      it = loading_.erase(it);
      impl_.JobLoaded(name, std::move(job));
    }
  }

  // One pool task per sample, writing into the batch's buffer; the last one done rings the doorbell.
  void Build(std::shared_ptr<BatchBuild> build) {
    build->pool = pool_;
    build->buffer = pool_->Acquire(build->job->spec.BatchBytes());
    const uint32_t batch_size = build->job->spec.batch_size;
    for (uint32_t slot = 0; slot < batch_size; ++slot) {
      tasks_->Push([this, build, slot](ThreadContext& context) {
        context.limits = options_.jpeg_limits;
        counters_.active.fetch_add(1, std::memory_order_relaxed);
        if (options_.inject_sample_delay.count() > 0) InjectDelay(*build);
        BuildSample(*build, slot, context, options_.skip_decode, counters_);
        counters_.active.fetch_sub(1, std::memory_order_relaxed);
        if (build->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
          if (!build->crops.empty()) Compact(*build);
          Completed(build);
        }
      });
    }
  }

  // Stands for slow storage or a heavier pipeline (fault injection): the thread counts as busy.
  void InjectDelay(BatchBuild& build) {
    const auto began = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(options_.inject_sample_delay);
    const int64_t took =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - began).count();
    build.busy_ns.fetch_add(took, std::memory_order_relaxed);
    counters_.busy_ns.fetch_add(took, std::memory_order_relaxed);
  }

  // On a pipeline thread, when a batch's last sample is done.
  void Completed(const std::shared_ptr<BatchBuild>& build) {
    {
      MutexLock lock(completed_mu_);
      completed_.push_back(build);
    }
    Ring(doorbell_);
  }

  void SendCompleted() {
    std::vector<std::shared_ptr<BatchBuild>> done;
    {
      MutexLock lock(completed_mu_);
      done.swap(completed_);
    }
    for (auto& build : done) {
      std::optional<BatchRoute> route = impl_.RouteBatch(*build);
      if (!route) continue;  // its unit is no longer ours to send: the buffer returns to the pool
      std::shared_ptr<SealSession> seal_with;
      const DataPort::Step step =
          data_port_.Next(*build, route->peer, route->identity, route->max_frame_bytes, &seal_with);
      if (step == DataPort::Step::kSeal) {
        Seal(build, std::move(seal_with));
        continue;
      }
      const bool sent = step == DataPort::Step::kSend && data_port_.Send(route->peer, *build);
      impl_.BatchSent(*build, sent);
      if (!sent) continue;
      histograms_.stage_seconds.at("read")->Observe(build->read_ns.load() * 1e-9);
      histograms_.stage_seconds.at("decode")->Observe(build->decode_ns.load() * 1e-9);
      histograms_.stage_seconds.at("augment")->Observe(build->augment_ns.load() * 1e-9);
      MutexLock lock(stats_mu_);
      ++stats_.batches_sent;
      stats_.bytes_sent += build->payload_bytes;
    }
  }

  // Sealing is pipeline work: a pool task, ahead of the queued samples, encrypts the batch in place; then it is sent
  // like any finished batch.
  void Seal(const std::shared_ptr<BatchBuild>& build, std::shared_ptr<SealSession> session) {
    tasks_->PushFirst([this, build, session = std::move(session)](ThreadContext&) mutable {
      const auto began = std::chrono::steady_clock::now();
      BatchSender::Seal(*build, std::move(session));
      const int64_t took =
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - began).count();
      build->seal_ns.fetch_add(took, std::memory_order_relaxed);
      build->busy_ns.fetch_add(took, std::memory_order_relaxed);
      counters_.busy_ns.fetch_add(took, std::memory_order_relaxed);
      Completed(build);
    });
  }

  // ---- draining ----------------------------------------------------------------------------------------------

  Status FinishDrain(const std::atomic<bool>& stop) {
    impl_.AbandonAll();
    CarryOut();
    // Batches handed to ZeroMQ are on their way only once it has released their buffers: wait for that (within
    // the grace), or closing the socket would drop batches the coordinator was told were sent.
    while (data_port_.sender().in_flight() > 0 && clock_.Now() < impl_.drain_deadline() && !stop.load()) {
      PollControl(std::chrono::milliseconds(10));
    }
    const uint64_t id = impl_.Deregister();
    CarryOut();
    const TimePoint deadline = clock_.Now() + Millis(2000);
    while (impl_.IsPending(id) && clock_.Now() < deadline && !stop.load()) PollControl(std::chrono::milliseconds(50));
    STOKER_LOG(kInfo) << "drained" << (impl_.deregistered() ? " and deregistered" : " (coordinator did not answer)");
    return Status::Ok();
  }

  void PollControl(std::chrono::milliseconds timeout) {
    zmq::pollitem_t items[] = {{control_.handle(), 0, ZMQ_POLLIN, 0}};
    if (!PollOnce(items, timeout).ok()) return;  // a closing context: the deadline ends the wait
    if (items[0].revents & ZMQ_POLLIN) DrainControl();
    CarryOut();
  }

  // ---- what it looks like ------------------------------------------------------------------------------------

  // Charges the pipeline threads idle since the last turn to backpressure when clients are being served: they have
  // work to ask for, but the clients' credits or windows hold it back.
  void AccountIdleThreads(TimePoint now) {
    const Duration dt = now - last_turn_;
    last_turn_ = now;
    if (!impl_.serving()) return;
    const int idle = static_cast<int>(threads_) - counters_.active.load(std::memory_order_relaxed);
    if (idle <= 0) return;
    MutexLock lock(stats_mu_);
    stats_.backpressure_seconds += ToSeconds(dt) * idle;
  }

  void UpdateStats() {
    MutexLock lock(stats_mu_);
    const UnitCounts& units = impl_.unit_counts();
    stats_.registered = impl_.registered();
    stats_.draining = impl_.draining();
    stats_.units_done = units.done;
    stats_.units_revoked = units.revoked;
    stats_.units_fenced = units.fenced;
    stats_.units_abandoned = units.abandoned;
    stats_.units_undeliverable = units.undeliverable;
    const CreditRefusals& refused = impl_.credit_refusals();
    stats_.credits_malformed = refused.malformed;
    stats_.credits_failed_job = refused.failed_job;
    stats_.credits_busy = refused.busy;
    stats_.leases_held = impl_.units_held();
    stats_.streams = impl_.streams();
    stats_.bad_frames = data_port_.bad_frames();
    stats_.seal_refusals = data_port_.seal_refusals();
  }

  void PublishState(TimePoint now) {
    next_state_publish_ = now + Millis(1000);
    JsonWriter j;
    j.BeginObject()
        .Key("component").Value("worker")
        .Key("id").Value(id_)
        .Key("advertised").Value(advertised_)
        .Key("sealed").Value(data_port_.sealed())
        .Key("seal_sessions").Value(static_cast<uint64_t>(data_port_.seal_sessions()))
        .Key("coordinator").Value(options_.coordinator)
        .Key("registered").Value(impl_.registered())
        .Key("draining").Value(impl_.draining())
        .Key("threads").Value(threads_)
        .Key("busy_threads").Value(counters_.active.load());
    impl_.WriteState(j);
    j.Key("batches_in_flight").Value(data_port_.sender().in_flight()).EndObject();
    MutexLock lock(stats_mu_);
    state_json_ = j.str();
  }

  const WorkerOptions options_;
  Env& env_;
  const Clock& clock_;
  const std::string id_;
  const uint32_t threads_;
  zmq::context_t& context_;
  zmq::socket_t control_;
  std::shared_ptr<BatchBufferPool> pool_;
  std::unique_ptr<WorkerStorage> storage_;  // object storage: client, read-ahead threads (outlives the builds)
  BuildCounters counters_;  // shared with the pipeline threads (atomics)
  TransportErrors transport_errors_;
  WorkerHistograms histograms_;  // the map is fixed after construction; the histograms are thread-safe
  WorkerImpl impl_;              // I/O thread only
  DataPort data_port_;           // I/O thread only
  int doorbell_ = -1;
  std::string advertised_;

  // I/O thread only.
  TimePoint last_turn_;
  TimePoint next_state_publish_;
  std::map<std::string, std::future<StatusOr<std::shared_ptr<const JobContext>>>> loading_;

  // Shared with the pipeline threads.
  Mutex completed_mu_;
  std::vector<std::shared_ptr<BatchBuild>> completed_ STOKER_GUARDED_BY(completed_mu_);
  mutable Mutex stats_mu_;
  WorkerStats stats_ STOKER_GUARDED_BY(stats_mu_);
  std::string state_json_ STOKER_GUARDED_BY(stats_mu_) = "{}";
  RealClock watch_clock_;
  LoopWatch watch_{watch_clock_};

  // Last: the pipeline threads are joined first when the Adapter is destroyed.
  std::unique_ptr<TaskPool<ThreadContext>> tasks_;
};

Worker::Worker(const WorkerOptions& options, Env& env, const Clock& clock, zmq::context_t& context)
    : adapter_(std::make_unique<Adapter>(options, env, clock, context)) {}
Worker::~Worker() = default;
StatusOr<std::string> Worker::Bind() { return adapter_->Bind(); }
Status Worker::Run(const std::atomic<bool>& stop, const std::atomic<bool>& drain) {
  return adapter_->Run(stop, drain);
}
WorkerStats Worker::Stats() const { return adapter_->Stats(); }
const WorkerHistograms& Worker::histograms() const { return adapter_->histograms(); }
std::string Worker::StateJson() const { return adapter_->StateJson(); }
const LoopWatch& Worker::watch() const { return adapter_->watch(); }
const storage::StorageStats& Worker::storage_stats() const { return adapter_->storage_stats(); }
const std::string& Worker::id() const { return adapter_->id(); }

}  // namespace stoker::worker
