#include "worker/worker.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <opencv2/core.hpp>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "common/control_channel.h"
#include "common/control_codec.h"
#include "common/logging.h"
#include "common/manifest.h"
#include "common/plan.h"
#include "common/wire.h"
#include "stoker/schema/data.capnp.h"
#include "worker/batch_buffer.h"
#include "worker/crop_geometry.h"
#include "worker/image_pipeline.h"
#include "worker/sample_reader.h"
#include "worker/thread_pool.h"

namespace stoker {
namespace {

using StreamKey = std::pair<std::string, uint32_t>;                   // (job, rank)
using UnitKey = std::tuple<std::string, uint32_t, uint64_t>;          // (job, rank, global unit)

// What a job needs on this worker: its spec, plan and where its samples are. Shared with the pipeline threads,
// immutable once built (the reader is thread-safe).
struct JobContext {
  JobSpec spec;
  Plan plan;
  std::shared_ptr<const Manifest> manifest;
  std::unique_ptr<SampleReader> reader;
  std::string cache_key;  // name + fingerprint: identifies the pipeline a thread built for it
};

// One batch being built by the pipeline threads.
struct BatchBuild {
  std::shared_ptr<const JobContext> job;
  std::shared_ptr<BatchBufferPool> pool;
  UnitKey unit;
  uint64_t attempt = 0;
  uint32_t epoch = 0;
  uint64_t index = 0;
  std::vector<PlannedSample> samples;
  std::vector<int64_t> labels;
  std::vector<uint8_t> flags;
  std::vector<QuarantineReport> quarantine;  // per slot; reason empty = fine (each slot written by one task)
  BatchBufferPool::Buffer buffer;
  bool buffer_owned = true;
  std::shared_ptr<std::atomic<bool>> cancelled;
  std::atomic<uint32_t> remaining{0};

  ~BatchBuild() {
    if (buffer_owned && buffer.data != nullptr) pool->Release(buffer);
  }
};

struct PayloadHint {
  std::shared_ptr<BatchBufferPool> pool;
  BatchBufferPool::Buffer buffer;
};

void FreePayload(void* /*data*/, void* hint) {
  auto* h = static_cast<PayloadHint*>(hint);
  h->pool->Release(h->buffer);
  delete h;
}

// Per pipeline thread: its decoders and scratch, built lazily per job.
struct ThreadContext {
  std::map<std::string, std::unique_ptr<ImagePipeline>> pipelines;
  std::vector<uint8_t> encoded;
  ImagePipeline& PipelineFor(const JobContext& job) {
    auto& p = pipelines[job.cache_key];
    if (!p) p = std::make_unique<ImagePipeline>(job.spec.pipeline);
    return *p;
  }
};

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
    unsigned threads = options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
    threads_ = threads;
    SocketOptions data_options;
    data_options.max_message_bytes = 64 << 10;  // only credits come in
    data_options.router_mandatory = true;       // a batch for a vanished client must fail, not vanish
    data_options.router_handover = true;
    data_options.send_hwm = 0;                  // credits bound what is queued, not a message count
    ConfigureSocket(data_, data_options);
    doorbell_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    STOKER_CHECK(doorbell_ >= 0, "eventfd failed");
    cv::setNumThreads(0);  // parallelism is across samples; OpenCV must not spawn its own threads per call
    tasks_ = std::make_unique<TaskPool<ThreadContext>>(threads);
  }

  ~Impl() {
    tasks_.reset();  // joins the pipeline threads before the batches they reference go away
    ::close(doorbell_);
  }

  const std::string& id() const { return id_; }

  StatusOr<std::string> Bind() {
    STOKER_ASSIGN_OR_RETURN(std::string bound, BindSocket(data_, options_.listen));
    advertised_ = AdvertisedEndpoint(bound, options_.advertise_host);
    STOKER_RETURN_IF_ERROR(channel_.Connect(options_.coordinator));
    return advertised_;
  }

  Status Run(const std::atomic<bool>& stop, const std::atomic<bool>& drain) {
    SendRegister();
    while (!stop.load()) {
      TimePoint now = clock_.Now();
      if (drain.load() && !draining_) {
        draining_ = true;
        drain_deadline_ = now + options_.drain_grace;
        STOKER_LOG(kInfo) << "draining: " << units_.size() << " units in hand, grace "
                          << ToMillis(options_.drain_grace) << " ms";
        SendHeartbeat();
      }
      if (draining_ && (units_.empty() || now >= drain_deadline_)) return FinishDrain();

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
      SendCompleted();
      Timers();
      if (registered_ && !draining_) RequestLeases();
    }
    return CancelledError("stopped");
  }

  WorkerStats Stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    WorkerStats s = stats_;
    s.samples = samples_.load();
    s.quarantined = quarantined_.load();
    s.bytes_read = bytes_read_.load();
    s.busy_seconds = busy_ns_.load() * 1e-9;
    s.read_seconds = read_ns_.load() * 1e-9;
    s.decode_seconds = decode_ns_.load() * 1e-9;
    s.threads = threads_;
    return s;
  }

 private:
  struct Stream {
    std::string routing_id;
    std::string client_id;
    uint32_t credits = 0;
    TimePoint refreshed;
    uint32_t in_hand = 0;            // batches leased to this worker and not yet sent
    bool lease_outstanding = false;
    bool job_done = false;
  };
  struct UnitWork {
    LeaseGrant lease;
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

  void SendRegister() {
    channel_.Send(RegisterWorkerRequest{id_, advertised_, threads_, "0.1.0"});
  }

  void SendHeartbeat() {
    WorkerHeartbeatRequest hb{id_, {}, draining_};
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
      // The coordinator does not know us (it restarted, or we were silent too long): register again.
      if (registered_) STOKER_LOG(kWarning) << "coordinator forgot this worker: " << reply.status.message();
      registered_ = false;
      SetRegistered(false);
      if (auto* lease = std::get_if<LeaseRequest>(&body)) LeaseAnswered(*lease, {});
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
    } else if (std::holds_alternative<WorkerHeartbeatRequest>(body)) {
      if (auto* r = std::get_if<WorkerHeartbeatResponse>(&reply.body)) {
        for (const LeaseRef& ref : r->revoked) Revoke({ref.job, ref.rank, ref.unit}, ref.attempt);
      }
    } else if (auto* lease = std::get_if<LeaseRequest>(&body)) {
      if (!reply.status.ok()) {
        STOKER_LOG(kWarning) << "lease for " << lease->job << " rank " << lease->rank << " refused: "
                             << reply.status.ToString();
        LeaseAnswered(*lease, {});
        if (reply.status.code() == StatusCode::kNotFound) FailJob(lease->job, reply.status);
        return;
      }
      auto* r = std::get_if<LeaseResponse>(&reply.body);
      LeaseAnswered(*lease, r ? *r : LeaseResponse{});
    } else if (std::holds_alternative<UnitDoneRequest>(body)) {
      if (!reply.status.ok() && reply.status.code() != StatusCode::kAborted) {
        STOKER_LOG(kWarning) << "unit done not accepted: " << reply.status.ToString();
      }
    } else if (auto* get = std::get_if<GetJobRequest>(&body)) {
      getting_job_.erase(get->job);
      if (!reply.status.ok()) {
        FailJob(get->job, reply.status);
      } else if (auto* spec = std::get_if<JobSpec>(&reply.body)) {
        LoadJob(*spec);
      }
    } else if (std::holds_alternative<DeregisterRequest>(body)) {
      deregistered_ = true;
    }
  }

  // ---- jobs --------------------------------------------------------------------------------------------------

  void LoadJob(const JobSpec& spec) {
    auto manifest = Manifest::Open(spec.manifest_path, options_.manifest_root);
    if (!manifest.ok()) {
      FailJob(spec.name, manifest.status().WithContext("worker " + id_ + " cannot open the job's manifest"));
      return;
    }
    if ((*manifest)->fingerprint() != spec.manifest_fingerprint) {
      FailJob(spec.name, FailedPreconditionError("worker " + id_ + ": manifest " + spec.manifest_path +
                                                 " differs from the one the job was created with"));
      return;
    }
    auto plan = Plan::Make(spec, (*manifest)->num_samples());
    if (!plan.ok()) {
      FailJob(spec.name, plan.status());
      return;
    }
    auto job = std::make_shared<JobContext>(JobContext{spec, *plan, *manifest, nullptr, ""});
    job->reader = std::make_unique<SampleReader>(env_, *manifest, options_.max_open_shards);
    job->cache_key = spec.name + "/" + std::to_string(spec.manifest_fingerprint);
    jobs_[spec.name] = job;
    failed_jobs_.erase(spec.name);
    STOKER_LOG(kInfo) << "job " << spec.name << " loaded: " << (*manifest)->num_samples() << " samples";
  }

  void FailJob(const std::string& name, const Status& status) {
    STOKER_LOG(kWarning) << "job " << name << " unavailable on this worker: " << status.ToString();
    failed_jobs_[name] = {status, clock_.Now() + Millis(5000)};
    for (auto it = streams_.begin(); it != streams_.end();) {
      if (it->first.first == name) {
        SendDataError(it->second.routing_id, name, it->first.second, status);
        it = streams_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // ---- data plane --------------------------------------------------------------------------------------------

  void SendDataError(const std::string& routing_id, const std::string& job, uint32_t rank, const Status& status) {
    capnp::MallocMessageBuilder message;
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
      return Status::Ok();
    });
    if (!s.ok()) {
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
    StreamKey key{job, rank};
    if (credits == 0) {  // withdrawn: the client is leaving
      auto it = streams_.find(key);
      if (it != streams_.end() && it->second.client_id == client) DropStream(key);
      return;
    }
    Stream& stream = streams_[key];
    if (stream.client_id != client && !stream.client_id.empty()) {
      STOKER_LOG(kInfo) << "rank " << rank << " of " << job << " is now served to client " << client;
      stream.job_done = false;
    }
    stream.routing_id = routing_id;
    stream.client_id = client;
    stream.credits = std::min<uint32_t>(credits, 1024);
    stream.refreshed = clock_.Now();
    if (jobs_.count(job) == 0 && getting_job_.count(job) == 0) {
      getting_job_.insert(job);
      channel_.Send(GetJobRequest{id_, job});
    }
  }

  // The client of `key` is gone: its batches cannot be delivered. Hand its units back for re-leasing.
  void DropStream(const StreamKey& key) {
    for (auto it = units_.begin(); it != units_.end();) {
      if (std::get<0>(it->first) == key.first && std::get<1>(it->first) == key.second) {
        it->second.cancelled->store(true);
        ReportUnit(it->first, it->second, UnitOutcome::kUndeliverable);
        {
          std::lock_guard<std::mutex> lock(stats_mu_);
          ++stats_.units_undeliverable;
        }
        it = units_.erase(it);
      } else {
        ++it;
      }
    }
    streams_.erase(key);
  }

  // ---- leasing -----------------------------------------------------------------------------------------------

  void RequestLeases() {
    for (auto& [key, stream] : streams_) {
      if (stream.lease_outstanding || stream.job_done || jobs_.count(key.first) == 0) continue;
      if (stream.in_hand >= stream.credits) continue;
      stream.lease_outstanding = true;
      channel_.Send(LeaseRequest{id_, key.first, key.second, stream.credits - stream.in_hand,
                                 static_cast<uint32_t>(ToMillis(options_.lease_wait))});
    }
  }

  void LeaseAnswered(const LeaseRequest& request, const LeaseResponse& response) {
    auto sit = streams_.find({request.job, request.rank});
    if (sit != streams_.end()) {
      sit->second.lease_outstanding = false;
      sit->second.job_done = response.job_done;
    }
    for (const LeaseGrant& grant : response.leases) StartUnit(grant);
  }

  void StartUnit(const LeaseGrant& grant) {
    auto jit = jobs_.find(grant.job);
    auto sit = streams_.find({grant.job, grant.rank});
    UnitKey key{grant.job, grant.rank, grant.unit};
    if (jit == jobs_.end() || sit == streams_.end() || draining_) {
      // Nothing to make it for (the client left while we asked): give it straight back.
      UnitWork work;
      work.lease = grant;
      ReportUnit(key, work, sit == streams_.end() ? UnitOutcome::kUndeliverable : UnitOutcome::kAbandoned);
      return;
    }
    const std::shared_ptr<const JobContext>& job = jit->second;
    UnitWork& work = units_[key];
    work.lease = grant;
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
        tasks_->Push([this, build, slot](ThreadContext& context) { BuildSample(*build, slot, context, build); });
      }
    }
    sit->second.in_hand += work.to_send;
    if (work.to_send == 0) {  // everything already delivered: nothing to make
      ReportUnit(key, work, UnitOutcome::kSent);
      units_.erase(key);
    }
  }

  void Revoke(const UnitKey& key, uint64_t attempt) {
    auto it = units_.find(key);
    if (it == units_.end() || it->second.lease.attempt != attempt) return;
    it->second.cancelled->store(true);
    auto sit = streams_.find({std::get<0>(key), std::get<1>(key)});
    if (sit != streams_.end()) sit->second.in_hand -= it->second.to_send - it->second.sent;
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

  // ---- the pipeline threads ----------------------------------------------------------------------------------

  void BuildSample(BatchBuild& build, uint32_t slot, ThreadContext& context,
                   const std::shared_ptr<BatchBuild>& keep_alive) {
    if (!build.cancelled->load(std::memory_order_relaxed)) {
      auto start = std::chrono::steady_clock::now();
      const JobContext& job = *build.job;
      const PlannedSample& planned = build.samples[slot];
      SampleInfo info = job.manifest->sample(planned.sample_id);
      uint8_t* out = build.buffer.data + slot * job.spec.SampleBytes();
      auto read_done = start;
      std::optional<QuarantineReport> problem;
      if (options_.skip_decode) {
        // Only the sample id is written: the point is to measure moving the bytes, not making them.
        std::memcpy(out, &planned.sample_id, std::min<size_t>(sizeof(planned.sample_id), job.spec.SampleBytes()));
      } else {
        problem = ReadAndDecode(job, planned.sample_id, build.epoch, info, context, out, &read_done);
      }
      bool ok = !problem.has_value();
      if (!ok) build.quarantine[slot] = std::move(*problem);
      build.labels[slot] = ok ? info.label : -1;
      build.flags[slot] = static_cast<uint8_t>((planned.padding ? wire::SAMPLE_FLAG_PADDING : 0) |
                                               (ok ? 0 : wire::SAMPLE_FLAG_QUARANTINED));
      auto end = std::chrono::steady_clock::now();
      auto ns = [](auto d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); };
      read_ns_.fetch_add(ns(read_done - start), std::memory_order_relaxed);
      decode_ns_.fetch_add(ns(end - read_done), std::memory_order_relaxed);
      busy_ns_.fetch_add(ns(end - start), std::memory_order_relaxed);
      samples_.fetch_add(1, std::memory_order_relaxed);
      if (!ok) quarantined_.fetch_add(1, std::memory_order_relaxed);
    }
    if (build.remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      {
        std::lock_guard<std::mutex> lock(completed_mu_);
        completed_.push_back(keep_alive);
      }
      uint64_t one = 1;
      ssize_t n = ::write(doorbell_, &one, sizeof(one));
      (void)n;
    }
  }

  // Reads and decodes one sample into `out`; on failure zeroes `out` and says why (for quarantine).
  std::optional<QuarantineReport> ReadAndDecode(const JobContext& job, uint64_t sample_id, uint32_t epoch,
                                                const SampleInfo& info, ThreadContext& context, uint8_t* out,
                                                std::chrono::steady_clock::time_point* read_done) {
    ReadFailure failure;
    bool read = job.reader->Read(sample_id, &context.encoded, &failure);
    *read_done = std::chrono::steady_clock::now();
    std::string where(info.key);
    if (!read) {
      std::memset(out, 0, job.spec.SampleBytes());
      return QuarantineReport{sample_id, failure.reason, where + ": " + failure.detail};
    }
    bytes_read_.fetch_add(context.encoded.size(), std::memory_order_relaxed);
    SampleOutcome outcome =
        context.PipelineFor(job).Run(context.encoded, SampleSeed(job.spec.seed, epoch, sample_id), out);
    if (!outcome.ok) return QuarantineReport{sample_id, outcome.reason, where + ": " + outcome.detail};
    return std::nullopt;
  }

  // ---- sending -----------------------------------------------------------------------------------------------

  void SendCompleted() {
    std::vector<std::shared_ptr<BatchBuild>> done;
    {
      std::lock_guard<std::mutex> lock(completed_mu_);
      done.swap(completed_);
    }
    for (auto& build : done) {
      if (build->cancelled->load()) continue;  // revoked or undeliverable: the buffer returns to the pool
      auto uit = units_.find(build->unit);
      if (uit == units_.end()) continue;
      UnitWork& work = uit->second;
      StreamKey skey{std::get<0>(build->unit), std::get<1>(build->unit)};
      auto sit = streams_.find(skey);
      if (sit == streams_.end() || !SendBatch(sit->second.routing_id, *build)) {
        // The client's connection is gone: the whole unit goes back to the coordinator.
        work.cancelled->store(true);
        if (sit != streams_.end()) sit->second.in_hand -= work.to_send - work.sent;
        ReportUnit(build->unit, work, UnitOutcome::kUndeliverable);
        units_.erase(uit);
        std::lock_guard<std::mutex> lock(stats_mu_);
        ++stats_.units_undeliverable;
        continue;
      }
      --sit->second.in_hand;
      ++work.sent;
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

  bool SendBatch(const std::string& routing_id, BatchBuild& build) {
    const JobContext& job = *build.job;
    const uint32_t count = job.spec.batch_size;
    capnp::MallocMessageBuilder message;
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
    h.setPayloadBytes(payload_bytes);
    zmq::message_t header = ToFrame(message);
    try {
      zmq::message_t id(routing_id.data(), routing_id.size());
      if (!data_.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return false;
      data_.send(header, zmq::send_flags::sndmore);
      // The payload leaves from the batch buffer itself; ZeroMQ returns it to the pool when sent.
      auto* hint = new PayloadHint{pool_, build.buffer};
      build.buffer_owned = false;
      zmq::message_t payload(build.buffer.data, payload_bytes, &FreePayload, hint);
      data_.send(payload, zmq::send_flags::none);
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
      } else if (auto* lease = std::get_if<LeaseRequest>(&p.body)) {
        LeaseAnswered(*lease, {});
      } else if (std::holds_alternative<UnitDoneRequest>(p.body) || std::holds_alternative<GetJobRequest>(p.body)) {
        channel_.Send(std::move(p.body));  // these must arrive: try again
      }
    }
    std::vector<StreamKey> silent;
    for (const auto& [key, stream] : streams_) {
      if (now - stream.refreshed > options_.credit_ttl) silent.push_back(key);
    }
    for (const auto& key : silent) {
      STOKER_LOG(kInfo) << "client of " << key.first << " rank " << key.second << " stopped refreshing credit";
      DropStream(key);
    }
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.leases_held = units_.size();
  }

  void SetRegistered(bool value) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.registered = value;
  }

  Status FinishDrain() {
    for (auto& [key, work] : units_) {
      work.cancelled->store(true);
      ReportUnit(key, work, UnitOutcome::kAbandoned);
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.units_abandoned;
    }
    if (!units_.empty()) STOKER_LOG(kWarning) << "grace period over: handed back " << units_.size() << " units";
    units_.clear();
    channel_.Send(DeregisterRequest{id_, "", 0});
    // Wait (bounded) for the coordinator to take the hand-backs and the deregistration.
    TimePoint deadline = clock_.Now() + Millis(2000);
    while (!deregistered_ && clock_.Now() < deadline) {
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
  unsigned threads_ = 1;
  int doorbell_ = -1;
  std::string advertised_;

  // I/O thread only.
  bool registered_ = false;
  bool draining_ = false;
  bool deregistered_ = false;
  TimePoint drain_deadline_;
  Duration heartbeat_interval_ = Millis(500);
  TimePoint next_heartbeat_;
  std::map<std::string, std::shared_ptr<const JobContext>> jobs_;
  std::map<std::string, FailedJob> failed_jobs_;
  std::set<std::string> getting_job_;
  std::map<StreamKey, Stream> streams_;
  std::map<UnitKey, UnitWork> units_;

  // Shared with the pipeline threads.
  std::mutex completed_mu_;
  std::vector<std::shared_ptr<BatchBuild>> completed_;  // guarded by completed_mu_
  std::atomic<uint64_t> samples_{0}, quarantined_{0}, bytes_read_{0};
  std::atomic<int64_t> busy_ns_{0}, read_ns_{0}, decode_ns_{0};
  mutable std::mutex stats_mu_;
  WorkerStats stats_;  // guarded by stats_mu_

  // Last: the pipeline threads are joined first when the Impl is destroyed.
  std::unique_ptr<TaskPool<ThreadContext>> tasks_;
};

Worker::Worker(const WorkerOptions& options, Env& env, Clock& clock, zmq::context_t& context)
    : impl_(std::make_unique<Impl>(options, env, clock, context)) {}
Worker::~Worker() = default;
StatusOr<std::string> Worker::Bind() { return impl_->Bind(); }
Status Worker::Run(const std::atomic<bool>& stop, const std::atomic<bool>& drain) { return impl_->Run(stop, drain); }
WorkerStats Worker::Stats() const { return impl_->Stats(); }
const std::string& Worker::id() const { return impl_->id(); }

}  // namespace stoker
