// The worker's I/O thread: the coordinator channel, the clients' streams, leases, sending. The pipeline threads'
// side (reading, decoding, augmenting one sample) is in batch_build.cc.
#include "worker/worker.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <opencv2/core.hpp>
#include <set>
#include <thread>
#include <vector>

#include "common/control_channel.h"
#include "common/json_writer.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/wire.h"
#include "stoker/schema/data.capnp.h"
#include "worker/batch_buffer.h"
#include "worker/batch_build.h"
#include "worker/thread_pool.h"

namespace stoker {
namespace {

// A client's stream of one rank: (job, rank, client id). Streams of a rank whose holder changed (a restarted
// training process) coexist until the old one's credit expires; each lease names the client it is for.
using StreamKey = std::tuple<std::string, uint32_t, std::string>;

// One batch's payload on its way out, shared by its frames: the buffer returns to the pool with the last one.
struct PayloadHint {
  std::shared_ptr<BatchBufferPool> pool;
  BatchBufferPool::Buffer buffer;
  std::shared_ptr<std::atomic<int64_t>> in_flight;  // payloads ZeroMQ has not finished sending
  std::shared_ptr<prometheus::Histogram> send_seconds;
  std::chrono::steady_clock::time_point queued;
  std::atomic<uint32_t> frames{1};                  // frames of this payload ZeroMQ still holds
};

// Runs on a ZeroMQ I/O thread once a payload frame has been written to the connection (or dropped with it).
void FreePayload(void* /*data*/, void* hint) {
  auto* h = static_cast<PayloadHint*>(hint);
  if (h->frames.fetch_sub(1) != 1) return;
  h->send_seconds->Observe(ToSeconds(std::chrono::steady_clock::now() - h->queued));
  h->pool->Release(h->buffer);
  h->in_flight->fetch_sub(1);
  delete h;
}


constexpr const char* kStages[] = {"read", "decode", "augment", "collate", "send"};

}  // namespace

class Worker::Impl {
 public:
  Impl(const WorkerOptions& options, Env& env, Clock& clock, zmq::context_t& context)
      : options_(options),
        env_(env),
        clock_(clock),
        id_(options.worker_id.empty() ? NewPeerId("w") : options.worker_id),
        channel_(context, clock, options.request_timeout),
        data_(context, zmq::socket_type::router),
        pool_(std::make_shared<BatchBufferPool>()) {
    threads_ = options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
    SocketOptions data_options;
    data_options.max_message_bytes = 64 << 10;  // only credits come in
    data_options.router_mandatory = true;       // a batch for a vanished client must fail, not vanish
    data_options.router_handover = true;
    data_options.send_hwm = 0;                  // credits bound what is queued, not a message count
    ConfigureSocket(data_, data_options);
    doorbell_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    STOKER_CHECK(doorbell_ >= 0, "eventfd failed");
    cv::setNumThreads(0);  // parallelism is across samples; OpenCV must not spawn its own threads per call
    for (const char* stage : kStages) {
      histograms_.stage_seconds[stage] = std::make_shared<prometheus::Histogram>(StepBuckets());
    }
    tasks_ = std::make_unique<TaskPool<ThreadContext>>(threads_);
  }

  ~Impl() {
    tasks_.reset();  // joins the pipeline threads before the batches they reference go away
    for (auto& [name, f] : loading_) f.wait();
    ::close(doorbell_);
  }

  const std::string& id() const { return id_; }

  StatusOr<std::string> Bind() {
    STOKER_ASSIGN_OR_RETURN(std::string bound, BindSocket(data_, options_.listen));
    advertised_ = options_.advertise_endpoint.empty() ? AdvertisedEndpoint(bound, options_.advertise_host)
                                                      : options_.advertise_endpoint;
    STOKER_RETURN_IF_ERROR(channel_.Connect(options_.coordinator));
    return advertised_;
  }

  Status Run(const std::atomic<bool>& stop, const std::atomic<bool>& drain) {
    SendRegister();
    last_turn_ = clock_.Now();
    while (!stop.load()) {
      TimePoint now = clock_.Now();
      watch_.Beat();
      AccountIdleThreads(now);
      if (now >= next_state_publish_) PublishState(now);
      if (drain.load() && !draining_) {
        draining_ = true;
        drain_deadline_ = now + options_.drain_grace;
        STOKER_LOG(kInfo) << "draining: " << units_.size() << " units in hand, grace "
                          << ToMillis(options_.drain_grace) << " ms";
        SendHeartbeat();
      }
      if (draining_ && (units_.empty() || now >= drain_deadline_)) return FinishDrain(stop);

      zmq::pollitem_t items[] = {{channel_.socket().handle(), 0, ZMQ_POLLIN, 0},
                                 {data_.handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, doorbell_, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 3, std::chrono::milliseconds(20));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) return UnavailableError(std::string("worker poll failed: ") + e.what());
      }
      if (items[0].revents & ZMQ_POLLIN) DrainControl();
      if (items[1].revents & ZMQ_POLLIN) DrainData();
      if (items[2].revents & ZMQ_POLLIN) {
        uint64_t ignored;
        ssize_t n = ::read(doorbell_, &ignored, sizeof(ignored));
        (void)n;
      }
      FinishLoads();
      SendCompleted();
      Timers();
      if (registered_ && !draining_) RequestLeases();
    }
    return CancelledError("stopped");
  }

  WorkerStats Stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    WorkerStats s = stats_;
    s.samples = counters_.samples.load();
    s.quarantined = counters_.quarantined.load();
    s.bytes_read = counters_.bytes_read.load();
    s.busy_seconds = counters_.busy_ns.load() * 1e-9;
    s.read_seconds = counters_.read_ns.load() * 1e-9;
    s.decode_seconds = counters_.decode_ns.load() * 1e-9;
    s.augment_seconds = counters_.augment_ns.load() * 1e-9;
    s.quarantine_reasons = counters_.QuarantineReasons();
    s.threads = threads_;
    return s;
  }

  const WorkerHistograms& histograms() const { return histograms_; }
  const LoopWatch& watch() const { return watch_; }

  std::string StateJson() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return state_json_;
  }

 private:
  struct Stream {
    std::string routing_id;
    uint32_t credits = 0;
    uint64_t max_frame_bytes = 0;  // 0: each payload in one frame
    TimePoint refreshed;
    uint64_t lease_request = 0;  // id of the lease request in flight for this stream, 0 if none
    bool job_done = false;
  };
  struct UnitWork {
    LeaseGrant lease;    // names the client the batches are for
    TimePoint expires;   // self-fencing: past this without a renewal, nothing more of the unit is sent
    uint32_t to_send = 0;
    uint32_t sent = 0;
    std::vector<QuarantineReport> quarantined;
    std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  };
  struct FailedJob {
    Status status;
    TimePoint retry_at;
  };

  // ---- coordinator -------------------------------------------------------------------------------------------

  void SendRegister() { channel_.Send(RegisterWorkerRequest{id_, advertised_, threads_, GetBuildInfo().version}); }

  void SendHeartbeat() {
    WorkerHeartbeatRequest hb{id_, {}, draining_, counters_.busy_ns.load() * 1e-9, counters_.samples.load()};
    for (const auto& [key, unit] : units_) {
      hb.leases.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), unit.lease.attempt});
    }
    channel_.Send(std::move(hb));
    next_heartbeat_ = clock_.Now() + heartbeat_interval_;
  }

  void DrainControl() {
    channel_.Receive([this](ControlChannel::Pending& request, DecodedReply& reply) { HandleReply(request, reply); });
  }

  void HandleReply(ControlChannel::Pending& request, DecodedReply& reply) {
    RequestBody& body = request.body;
    bool heartbeat_or_lease =
        std::holds_alternative<WorkerHeartbeatRequest>(body) || std::holds_alternative<LeaseRequest>(body);
    if (reply.status.code() == StatusCode::kFailedPrecondition && heartbeat_or_lease) {
      // The coordinator does not know us (it lost its journal, or we were silent too long): register again.
      if (registered_) STOKER_LOG(kWarning) << "coordinator forgot this worker: " << reply.status.message();
      registered_ = false;
      SetRegistered(false);
      if (std::holds_alternative<LeaseRequest>(body)) LeaseAnswered(request.id, {});
      SendRegister();
      return;
    }
    if (std::holds_alternative<RegisterWorkerRequest>(body)) {
      if (!reply.status.ok()) {
        STOKER_LOG(kError) << "registration refused: " << reply.status.ToString();
        return;
      }
      if (auto* r = std::get_if<RegisterWorkerResponse>(&reply.body)) {
        heartbeat_interval_ = Millis(std::max<uint32_t>(50, r->heartbeat_interval_ms));
        if (!registered_) STOKER_LOG(kInfo) << "registered with " << options_.coordinator << " as " << id_;
        registered_ = true;
        SetRegistered(true);
        next_heartbeat_ = clock_.Now();
      }
    } else if (auto* hb = std::get_if<WorkerHeartbeatRequest>(&body)) {
      if (auto* r = std::get_if<WorkerHeartbeatResponse>(&reply.body)) {
        for (const LeaseRef& ref : r->revoked) Revoke({ref.job, ref.rank, ref.unit}, ref.attempt);
        // Renewed: every lease the heartbeat named that the coordinator did not revoke, counted from when the
        // heartbeat left (the coordinator's own expiry runs from when it arrived, which is later).
        for (const LeaseRef& ref : hb->leases) {
          auto it = units_.find({ref.job, ref.rank, ref.unit});
          if (it != units_.end() && it->second.lease.attempt == ref.attempt) {
            it->second.expires = std::max(it->second.expires, request.sent + Millis(it->second.lease.ttl_ms));
          }
        }
      }
    } else if (auto* lease = std::get_if<LeaseRequest>(&body)) {
      if (!reply.status.ok()) {
        STOKER_LOG(kWarning) << "lease for " << lease->job << " rank " << lease->rank << " refused: "
                             << reply.status.ToString();
        LeaseAnswered(request.id, {});
        if (reply.status.code() == StatusCode::kNotFound) FailJob(lease->job, reply.status);
        return;
      }
      auto* r = std::get_if<LeaseResponse>(&reply.body);
      LeaseResponse response = r ? *r : LeaseResponse{};
      for (const LeaseGrant& grant : response.leases) StartUnit(grant);
      LeaseAnswered(request.id, response);
    } else if (std::holds_alternative<UnitDoneRequest>(body)) {
      if (!reply.status.ok() && reply.status.code() != StatusCode::kAborted) {
        STOKER_LOG(kWarning) << "unit done not accepted: " << reply.status.ToString();
      }
    } else if (auto* get = std::get_if<GetJobRequest>(&body)) {
      if (!reply.status.ok()) {
        FailJob(get->job, reply.status);
      } else if (auto* spec = std::get_if<JobSpec>(&reply.body)) {
        // Opening a manifest reads all of it: off this thread, so heartbeats keep flowing meanwhile.
        JobSpec copy = *spec;
        loading_[spec->name] = std::async(std::launch::async, [this, copy] {
          auto job = LoadJobContext(env_, copy, options_.manifest_root, options_.max_open_shards, id_);
          uint64_t one = 1;
          ssize_t n = ::write(doorbell_, &one, sizeof(one));
          (void)n;
          return job;
        });
      }
    } else if (std::holds_alternative<DeregisterRequest>(body)) {
      deregistered_ = true;
    }
  }

  // ---- jobs --------------------------------------------------------------------------------------------------

  void FetchJob(const std::string& name) {
    if (jobs_.count(name) != 0 || loading_.count(name) != 0 || fetching_.count(name) != 0) return;
    fetching_.insert(name);
    channel_.Send(GetJobRequest{id_, name});
  }

  void FinishLoads() {
    for (auto it = loading_.begin(); it != loading_.end();) {
      if (it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        ++it;
        continue;
      }
      auto job = it->second.get();
      std::string name = it->first;
      it = loading_.erase(it);
      fetching_.erase(name);
      if (!job.ok()) {
        FailJob(name, job.status());
        continue;
      }
      jobs_[name] = *job;
      failed_jobs_.erase(name);
      STOKER_LOG(kInfo) << "job " << name << " loaded: " << (*job)->manifest->num_samples() << " samples";
    }
  }

  // The job cannot be served here: tell its clients, hand back its units, and refuse it for a while.
  void FailJob(const std::string& name, const Status& status) {
    STOKER_LOG(kWarning) << "job " << name << " unavailable on this worker: " << status.ToString();
    fetching_.erase(name);
    failed_jobs_[name] = {status, clock_.Now() + Millis(5000)};
    jobs_.erase(name);
    for (auto it = units_.begin(); it != units_.end();) {
      if (std::get<0>(it->first) == name) {
        it->second.cancelled->store(true);
        ReportUnit(it->first, it->second, UnitOutcome::kAbandoned);
        it = units_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = streams_.begin(); it != streams_.end();) {
      if (std::get<0>(it->first) == name) {
        SendDataError(it->second.routing_id, name, std::get<1>(it->first), status);
        it = streams_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // ---- data plane --------------------------------------------------------------------------------------------

  void SendDataError(const std::string& routing_id, const std::string& job, uint32_t rank, const Status& status) {
    capnp::MallocMessageBuilder message(kControlFirstSegmentWords);
    auto msg = message.initRoot<wire::DataMessage>();
    msg.setProtocolVersion(wire::PROTOCOL_VERSION);
    auto err = msg.initError();
    err.setJob(job);
    err.setRank(rank);
    ToWire(status, err.initStatus());
    zmq::message_t frame = ToFrame(message);
    try {
      zmq::message_t id(routing_id.data(), routing_id.size());
      if (data_.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        data_.send(frame, zmq::send_flags::dontwait);
      }
    } catch (const zmq::error_t&) {
    }
  }

  void DrainData() {
    for (int i = 0; i < 1000; ++i) {
      zmq::message_t routing_id, frame;
      try {
        if (!data_.recv(routing_id, zmq::recv_flags::dontwait)) return;
        if (!routing_id.more() || !data_.recv(frame, zmq::recv_flags::dontwait)) {
          CountBadFrame();
          continue;
        }
        if (frame.more()) {
          CountBadFrame();
          while (frame.more()) {
            if (!data_.recv(frame, zmq::recv_flags::dontwait)) break;
          }
          continue;
        }
      } catch (const zmq::error_t&) {
        return;
      }
      HandleCredit(routing_id.to_string(), std::move(frame));
    }
  }

  void CountBadFrame() {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.bad_frames;
  }

  void HandleCredit(const std::string& routing_id, zmq::message_t frame) {
    auto parsed = ParsedFrame::Parse(std::move(frame), ControlReaderOptions());
    if (!parsed.ok()) {
      CountBadFrame();
      return;
    }
    std::string job, client;
    uint32_t rank = 0, credits = 0;
    uint64_t max_frame_bytes = 0;
    Status s = CatchWireErrors("credit", [&]() -> Status {
      auto msg = (*parsed)->Root<wire::DataMessage>();
      if (msg.getProtocolVersion() != wire::PROTOCOL_VERSION) {
        return UnimplementedError("data protocol version " + std::to_string(msg.getProtocolVersion()));
      }
      if (msg.which() != wire::DataMessage::CREDIT) return InvalidArgumentError("a client may only send credits");
      auto c = msg.getCredit();
      job = c.getJob().cStr();
      client = c.getClientId().cStr();
      rank = c.getRank();
      credits = c.getCredits();
      max_frame_bytes = c.getMaxFrameBytes();
      return Status::Ok();
    });
    if (!s.ok() || client.empty()) {
      CountBadFrame();
      if (s.code() == StatusCode::kUnimplemented) SendDataError(routing_id, job, rank, s);
      return;
    }
    auto failed = failed_jobs_.find(job);
    if (failed != failed_jobs_.end()) {
      if (clock_.Now() < failed->second.retry_at) {
        SendDataError(routing_id, job, rank, failed->second.status);
        return;
      }
      failed_jobs_.erase(failed);
    }
    StreamKey key{job, rank, client};
    if (credits == 0) {  // withdrawn: the client is leaving
      DropStream(key);
      return;
    }
    Stream& stream = streams_[key];
    stream.routing_id = routing_id;
    stream.credits = std::min<uint32_t>(credits, 1024);
    stream.max_frame_bytes = max_frame_bytes == 0 ? 0 : std::max(max_frame_bytes, kMinPayloadFrameBytes);
    stream.refreshed = clock_.Now();
    FetchJob(job);
  }

  // The client of `key` is gone: its batches cannot be delivered. Hand its units back for re-leasing.
  void DropStream(const StreamKey& key) {
    for (auto it = units_.begin(); it != units_.end();) {
      if (StreamOf(it->second) == key) {
        it->second.cancelled->store(true);
        ReportUnit(it->first, it->second, UnitOutcome::kUndeliverable);
        CountUndeliverable();
        it = units_.erase(it);
      } else {
        ++it;
      }
    }
    streams_.erase(key);
  }

  static StreamKey StreamOf(const UnitWork& work) {
    return {work.lease.job, work.lease.rank, work.lease.client_id};
  }

  // Batches leased for this stream's client and not yet sent: what its credit is spent on.
  uint32_t InHand(const StreamKey& key) const {
    uint32_t n = 0;
    for (const auto& [unit_key, work] : units_) {
      if (StreamOf(work) == key) n += work.to_send - work.sent;
    }
    return n;
  }

  // ---- leasing -----------------------------------------------------------------------------------------------

  void RequestLeases() {
    for (auto& [key, stream] : streams_) {
      auto jit = jobs_.find(std::get<0>(key));
      if (stream.lease_request != 0 || stream.job_done || jit == jobs_.end()) continue;
      uint32_t in_hand = InHand(key);
      if (in_hand >= stream.credits) continue;
      uint32_t free = stream.credits - in_hand;
      // Asking for less than a unit would only be parked: wait until a whole unit fits (or nothing is in hand).
      if (free < std::min(stream.credits, jit->second->spec.batches_per_unit) && in_hand > 0) continue;
      uint64_t id = channel_.Send(LeaseRequest{id_, std::get<0>(key), std::get<1>(key), free,
                                               static_cast<uint32_t>(ToMillis(options_.lease_wait))});
      stream.lease_request = id;
      lease_requests_[id] = key;
    }
  }

  void LeaseAnswered(uint64_t request_id, const LeaseResponse& response) {
    auto rit = lease_requests_.find(request_id);
    if (rit == lease_requests_.end()) return;
    auto sit = streams_.find(rit->second);
    if (sit != streams_.end() && sit->second.lease_request == request_id) {
      sit->second.lease_request = 0;
      sit->second.job_done = response.job_done;
    }
    lease_requests_.erase(rit);
  }

  void StartUnit(const LeaseGrant& grant) {
    UnitKey key{grant.job, grant.rank, grant.unit};
    UnitWork work;
    work.lease = grant;
    // The coordinator's clock for this lease started when it granted it, which may be long after we asked (the
    // request can wait, parked, for work). Count from receipt, less a quarter for the reply's transit: never later
    // than the coordinator's own expiry. Heartbeat renewals then count exactly, from when each heartbeat left.
    work.expires = clock_.Now() + Millis(grant.ttl_ms) - Millis(grant.ttl_ms / 4);
    auto jit = jobs_.find(grant.job);
    if (jit != jobs_.end() && jit->second->spec_fingerprint != grant.spec_fingerprint) {
      // The coordinator knows this job under another spec (it was recreated): reload it, redo the unit elsewhere.
      STOKER_LOG(kWarning) << "job " << grant.job << " changed its spec: reloading it";
      jobs_.erase(jit);
      FetchJob(grant.job);
      jit = jobs_.end();
    }
    auto sit = streams_.find(StreamOf(work));
    if (jit == jobs_.end() || sit == streams_.end() || draining_) {
      // Nothing to make it for (its client is not connected here, or we are leaving): give it straight back.
      ReportUnit(key, work, sit == streams_.end() ? UnitOutcome::kUndeliverable : UnitOutcome::kAbandoned);
      return;
    }
    const std::shared_ptr<const JobContext>& job = jit->second;
    std::vector<bool> skip(grant.batch_count, false);
    for (uint64_t s : grant.skip) {
      if (s >= grant.first_batch && s < grant.first_batch + grant.batch_count) skip[s - grant.first_batch] = true;
    }
    const uint32_t batch_size = job->spec.batch_size;
    const size_t sample_bytes = job->spec.SampleBytes();
    for (uint32_t i = 0; i < grant.batch_count; ++i) {
      if (skip[i]) continue;
      ++work.to_send;
      auto build = std::make_shared<BatchBuild>();
      build->job = job;
      build->pool = pool_;
      build->unit = key;
      build->attempt = grant.attempt;
      build->epoch = grant.epoch;
      build->index = grant.first_batch + i;
      build->samples.resize(batch_size);
      job->plan.BatchSamples(grant.epoch, grant.rank, build->index, build->samples);
      build->labels.assign(batch_size, -1);
      build->flags.assign(batch_size, 0);
      build->quarantine.resize(batch_size);
      build->buffer = pool_->Acquire(sample_bytes * batch_size);
      build->cancelled = work.cancelled;
      build->remaining.store(batch_size);
      for (uint32_t slot = 0; slot < batch_size; ++slot) {
        tasks_->Push([this, build, slot](ThreadContext& context) {
          counters_.active.fetch_add(1, std::memory_order_relaxed);
          if (options_.inject_sample_delay.count() > 0) {  // stands for slow storage or a heavier pipeline: busy
            auto began = std::chrono::steady_clock::now();
            std::this_thread::sleep_for(options_.inject_sample_delay);
            counters_.busy_ns.fetch_add(static_cast<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::steady_clock::now() - began).count()),
                                        std::memory_order_relaxed);
          }
          BuildSample(*build, slot, context, options_.skip_decode, counters_);
          counters_.active.fetch_sub(1, std::memory_order_relaxed);
          if (build->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) Completed(build);
        });
      }
    }
    if (work.to_send == 0) {  // everything already delivered: nothing to make
      ReportUnit(key, work, UnitOutcome::kSent);
      return;
    }
    units_[key] = std::move(work);
  }

  // The lease of a unit ran out without renewal (the coordinator is unreachable, or this process was stopped):
  // the coordinator has given, or will give, the unit to another worker. Send nothing more of it.
  void Fence(std::map<UnitKey, UnitWork>::iterator it) {
    STOKER_LOG(kWarning) << "lease of unit " << std::get<2>(it->first) << " (rank " << std::get<1>(it->first)
                         << " of " << std::get<0>(it->first) << ") expired unrenewed: no longer sending it";
    it->second.cancelled->store(true);
    units_.erase(it);
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.units_fenced;
  }

  void Revoke(const UnitKey& key, uint64_t attempt) {
    auto it = units_.find(key);
    if (it == units_.end() || it->second.lease.attempt != attempt) return;
    it->second.cancelled->store(true);
    units_.erase(it);
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.units_revoked;
  }

  void ReportUnit(const UnitKey& key, const UnitWork& work, UnitOutcome outcome) {
    UnitDoneRequest done;
    done.worker_id = id_;
    done.job = std::get<0>(key);
    done.rank = std::get<1>(key);
    done.unit = std::get<2>(key);
    done.attempt = work.lease.attempt;
    done.outcome = outcome;
    done.batches_sent = work.sent;
    done.quarantined = work.quarantined;
    channel_.Send(std::move(done));
  }

  void CountUndeliverable() {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.units_undeliverable;
  }

  // ---- sending -----------------------------------------------------------------------------------------------

  // Called on a pipeline thread when a batch's last sample is done.
  void Completed(const std::shared_ptr<BatchBuild>& build) {
    {
      std::lock_guard<std::mutex> lock(completed_mu_);
      completed_.push_back(build);
    }
    uint64_t one = 1;
    ssize_t n = ::write(doorbell_, &one, sizeof(one));
    (void)n;
  }

  void SendCompleted() {
    std::vector<std::shared_ptr<BatchBuild>> done;
    {
      std::lock_guard<std::mutex> lock(completed_mu_);
      done.swap(completed_);
    }
    for (auto& build : done) {
      if (build->cancelled->load()) continue;  // revoked, fenced or undeliverable: the buffer returns to the pool
      auto uit = units_.find(build->unit);
      if (uit == units_.end()) continue;
      UnitWork& work = uit->second;
      if (clock_.Now() > work.expires) {
        Fence(uit);
        continue;
      }
      auto sit = streams_.find(StreamOf(work));
      if (sit == streams_.end() || !SendBatch(sit->second.routing_id, sit->second.max_frame_bytes, *build)) {
        // The client's connection is gone: the whole unit goes back to the coordinator.
        work.cancelled->store(true);
        ReportUnit(build->unit, work, UnitOutcome::kUndeliverable);
        units_.erase(uit);
        CountUndeliverable();
        continue;
      }
      ++work.sent;
      histograms_.stage_seconds.at("read")->Observe(build->read_ns.load() * 1e-9);
      histograms_.stage_seconds.at("decode")->Observe(build->decode_ns.load() * 1e-9);
      histograms_.stage_seconds.at("augment")->Observe(build->augment_ns.load() * 1e-9);
      for (auto& q : build->quarantine) {
        if (!q.reason.empty()) work.quarantined.push_back(std::move(q));
      }
      if (work.sent == work.to_send) {
        ReportUnit(build->unit, work, UnitOutcome::kSent);
        units_.erase(uit);
        std::lock_guard<std::mutex> lock(stats_mu_);
        ++stats_.units_done;
      }
    }
  }

  bool SendBatch(const std::string& routing_id, uint64_t max_frame_bytes, BatchBuild& build) {
    const TimePoint collate_start = std::chrono::steady_clock::now();
    const JobContext& job = *build.job;
    const uint32_t count = job.spec.batch_size;
    capnp::MallocMessageBuilder message(kControlFirstSegmentWords);
    auto msg = message.initRoot<wire::DataMessage>();
    msg.setProtocolVersion(wire::PROTOCOL_VERSION);
    auto h = msg.initBatch();
    h.setJob(job.spec.name);
    h.setEpoch(build.epoch);
    h.setRank(std::get<1>(build.unit));
    h.setIndex(build.index);
    h.setUnit(std::get<2>(build.unit));
    h.setAttempt(build.attempt);
    h.setWorkerId(id_);
    h.setCount(count);
    h.setHeight(job.spec.pipeline.output_height);
    h.setWidth(job.spec.pipeline.output_width);
    h.setChannels(3);
    auto labels = h.initLabels(count);
    auto ids = h.initSampleIds(count);
    auto flags = h.initFlags(count);
    for (uint32_t i = 0; i < count; ++i) {
      labels.set(i, build.labels[i]);
      ids.set(i, build.samples[i].sample_id);
      flags.set(i, build.flags[i]);
    }
    const size_t payload_bytes = job.spec.BatchBytes();
    const size_t frame_bytes = max_frame_bytes == 0 ? payload_bytes : std::min<size_t>(max_frame_bytes, payload_bytes);
    const uint32_t frames = static_cast<uint32_t>((payload_bytes + frame_bytes - 1) / frame_bytes);
    h.setPayloadBytes(payload_bytes);
    h.setPayloadFrames(frames);
    zmq::message_t header = ToFrame(message);
    const TimePoint queued = std::chrono::steady_clock::now();
    histograms_.stage_seconds.at("collate")->Observe(ToSeconds(queued - collate_start));
    try {
      zmq::message_t id(routing_id.data(), routing_id.size());
      if (!data_.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return false;
      data_.send(header, zmq::send_flags::sndmore);
      // The payload leaves from the batch buffer itself, in `frames` slices of it; ZeroMQ returns the buffer to
      // the pool when the last is sent. Every slice's message exists before the first is sent, so each one's
      // release is counted however the sending ends.
      auto* hint = new PayloadHint{pool_, build.buffer, in_flight_, histograms_.stage_seconds.at("send"), queued};
      hint->frames.store(frames);
      in_flight_->fetch_add(1);
      build.buffer_owned = false;
      std::vector<zmq::message_t> slices;
      slices.reserve(frames);
      for (uint32_t f = 0; f < frames; ++f) {
        const size_t offset = size_t{f} * frame_bytes;
        slices.emplace_back(static_cast<uint8_t*>(build.buffer.data) + offset,
                            std::min(frame_bytes, payload_bytes - offset), &FreePayload, hint);
      }
      for (uint32_t f = 0; f < frames; ++f) {
        data_.send(slices[f], f + 1 < frames ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    } catch (const zmq::error_t& e) {
      STOKER_LOG(kDebug) << "batch not sent: " << e.what();
      return false;
    }
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.batches_sent;
    stats_.bytes_sent += payload_bytes;
    return true;
  }

  // ---- time --------------------------------------------------------------------------------------------------

  void Timers() {
    TimePoint now = clock_.Now();
    if (registered_ && now >= next_heartbeat_) SendHeartbeat();
    for (ControlChannel::Pending& p : channel_.TakeExpired()) {
      if (std::holds_alternative<RegisterWorkerRequest>(p.body)) {
        SendRegister();
      } else if (std::holds_alternative<LeaseRequest>(p.body)) {
        LeaseAnswered(p.id, {});
      } else if (auto* get = std::get_if<GetJobRequest>(&p.body)) {
        fetching_.erase(get->job);
        FetchJob(get->job);
      } else if (std::holds_alternative<UnitDoneRequest>(p.body)) {
        channel_.Send(std::move(p.body));  // the coordinator must hear it: try again
      }
    }
    for (auto it = units_.begin(); it != units_.end();) {
      auto next = std::next(it);
      if (now > it->second.expires) Fence(it);
      it = next;
    }
    std::vector<StreamKey> silent;
    for (const auto& [key, stream] : streams_) {
      if (now - stream.refreshed > options_.credit_ttl) silent.push_back(key);
    }
    for (const auto& key : silent) {
      STOKER_LOG(kInfo) << "client " << std::get<2>(key) << " of " << std::get<0>(key) << " rank "
                        << std::get<1>(key) << " stopped refreshing its credit";
      DropStream(key);
    }
    ForgetIdleJobs(now);
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.leases_held = units_.size();
  }

  // A job no client has asked this worker for in a while releases what it holds (the manifest mapping, open
  // shards): a long-running worker serves many jobs over its life.
  void ForgetIdleJobs(TimePoint now) {
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

  // Charges the pipeline threads idle since the last turn to backpressure when clients are being served: they
  // have work to ask for, but the clients' credits or windows hold it back.
  void AccountIdleThreads(TimePoint now) {
    Duration dt = now - last_turn_;
    last_turn_ = now;
    bool serving = false;
    for (const auto& [key, stream] : streams_) serving = serving || !stream.job_done;
    if (!serving) return;
    int idle = static_cast<int>(threads_) - counters_.active.load(std::memory_order_relaxed);
    if (idle <= 0) return;
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.backpressure_seconds += ToSeconds(dt) * idle;
  }

  void PublishState(TimePoint now) {
    next_state_publish_ = now + Millis(1000);
    JsonWriter j;
    j.BeginObject()
        .Key("component").Value("worker")
        .Key("id").Value(id_)
        .Key("advertised").Value(advertised_)
        .Key("coordinator").Value(options_.coordinator)
        .Key("registered").Value(registered_)
        .Key("draining").Value(draining_)
        .Key("threads").Value(threads_)
        .Key("busy_threads").Value(counters_.active.load())
        .Key("jobs").BeginArray();
    for (const auto& [name, job] : jobs_) j.Value(name);
    j.EndArray().Key("failed_jobs").BeginObject();
    for (const auto& [name, failed] : failed_jobs_) j.Key(name).Value(failed.status.ToString());
    j.EndObject().Key("streams").BeginArray();
    for (const auto& [key, stream] : streams_) {
      j.BeginObject()
          .Key("job").Value(std::get<0>(key))
          .Key("rank").Value(std::get<1>(key))
          .Key("client").Value(std::get<2>(key))
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
    j.EndArray().Key("batches_in_flight").Value(in_flight_->load()).EndObject();
    std::lock_guard<std::mutex> lock(stats_mu_);
    state_json_ = j.str();
    stats_.draining = draining_;
    stats_.streams = streams_.size();
  }

  void SetRegistered(bool value) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.registered = value;
  }

  Status FinishDrain(const std::atomic<bool>& stop) {
    for (auto& [key, work] : units_) {
      work.cancelled->store(true);
      ReportUnit(key, work, UnitOutcome::kAbandoned);
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.units_abandoned;
    }
    if (!units_.empty()) STOKER_LOG(kWarning) << "grace period over: handed back " << units_.size() << " units";
    units_.clear();
    // Batches handed to ZeroMQ are on their way only once it has released their buffers: wait for that (within
    // the grace), or closing the socket would drop batches the coordinator was told were sent.
    while (in_flight_->load() > 0 && clock_.Now() < drain_deadline_ && !stop.load()) {
      zmq::pollitem_t items[] = {{channel_.socket().handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 1, std::chrono::milliseconds(10));
      if (items[0].revents & ZMQ_POLLIN) DrainControl();
    }
    uint64_t id = channel_.Send(DeregisterRequest{id_, "", 0});
    TimePoint deadline = clock_.Now() + Millis(2000);
    while (channel_.IsPending(id) && clock_.Now() < deadline && !stop.load()) {
      zmq::pollitem_t items[] = {{channel_.socket().handle(), 0, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 1, std::chrono::milliseconds(50));
      } catch (const zmq::error_t&) {
      }
      if (items[0].revents & ZMQ_POLLIN) DrainControl();
    }
    STOKER_LOG(kInfo) << "drained" << (deregistered_ ? " and deregistered" : " (coordinator did not answer)");
    return Status::Ok();
  }

  const WorkerOptions options_;
  Env& env_;
  Clock& clock_;
  const std::string id_;
  ControlChannel channel_;
  zmq::socket_t data_;
  std::shared_ptr<BatchBufferPool> pool_;
  std::shared_ptr<std::atomic<int64_t>> in_flight_ = std::make_shared<std::atomic<int64_t>>(0);
  unsigned threads_ = 1;
  int doorbell_ = -1;
  std::string advertised_;

  // I/O thread only.
  TimePoint last_turn_;
  TimePoint next_state_publish_;
  bool registered_ = false;
  bool draining_ = false;
  bool deregistered_ = false;
  TimePoint drain_deadline_;
  Duration heartbeat_interval_ = Millis(250);
  TimePoint next_heartbeat_;
  static constexpr Duration kJobIdleRelease = Millis(60000);
  std::map<std::string, std::shared_ptr<const JobContext>> jobs_;
  std::map<std::string, TimePoint> job_last_active_;
  std::map<std::string, std::future<StatusOr<std::shared_ptr<const JobContext>>>> loading_;
  std::set<std::string> fetching_;  // GetJob in flight or job loading
  std::map<std::string, FailedJob> failed_jobs_;
  std::map<StreamKey, Stream> streams_;
  std::map<uint64_t, StreamKey> lease_requests_;  // lease request id -> the stream it spends credit of
  std::map<UnitKey, UnitWork> units_;

  // Shared with the pipeline threads.
  std::mutex completed_mu_;
  std::vector<std::shared_ptr<BatchBuild>> completed_;  // guarded by completed_mu_
  BuildCounters counters_;
  mutable std::mutex stats_mu_;
  WorkerStats stats_;       // guarded by stats_mu_
  std::string state_json_ = "{}";  // guarded by stats_mu_
  WorkerHistograms histograms_;    // the map is fixed after construction; the histograms are thread-safe
  RealClock watch_clock_;
  LoopWatch watch_{watch_clock_};

  // Last: the pipeline threads are joined first when the Impl is destroyed.
  std::unique_ptr<TaskPool<ThreadContext>> tasks_;
};

Worker::Worker(const WorkerOptions& options, Env& env, Clock& clock, zmq::context_t& context)
    : impl_(std::make_unique<Impl>(options, env, clock, context)) {}
Worker::~Worker() = default;
StatusOr<std::string> Worker::Bind() { return impl_->Bind(); }
Status Worker::Run(const std::atomic<bool>& stop, const std::atomic<bool>& drain) { return impl_->Run(stop, drain); }
WorkerStats Worker::Stats() const { return impl_->Stats(); }
const WorkerHistograms& Worker::histograms() const { return impl_->histograms(); }
std::string Worker::StateJson() const { return impl_->StateJson(); }
const LoopWatch& Worker::watch() const { return impl_->watch(); }
const std::string& Worker::id() const { return impl_->id(); }

}  // namespace stoker
