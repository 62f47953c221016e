// PoolSim (pool_sim.h): workers wired to the coordinator in one thread (SimWiring, sim_wiring.h), as in
// LockstepSim, with several jobs: each its own manifest, ranks, lockstep and team; the workers shared.
#include "tests/scheduling/pool_sim.h"

#include <algorithm>

#include "tests/scheduling/sim_wiring.h"

namespace stoker::testing {

uint64_t PoolJobResult::BatchesBetween(Duration from, Duration to) const {
  auto at = [&](Duration t) -> uint64_t {
    uint64_t n = 0;  // the last sample at or before t
    for (const auto& [when, so_far] : delivered) {
      if (when > t) break;
      n = so_far;
    }
    return n;
  };
  const uint64_t a = at(from), b = at(to);
  return b > a ? b - a : 0;
}

double PoolJobResult::RateBetween(Duration from, Duration to) const {
  return to > from ? BatchesBetween(from, to) / ToSeconds(to - from) : 0;
}

// Named, not anonymous: a unity build puts this file beside lockstep_sim.cc, whose Sim is another class.
namespace pool {

constexpr Duration kTick = Millis(10);      // how often the coordinator and the workers run their timers
constexpr Duration kSampleEvery = Millis(100);
constexpr uint64_t kStepsPerEpoch = 100;

struct SimJob {
  enum class Phase { kWaiting, kRunning, kEnded };
  PoolJob c;
  JobSpec spec;
  uint64_t samples = 0;  // in its manifest
  LockstepJob lockstep;  // its ranks, under its team's identity
  Phase phase = Phase::kWaiting;
  uint64_t delivered = 0;  // batches delivered since the start
  PoolJobResult result;
};

class Sim {
 public:
  explicit Sim(const PoolConfig& c)
      : c_(c), wiring_(clock_, env_, {[this](const std::string& job) { return JobNamed(job).samples; }, nullptr,
                                      [](size_t w, const std::string& peer, const DataError& error) {
                                        STOKER_CHECK(false, "worker w-" + std::to_string(w) + " refused " + peer +
                                                                ": " + error.status.ToString());
                                      }}) {}
  PoolResult Run();

 private:
  void Start();
  void StartJob(SimJob& job);
  void EndJob(SimJob& job);
  void Settle();
  void FinishBuild(SimWorker& w);
  void Step(SimJob& job);
  Duration elapsed() const { return clock_.Now() - t0_; }
  // Batches and steps after the warm-up: one at the instant it ends is in the sample taken then (`delivered`).
  bool counting() const { return elapsed() > c_.warmup; }
  SimJob& JobNamed(const std::string& name);
  Duration BatchTimeOf(const worker::BatchBuild& build);

  const PoolConfig c_;
  TempDir dir_;
  FakeClock clock_;
  PosixEnv env_;
  TimePoint t0_;
  SimWiring wiring_;
  std::vector<SimJob> jobs_;
};

Duration Sim::BatchTimeOf(const worker::BatchBuild& build) {
  return JobNamed(std::get<0>(build.unit)).c.batch_time.value_or(c_.batch_time);
}

SimJob& Sim::JobNamed(const std::string& name) {
  for (SimJob& job : jobs_) {
    if (job.c.name == name) return job;
  }
  STOKER_CHECK(false, "no job named " + name);
  return jobs_.front();
}

void Sim::Start() {
  t0_ = clock_.Now();
  coordinator::CoordinatorOptions options;
  options.worker_queue_batches = c_.worker_queue_batches;
  if (c_.configure) c_.configure(options);
  wiring_.StartCoordinator(options);
  for (const PoolJob& config : c_.jobs) {
    SimJob& job = jobs_.emplace_back();
    job.c = config;
    job.result.name = config.name;
    job.samples = kStepsPerEpoch * config.ranks * config.batch_size;
    const std::string manifest =
        WriteSimManifest(env_, dir_, config.name + ".stoker", config.name + ".tar", job.samples);
    // Enough epochs that no job runs out within the limit, even one that never waits.
    const uint64_t steps = static_cast<uint64_t>(c_.limit / config.step_time) + 1;
    job.spec = SimSpec(config.name, manifest, config.batch_size, config.ranks,
                       static_cast<uint32_t>(std::min<uint64_t>(steps / kStepsPerEpoch + 2, kMaxEpochs)));
    job.lockstep.name = config.name;
    job.lockstep.identity = config.team;
    for (uint32_t r = 0; r < config.ranks; ++r) {
      SimRank& rank = job.lockstep.ranks.emplace_back();
      rank.client_id = rank.peer = config.name + "-c-" + std::to_string(r);
    }
  }
  wiring_.StartWorkers(c_.workers);
  Settle();
}

// Its clients register under the team's identity and give every worker credit.
void Sim::StartJob(SimJob& job) {
  wiring_.Register(job.lockstep, job.spec, job.c.window);
  job.phase = SimJob::Phase::kRunning;
  job.lockstep.wait_start = clock_.Now();
  wiring_.GiveCredits(job.lockstep, job.c.credits);
}

// Its clients leave as a closing Client does: credit withdrawn from every worker, then the ranks given back.
void Sim::EndJob(SimJob& job) {
  wiring_.GiveCredits(job.lockstep, 0);
  for (uint32_t r = 0; r < job.c.ranks; ++r) {
    SimRank& rank = job.lockstep.ranks[r];
    Status left = wiring_.coordinator().Deregister({rank.client_id, job.c.name, r}, Caller{job.c.team});
    STOKER_CHECK(left.ok(), left.ToString());
    rank.arrived.clear();
  }
  job.phase = SimJob::Phase::kEnded;
  job.lockstep.training = false;
}

// Delivers everything the Impls asked to send; then idle workers start their next batch (one whose unit was revoked
// or handed back is skipped at no cost, as the pipeline threads skip its samples).
void Sim::Settle() {
  wiring_.Deliver();
  for (SimWorker& w : wiring_.workers()) {
    w.SkipCancelled();
    if (!w.building && !w.queue.empty()) w.StartNext(clock_.Now(), BatchTimeOf(*w.queue.front()));
  }
}

void Sim::FinishBuild(SimWorker& w) {
  std::shared_ptr<worker::BatchBuild> build = w.TakeMade();
  if (!build->cancelled->load()) w.Count(*build, BatchTimeOf(*build), build->samples.size());
  if (!w.impl->RouteBatch(*build)) return;
  SimJob& job = JobNamed(std::get<0>(build->unit));
  if (job.phase == SimJob::Phase::kRunning) {
    job.lockstep.ranks[std::get<1>(build->unit)].arrived[build->epoch * kStepsPerEpoch + build->index] =
        clock_.Now();
    ++job.delivered;
    if (counting()) ++job.result.batches;
  }
  w.impl->BatchSent(*build, job.phase == SimJob::Phase::kRunning);
}

// The job's ranks release the step that ended and start the next once every rank has its batch.
void Sim::Step(SimJob& job) {
  const TimePoint now = clock_.Now();
  if (job.lockstep.EndStep(now)) {
    if (counting()) ++job.result.steps;
    wiring_.Acknowledge(job.lockstep);
  }
  job.lockstep.StartStep(now, job.c.step_time, job.c.batch_size);
}

PoolResult Sim::Run() {
  Start();
  for (bool first = true; elapsed() <= c_.limit; first = false) {
    if (!first) clock_.Advance(Millis(1));
    const Duration at = elapsed();
    const int64_t ms = ToMillis(at);
    for (SimJob& job : jobs_) {
      if (job.phase == SimJob::Phase::kWaiting && at >= job.c.start_at) StartJob(job);
      if (job.phase == SimJob::Phase::kRunning && job.c.end_at && at >= *job.c.end_at) EndJob(job);
    }
    for (SimWorker& w : wiring_.workers()) {
      if (w.building && (clock_.Now() >= w.done_at || w.queue.front()->cancelled->load())) FinishBuild(w);
    }
    for (SimJob& job : jobs_) {
      if (job.phase == SimJob::Phase::kRunning) Step(job);
    }
    if (ms % ToMillis(kTick) == 0) wiring_.Tick();
    for (SimJob& job : jobs_) {
      if (job.phase != SimJob::Phase::kRunning) continue;
      if (ms % 250 == 0) wiring_.Acknowledge(job.lockstep);
      if (ms % 1000 == 0) wiring_.GiveCredits(job.lockstep, job.c.credits);
    }
    Settle();
    if (at >= c_.warmup && at < c_.limit) {
      for (SimWorker& w : wiring_.workers()) {
        if (w.building) w.busy += Millis(1);  // making a batch for the millisecond to come
      }
    }
    if (ms % ToMillis(kSampleEvery) == 0) {
      for (SimJob& job : jobs_) job.result.delivered.emplace_back(at, job.delivered);
    }
  }

  PoolResult result;
  for (SimJob& job : jobs_) result.batches += job.result.batches;
  Duration busy{0};
  for (const SimWorker& w : wiring_.workers()) busy += w.busy;
  const double counted = ToSeconds(c_.limit - std::min(c_.warmup, c_.limit));
  result.worker_busy = counted > 0 ? ToSeconds(busy) / (counted * c_.workers) : 0;
  for (SimJob& job : jobs_) {
    PoolJobResult& r = job.result;
    const Duration from = std::max(c_.warmup, job.c.start_at);
    const Duration to = std::min(c_.limit, job.c.end_at.value_or(c_.limit));
    r.seconds = to > from ? ToSeconds(to - from) : 0;
    r.steps_per_second = r.seconds > 0 ? r.steps / r.seconds : 0;
    r.ratio = r.seconds > 0 ? r.steps * ToSeconds(job.c.step_time) / r.seconds : 0;
    r.share = result.batches > 0 ? static_cast<double>(r.batches) / result.batches : 0;
    result.jobs.push_back(std::move(r));
  }
  return result;
}

}  // namespace pool

PoolResult RunPool(const PoolConfig& config) { return pool::Sim(config).Run(); }

}  // namespace stoker::testing
