// LockstepSim (lockstep_sim.h): one job's ranks stepping together, fed by workers wired to the coordinator in one
// thread (SimWiring, sim_wiring.h).
#include "tests/scheduling/lockstep_sim.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "tests/scheduling/sim_wiring.h"

namespace stoker::testing {
namespace {

constexpr Duration kTick = Millis(10);       // how often the coordinator and the workers run their timers
constexpr uint64_t kStepsPerEpoch = 50;
constexpr const char* kJob = "ddp";

class Sim {
 public:
  explicit Sim(const LockstepConfig& c)
      : c_(c), wiring_(clock_, env_, {[this](const std::string&) { return samples_; },
                                      [this](const worker::BatchBuild& build) { Queued(build); }, nullptr}) {}
  LockstepResult Run();

 private:
  void Start();
  void Settle();
  void Queued(const worker::BatchBuild& build);
  void FinishBuild(SimWorker& w);
  void Step();
  void Observe();
  bool counting() const { return job_.step >= c_.warmup_steps; }

  const LockstepConfig c_;
  TempDir dir_;
  FakeClock clock_;
  PosixEnv env_;
  JobSpec spec_;
  uint64_t samples_ = 0;
  SimWiring wiring_;
  LockstepJob job_;
  std::vector<uint64_t> leased_end_;  // per rank: one past the highest batch a worker was given to make
  std::vector<std::optional<TimePoint>> idle_with_room_since_;  // per worker
  TimePoint counting_since_;
  LockstepResult result_;
};

void Sim::Start() {
  samples_ = kStepsPerEpoch * c_.ranks * c_.batch_size;
  const std::string manifest = WriteSimManifest(env_, dir_, "m.stoker", "s.tar", samples_);
  spec_ = SimSpec(kJob, manifest, c_.batch_size, c_.ranks, static_cast<uint32_t>(c_.steps / kStepsPerEpoch + 2));
  coordinator::CoordinatorOptions options;
  options.worker_queue_batches = c_.worker_queue_batches;
  wiring_.StartCoordinator(options);
  job_.name = kJob;
  for (uint32_t r = 0; r < c_.ranks; ++r) {
    SimRank& rank = job_.ranks.emplace_back();
    rank.client_id = "c-" + std::to_string(r);
    rank.peer = "rank-" + std::to_string(r);
  }
  wiring_.Register(job_, spec_, c_.window);
  leased_end_.assign(c_.ranks, 0);
  wiring_.StartWorkers(c_.workers);
  idle_with_room_since_.assign(c_.workers, std::nullopt);
  wiring_.GiveCredits(job_, c_.credits);
  Settle();
  job_.wait_start = clock_.Now();
}

// Delivers everything the Impls asked to send; then idle workers start their next batch.
void Sim::Settle() {
  wiring_.Deliver();
  for (SimWorker& w : wiring_.workers()) {
    if (w.StartNext(clock_.Now(), c_.batch_time) && counting()) w.busy += c_.batch_time;
  }
}

void Sim::Queued(const worker::BatchBuild& build) {
  uint64_t& end = leased_end_[std::get<1>(build.unit)];
  end = std::max(end, build.epoch * kStepsPerEpoch + build.index + 1);
}

void Sim::FinishBuild(SimWorker& w) {
  std::shared_ptr<worker::BatchBuild> build = w.TakeMade();
  w.Count(*build, c_.batch_time, c_.batch_size);
  if (!w.impl->RouteBatch(*build)) return;
  job_.ranks[std::get<1>(build->unit)].arrived[build->epoch * kStepsPerEpoch + build->index] = clock_.Now();
  w.impl->BatchSent(*build, true);
}

// The ranks release the step that ended and start the next once every rank has its batch.
void Sim::Step() {
  const TimePoint now = clock_.Now();
  if (job_.EndStep(now)) {
    if (job_.step == c_.warmup_steps) counting_since_ = now;
    wiring_.Acknowledge(job_);
  }
  if (job_.StartStep(now, c_.step_time, c_.batch_size) && counting() && now > job_.wait_start) {
    ++result_.waiting_steps;
  }
}

// After the warm-up: workers idle while a rank has window room nobody is using, and the advice while ranks wait.
void Sim::Observe() {
  if (!counting()) return;
  const TimePoint now = clock_.Now();
  bool room = false;
  const uint64_t total = kStepsPerEpoch * spec_.epochs;
  for (uint32_t r = 0; r < c_.ranks; ++r) {
    room = room || (leased_end_[r] < std::min(total, job_.ranks[r].consumed + c_.window));
  }
  for (size_t w = 0; w < wiring_.workers().size(); ++w) {
    std::optional<TimePoint>& since = idle_with_room_since_[w];
    if (!room || wiring_.workers()[w].building) {
      since.reset();
      continue;
    }
    if (!since) since = now;
    if (now - *since > 2 * kTick) ++result_.idle_with_room_ms;
  }
}

LockstepResult Sim::Run() {
  Start();
  for (Duration t{0}; t < c_.limit && job_.step < c_.steps + c_.warmup_steps; t += Millis(1)) {
    clock_.Advance(Millis(1));
    const int64_t ms = ToMillis(t);
    for (SimWorker& w : wiring_.workers()) {
      if (w.building && clock_.Now() >= w.done_at) FinishBuild(w);
    }
    Step();
    if (ms % ToMillis(kTick) == 0) wiring_.Tick();
    if (ms % 250 == 0) wiring_.Acknowledge(job_);
    if (ms % 1000 == 0) wiring_.GiveCredits(job_, c_.credits);
    Settle();
    Observe();
    if (counting() && ms % 1000 == 0) {
      const coordinator::CapacityAdvice advice = wiring_.coordinator().Stats().advice;
      auto job = advice.jobs.find(kJob);
      if (job != advice.jobs.end() && !job->second.bottleneck.empty() && job->second.bottleneck != "workers") {
        result_.lowest_advice_while_waiting = std::min(result_.lowest_advice_while_waiting, advice.recommended);
      }
    }
  }
  const TimePoint end = clock_.Now();
  result_.steps = job_.step > c_.warmup_steps ? job_.step - c_.warmup_steps : 0;
  result_.seconds = ToSeconds(end - counting_since_);
  result_.ratio = result_.seconds > 0 ? result_.steps * ToSeconds(c_.step_time) / result_.seconds : 0;
  Duration busy{0};
  for (const SimWorker& w : wiring_.workers()) busy += w.busy;
  result_.worker_busy = result_.seconds > 0 ? ToSeconds(busy) / (result_.seconds * c_.workers) : 0;
  const coordinator::CapacityAdvice advice = wiring_.coordinator().Stats().advice;
  result_.advice = advice.recommended;
  auto job = advice.jobs.find(kJob);
  if (job != advice.jobs.end()) result_.bottleneck = job->second.bottleneck;
  return result_;
}

}  // namespace

LockstepResult RunLockstep(const LockstepConfig& config) { return Sim(config).Run(); }

}  // namespace stoker::testing
