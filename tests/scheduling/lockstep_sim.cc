// LockstepSim (lockstep_sim.h): the coordinator and the workers' Impls wired to each other in one thread, a
// pipeline thread per worker made of a queue and a clock, and ranks that step together.
#include "tests/scheduling/lockstep_sim.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <variant>
#include <vector>

#include "coordinator/impl.h"
#include "dataset/manifest.h"
#include "tests/support/temp_dir.h"
#include "worker/impl.h"

namespace stoker::testing {
namespace {

constexpr Duration kTick = Millis(10);       // how often the coordinator and the workers run their timers
constexpr uint64_t kStepsPerEpoch = 50;
constexpr const char* kJob = "ddp";

struct SimWorker {
  worker::BuildCounters counters;
  std::unique_ptr<worker::WorkerImpl> impl;
  std::deque<std::shared_ptr<worker::BatchBuild>> queue;  // the front one is being made while `building`
  bool building = false;
  TimePoint done_at;
  Duration busy{0};                // after the warm-up
  std::optional<TimePoint> idle_with_room_since;
};

struct SimRank {
  std::string client_id;
  uint64_t consumed = 0;                // batches released, in order
  std::map<uint64_t, TimePoint> arrived;  // global batch -> when it arrived; erased when released
  uint64_t leased_end = 0;              // one past the highest batch a worker was given to make
  TimePoint last_return;                // when its Next() last returned
  double step_seconds = 0, stall_seconds = 0;
  uint64_t samples = 0;
};

class Sim {
 public:
  explicit Sim(const LockstepConfig& c) : c_(c) {}
  LockstepResult Run();

 private:
  void Start();
  void Settle();
  void Route(size_t w, const RequestTracker::Pending& request);
  void Reply(size_t w, uint64_t id, StatusOr<ReplyBody> body);
  void FinishBuild(SimWorker& w);
  void Step();
  void Acknowledge(uint32_t rank);
  void GiveCredits();
  void Observe();
  bool counting() const { return step_ >= c_.warmup_steps; }

  const LockstepConfig c_;
  TempDir dir_;
  FakeClock clock_;
  PosixEnv env_;
  JobSpec spec_;
  uint64_t samples_ = 0;
  std::unique_ptr<coordinator::CoordinatorImpl> coordinator_;
  std::vector<SimWorker> workers_;
  std::vector<SimRank> ranks_;
  std::map<coordinator::RequestHandle, std::pair<size_t, uint64_t>> parked_;  // -> (worker, request id)
  coordinator::RequestHandle next_handle_ = 1;
  uint64_t step_ = 0;                 // the step the ranks are in, or wait for
  bool training_ = false;
  TimePoint step_end_, wait_start_, counting_since_;
  LockstepResult result_;
};

void Sim::Start() {
  samples_ = kStepsPerEpoch * c_.ranks * c_.batch_size;
  ManifestWriter writer(dir_.path(), SourceKind::kTarShards);
  const uint32_t shard = writer.AddShard("s.tar", samples_ * 1024, 0);
  for (uint64_t i = 0; i < samples_; ++i) writer.AddSample(shard, 1024 * i, 512, i % 10, ImageFormat::kJpeg, "k");
  PosixEnv env;
  STOKER_CHECK(writer.Write(env, dir_.Join("m.stoker"), "sim").ok(), "cannot write the simulation's manifest");
  spec_.name = kJob;
  spec_.manifest_path = dir_.Join("m.stoker");
  spec_.batch_size = c_.batch_size;
  spec_.world_size = c_.ranks;
  spec_.epochs = static_cast<uint32_t>(c_.steps / kStepsPerEpoch + 2);
  spec_.shuffle = false;
  spec_.pipeline.output_height = spec_.pipeline.output_width = 4;
  coordinator::CoordinatorOptions options;
  options.worker_queue_batches = c_.worker_queue_batches;
  coordinator_ = std::make_unique<coordinator::CoordinatorImpl>(options, clock_, env_);
  for (uint32_t r = 0; r < c_.ranks; ++r) {
    ranks_.emplace_back().client_id = "c-" + std::to_string(r);
    auto registered = coordinator_->RegisterClient({ranks_[r].client_id, kJob, r, spec_, c_.window});
    STOKER_CHECK(registered.ok(), registered.status().ToString());
    ranks_[r].last_return = clock_.Now();
  }
  workers_ = std::vector<SimWorker>(c_.workers);
  worker::WorkerOptions worker_options;
  for (size_t w = 0; w < workers_.size(); ++w) {
    workers_[w].impl = std::make_unique<worker::WorkerImpl>(worker_options, "w-" + std::to_string(w), 1, clock_,
                                                            workers_[w].counters);
    workers_[w].impl->Register("tcp://w-" + std::to_string(w) + ":1");
  }
  GiveCredits();
  Settle();
  wait_start_ = clock_.Now();
}

void Sim::GiveCredits() {
  for (SimWorker& w : workers_) {
    for (uint32_t r = 0; r < c_.ranks; ++r) {
      w.impl->HandleCredit("rank-" + std::to_string(r), "", Credit{kJob, r, ranks_[r].client_id, c_.credits, 0});
    }
  }
}

void Sim::Reply(size_t w, uint64_t id, StatusOr<ReplyBody> body) {
  if (body.ok()) {
    workers_[w].impl->HandleReply(DecodedReply{id, Status::Ok(), std::move(*body)});
  } else {
    workers_[w].impl->HandleReply(DecodedReply{id, body.status(), std::monostate{}});
  }
}

template <typename T>
StatusOr<ReplyBody> Body(StatusOr<T> value) {
  if (!value.ok()) return value.status();
  return ReplyBody(std::move(*value));
}

// A worker's request, answered as the service would (a parked lease request is answered when it is served).
void Sim::Route(size_t w, const RequestTracker::Pending& request) {
  coordinator::CoordinatorImpl& c = *coordinator_;
  if (auto* lease = std::get_if<LeaseRequest>(&request.body)) {
    const coordinator::RequestHandle handle = next_handle_++;
    auto answer = c.RequestLease(handle, *lease);
    if (!answer.ok()) return Reply(w, request.id, answer.status());
    if (!answer->has_value()) {
      parked_[handle] = {w, request.id};
      return;
    }
    return Reply(w, request.id, ReplyBody(std::move(**answer)));
  }
  if (auto* r = std::get_if<RegisterWorkerRequest>(&request.body)) return Reply(w, request.id, Body(c.RegisterWorker(*r)));
  if (auto* h = std::get_if<WorkerHeartbeatRequest>(&request.body)) return Reply(w, request.id, Body(c.WorkerHeartbeat(*h)));
  if (auto* d = std::get_if<UnitDoneRequest>(&request.body)) {
    Status done = c.UnitDone(*d);
    return Reply(w, request.id, done.ok() ? StatusOr<ReplyBody>(ReplyBody(std::monostate{})) : done);
  }
  if (auto* g = std::get_if<GetJobRequest>(&request.body)) return Reply(w, request.id, Body(c.GetJob(g->job)));
}

// Delivers everything the Impls asked to send, until nothing more is asked.
void Sim::Settle() {
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t w = 0; w < workers_.size(); ++w) {
      worker::WorkerImpl::Outbox out = workers_[w].impl->TakeOutbox();
      for (const auto& request : out.requests) Route(w, request);
      for (const JobSpec& spec : out.loads) {
        auto plan = Plan::Make(spec, samples_);
        STOKER_CHECK(plan.ok(), plan.status().ToString());
        std::shared_ptr<const worker::JobContext> job = std::make_shared<worker::JobContext>(
            worker::JobContext{spec, SpecFingerprint(spec), *plan, nullptr, nullptr});
        workers_[w].impl->JobLoaded(spec.name, job);
      }
      for (auto& build : out.builds) {
        SimRank& rank = ranks_[std::get<1>(build->unit)];
        rank.leased_end = std::max(rank.leased_end, build->epoch * kStepsPerEpoch + build->index + 1);
        workers_[w].queue.push_back(std::move(build));
      }
      moved = moved || !out.requests.empty() || !out.loads.empty() || !out.builds.empty();
    }
    for (coordinator::DeferredLeaseReply& reply : coordinator_->TakeDeferredReplies()) {
      auto it = parked_.find(reply.handle);
      if (it == parked_.end()) continue;
      Reply(it->second.first, it->second.second, ReplyBody(std::move(reply.response)));
      parked_.erase(it);
      moved = true;
    }
  }
  for (SimWorker& w : workers_) {
    if (w.building || w.queue.empty()) continue;
    w.building = true;
    w.done_at = clock_.Now() + c_.batch_time;
    if (counting()) w.busy += c_.batch_time;
  }
}

void Sim::FinishBuild(SimWorker& w) {
  std::shared_ptr<worker::BatchBuild> build = std::move(w.queue.front());
  w.queue.pop_front();
  w.building = false;
  w.counters.busy_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(c_.batch_time).count();
  w.counters.samples += c_.batch_size;
  if (!w.impl->RouteBatch(*build)) return;
  ranks_[std::get<1>(build->unit)].arrived[build->epoch * kStepsPerEpoch + build->index] = clock_.Now();
  w.impl->BatchSent(*build, true);
}

// The ranks release the step that ended and start the next once every rank has its batch.
void Sim::Step() {
  const TimePoint now = clock_.Now();
  if (training_ && now >= step_end_) {
    for (uint32_t r = 0; r < c_.ranks; ++r) {
      ranks_[r].arrived.erase(step_);
      ranks_[r].consumed = step_ + 1;
    }
    ++step_;
    if (step_ == c_.warmup_steps) counting_since_ = now;
    training_ = false;
    wait_start_ = now;
    for (uint32_t r = 0; r < c_.ranks; ++r) Acknowledge(r);
  }
  if (training_) return;
  for (const SimRank& rank : ranks_) {
    if (rank.arrived.count(step_) == 0) return;
  }
  for (SimRank& rank : ranks_) {
    const TimePoint returned = std::max(wait_start_, rank.arrived[step_]);
    rank.stall_seconds += ToSeconds(returned - wait_start_);
    rank.step_seconds += ToSeconds(returned - rank.last_return);
    rank.last_return = returned;
    rank.samples += c_.batch_size;
  }
  if (counting() && now > wait_start_) ++result_.waiting_steps;
  training_ = true;
  step_end_ = now + c_.step_time;
}

void Sim::Acknowledge(uint32_t r) {
  SimRank& rank = ranks_[r];
  ClientHeartbeatRequest hb;
  hb.client_id = rank.client_id;
  hb.job = kJob;
  hb.rank = r;
  hb.consumed = rank.consumed;
  hb.received_watermark = rank.consumed;
  while (rank.arrived.count(hb.received_watermark) != 0) ++hb.received_watermark;
  for (const auto& [g, at] : rank.arrived) {
    if (g > hb.received_watermark) hb.received_above.push_back(g);
  }
  hb.step_seconds = rank.step_seconds;
  hb.stall_seconds = rank.stall_seconds;
  hb.samples_delivered = rank.samples;
  auto reply = coordinator_->ClientHeartbeat(hb);
  STOKER_CHECK(reply.ok(), reply.status().ToString());
}

// After the warm-up: workers idle while a rank has window room nobody is using, and the advice while ranks wait.
void Sim::Observe() {
  if (!counting()) return;
  const TimePoint now = clock_.Now();
  bool room = false;
  const uint64_t total = kStepsPerEpoch * spec_.epochs;
  for (const SimRank& rank : ranks_) room = room || (rank.leased_end < std::min(total, rank.consumed + c_.window));
  for (SimWorker& w : workers_) {
    if (!room || w.building) {
      w.idle_with_room_since.reset();
      continue;
    }
    if (!w.idle_with_room_since) w.idle_with_room_since = now;
    if (now - *w.idle_with_room_since > 2 * kTick) ++result_.idle_with_room_ms;
  }
}

LockstepResult Sim::Run() {
  Start();
  for (Duration t{0}; t < c_.limit && step_ < c_.steps + c_.warmup_steps; t += Millis(1)) {
    clock_.Advance(Millis(1));
    const int64_t ms = ToMillis(t);
    for (SimWorker& w : workers_) {
      if (w.building && clock_.Now() >= w.done_at) FinishBuild(w);
    }
    Step();
    if (ms % ToMillis(kTick) == 0) {
      coordinator_->Tick();
      for (SimWorker& w : workers_) w.impl->Tick();
    }
    if (ms % 250 == 0) {
      for (uint32_t r = 0; r < c_.ranks; ++r) Acknowledge(r);
    }
    if (ms % 1000 == 0) GiveCredits();
    Settle();
    Observe();
    if (counting() && ms % 1000 == 0) {
      const coordinator::CapacityAdvice advice = coordinator_->Stats().advice;
      auto job = advice.jobs.find(kJob);
      if (job != advice.jobs.end() && !job->second.bottleneck.empty() && job->second.bottleneck != "workers") {
        result_.lowest_advice_while_waiting = std::min(result_.lowest_advice_while_waiting, advice.recommended);
      }
    }
  }
  const TimePoint end = clock_.Now();
  result_.steps = step_ > c_.warmup_steps ? step_ - c_.warmup_steps : 0;
  result_.seconds = ToSeconds(end - counting_since_);
  result_.ratio = result_.seconds > 0 ? result_.steps * ToSeconds(c_.step_time) / result_.seconds : 0;
  Duration busy{0};
  for (const SimWorker& w : workers_) busy += w.busy;
  result_.worker_busy = result_.seconds > 0 ? ToSeconds(busy) / (result_.seconds * c_.workers) : 0;
  const coordinator::CapacityAdvice advice = coordinator_->Stats().advice;
  result_.advice = advice.recommended;
  auto job = advice.jobs.find(kJob);
  if (job != advice.jobs.end()) result_.bottleneck = job->second.bottleneck;
  return result_;
}

}  // namespace

LockstepResult RunLockstep(const LockstepConfig& config) { return Sim(config).Run(); }

}  // namespace stoker::testing
