// SimWiring (sim_wiring.h): the coordinator's and the workers' Impls wired to each other in one thread, a worker's
// pipeline thread made of a queue and a clock, and a job's ranks stepping together.
#include "tests/scheduling/sim_wiring.h"

#include <algorithm>
#include <chrono>
#include <variant>

#include "dataset/manifest.h"

namespace stoker::testing {

void SimWorker::SkipCancelled() {
  while (!building && !queue.empty() && queue.front()->cancelled->load()) {
    impl->RouteBatch(*queue.front());  // nullopt: it does not leave
    queue.pop_front();
  }
}

bool SimWorker::StartNext(TimePoint now, Duration batch_time) {
  if (building || queue.empty()) return false;
  building = true;
  done_at = now + batch_time;
  return true;
}

std::shared_ptr<worker::BatchBuild> SimWorker::TakeMade() {
  std::shared_ptr<worker::BatchBuild> build = std::move(queue.front());
  queue.pop_front();
  building = false;
  return build;
}

void SimWorker::Count(worker::BatchBuild& build, Duration batch_time, uint64_t samples) {
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(batch_time).count();
  build.busy_ns += ns;
  counters.busy_ns += ns;
  counters.samples += samples;
}

bool LockstepJob::EndStep(TimePoint now) {
  if (!training || now < step_end) return false;
  for (SimRank& rank : ranks) {
    rank.arrived.erase(step);
    rank.consumed = step + 1;
  }
  ++step;
  training = false;
  wait_start = now;
  return true;
}

bool LockstepJob::StartStep(TimePoint now, Duration step_time, uint32_t batch_size) {
  if (training) return false;
  for (const SimRank& rank : ranks) {
    if (rank.arrived.count(step) == 0) return false;
  }
  for (SimRank& rank : ranks) {
    const TimePoint returned = std::max(wait_start, rank.arrived[step]);
    rank.stall_seconds += ToSeconds(returned - wait_start);
    rank.step_seconds += ToSeconds(returned - rank.last_return);
    rank.last_return = returned;
    rank.samples += batch_size;
  }
  training = true;
  step_end = now + step_time;
  return true;
}

ClientHeartbeatRequest LockstepJob::Heartbeat(uint32_t r) const {
  const SimRank& rank = ranks[r];
  ClientHeartbeatRequest hb;
  hb.client_id = rank.client_id;
  hb.job = name;
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
  return hb;
}

std::string WriteSimManifest(Env& env, const TempDir& dir, const std::string& manifest, const std::string& shard,
                             uint64_t samples) {
  ManifestWriter writer(dir.path(), SourceKind::kTarShards);
  const uint32_t index = writer.AddShard(shard, samples * 1024, 0);
  for (uint64_t i = 0; i < samples; ++i) writer.AddSample(index, 1024 * i, 512, i % 10, ImageFormat::kJpeg, "k");
  const std::string path = dir.Join(manifest);
  STOKER_CHECK(writer.Write(env, path, "sim").ok(), "cannot write the simulation's manifest");
  return path;
}

JobSpec SimSpec(const std::string& name, const std::string& manifest_path, uint32_t batch_size, uint32_t world_size,
                uint32_t epochs) {
  JobSpec spec;
  spec.name = name;
  spec.manifest_path = manifest_path;
  spec.batch_size = batch_size;
  spec.world_size = world_size;
  spec.epochs = epochs;
  spec.shuffle = false;
  spec.pipeline.output_height = spec.pipeline.output_width = 4;
  return spec;
}

void SimWiring::StartCoordinator(const coordinator::CoordinatorOptions& options) {
  coordinator_ = std::make_unique<coordinator::CoordinatorImpl>(options, clock_, env_);
}

void SimWiring::StartWorkers(uint32_t count) {
  workers_ = std::vector<SimWorker>(count);
  worker::WorkerOptions worker_options;
  for (size_t w = 0; w < workers_.size(); ++w) {
    workers_[w].impl = std::make_unique<worker::WorkerImpl>(worker_options, "w-" + std::to_string(w), 1, clock_,
                                                            workers_[w].counters);
    workers_[w].impl->Register("tcp://w-" + std::to_string(w) + ":1");
  }
}

void SimWiring::Tick() {
  coordinator_->Tick();
  for (SimWorker& w : workers_) w.impl->Tick();
}

void SimWiring::Register(LockstepJob& job, const JobSpec& spec, uint32_t window) {
  for (uint32_t r = 0; r < job.ranks.size(); ++r) {
    SimRank& rank = job.ranks[r];
    auto registered = coordinator_->RegisterClient({rank.client_id, job.name, r, spec, window}, Caller{job.identity});
    STOKER_CHECK(registered.ok(), registered.status().ToString());
    rank.last_return = clock_.Now();
  }
}

void SimWiring::GiveCredits(const LockstepJob& job, uint32_t credits) {
  for (SimWorker& w : workers_) {
    for (uint32_t r = 0; r < job.ranks.size(); ++r) {
      const SimRank& rank = job.ranks[r];
      w.impl->HandleCredit(rank.peer, job.identity, Credit{job.name, r, rank.client_id, credits, 0});
    }
  }
}

void SimWiring::Acknowledge(const LockstepJob& job) {
  for (uint32_t r = 0; r < job.ranks.size(); ++r) {
    auto reply = coordinator_->ClientHeartbeat(job.Heartbeat(r), Caller{job.identity});
    STOKER_CHECK(reply.ok(), reply.status().ToString());
  }
}

void SimWiring::Reply(size_t w, uint64_t id, StatusOr<ReplyBody> body) {
  if (body.ok()) {
    workers_[w].impl->HandleReply(DecodedReply{id, Status::Ok(), std::move(*body)});
  } else {
    workers_[w].impl->HandleReply(DecodedReply{id, body.status(), std::monostate{}});
  }
}

namespace {

template <typename T>
StatusOr<ReplyBody> Body(StatusOr<T> value) {
  if (!value.ok()) return value.status();
  return ReplyBody(std::move(*value));
}

}  // namespace

// A worker's request, answered as the service would (a parked lease request is answered when it is served).
void SimWiring::Route(size_t w, const RequestTracker::Pending& request) {
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
  if (auto* r = std::get_if<RegisterWorkerRequest>(&request.body)) {
    return Reply(w, request.id, Body(c.RegisterWorker(*r)));
  }
  if (auto* h = std::get_if<WorkerHeartbeatRequest>(&request.body)) {
    return Reply(w, request.id, Body(c.WorkerHeartbeat(*h)));
  }
  if (auto* d = std::get_if<UnitDoneRequest>(&request.body)) {
    Status done = c.UnitDone(*d);
    return Reply(w, request.id, done.ok() ? StatusOr<ReplyBody>(ReplyBody(std::monostate{})) : done);
  }
  if (auto* g = std::get_if<GetJobRequest>(&request.body)) return Reply(w, request.id, Body(c.GetJob(g->job)));
}

void SimWiring::Deliver() {
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t w = 0; w < workers_.size(); ++w) {
      worker::WorkerImpl::Outbox out = workers_[w].impl->TakeOutbox();
      if (hooks_.refused) {
        for (const auto& [peer, error] : out.errors) hooks_.refused(w, peer, error);
      }
      for (const auto& request : out.requests) Route(w, request);
      for (const JobSpec& spec : out.loads) {
        auto plan = Plan::Make(spec, hooks_.samples(spec.name));
        STOKER_CHECK(plan.ok(), plan.status().ToString());
        std::shared_ptr<const worker::JobContext> job = std::make_shared<worker::JobContext>(
            worker::JobContext{spec, SpecFingerprint(spec), *plan, nullptr, nullptr});
        workers_[w].impl->JobLoaded(spec.name, job);
      }
      for (auto& build : out.builds) {
        if (hooks_.queued) hooks_.queued(*build);
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
}

}  // namespace stoker::testing
