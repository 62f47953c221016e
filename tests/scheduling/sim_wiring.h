// SimWiring: what the scheduling simulations (LockstepSim, lockstep_sim.h; PoolSim, pool_sim.h) are built of. The
// real coordinator (CoordinatorImpl) and the real workers' decisions (WorkerImpl) wired to each other in one thread
// with no sockets, on the simulation's FakeClock: what either asks to send is delivered at once, a worker's request
// answered as the coordinator's service would. Each worker's pipeline thread is a queue and a clock (SimWorker), and
// a job's ranks step in lockstep as DDP does (LockstepJob). Each simulation drives time, decides when a batch is
// made, and keeps its own figures.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/impl.h"
#include "stoker/clock.h"
#include "tests/support/temp_dir.h"
#include "worker/impl.h"

namespace stoker::testing {

// A worker with one pipeline thread that makes a batch in a fixed time, the front of its queue first.
struct SimWorker {
  worker::BuildCounters counters;
  std::unique_ptr<worker::WorkerImpl> impl;
  std::deque<std::shared_ptr<worker::BatchBuild>> queue;  // the front one is being made while `building`
  bool building = false;
  TimePoint done_at;
  Duration busy{0};  // after the warm-up (each simulation counts it its own way)

  // While idle, the batches at the front of its queue whose unit was revoked or handed back leave at no cost, as
  // the pipeline threads skip their samples.
  void SkipCancelled();
  // While idle, starts making the batch at the front of its queue, done `batch_time` after `now`. Returns whether
  // it started one.
  bool StartNext(TimePoint now, Duration batch_time);
  // The batch that was being made, taken off the queue: the worker is idle.
  std::shared_ptr<worker::BatchBuild> TakeMade();
  // Counts a batch's time and samples into the pipeline's counters (what the worker's heartbeat reports) and its
  // time into the batch (what its unit's report says it cost).
  void Count(worker::BatchBuild& build, Duration batch_time, uint64_t samples);
};

struct SimRank {
  std::string client_id;
  std::string peer;                       // the connection its client's credit comes over
  uint64_t consumed = 0;                  // batches released, in order
  std::map<uint64_t, TimePoint> arrived;  // global batch -> when it arrived; erased when released
  TimePoint last_return;                  // when its Next() last returned
  double step_seconds = 0, stall_seconds = 0;
  uint64_t samples = 0;
};

// A job's ranks stepping in lockstep as DDP does: step k starts when every rank has its batch k, lasts the step time,
// and then every rank releases it (its window slot frees); a rank waiting for its own batch is a stall.
struct LockstepJob {
  std::string name;
  std::string identity;  // what its clients authenticate as (Caller::identity; empty: none)
  std::vector<SimRank> ranks;
  uint64_t step = 0;     // the step its ranks are in, or wait for
  bool training = false;
  TimePoint step_end, wait_start;

  // When the step being trained is over at `now`, every rank releases its batch. Returns whether it did (the ranks
  // then acknowledge).
  bool EndStep(TimePoint now);
  // When no step is being trained and every rank has its batch, the next step starts at `now`; each rank's Next()
  // returned when its batch arrived or when the ranks began to wait, whichever was later. Returns whether it did.
  bool StartStep(TimePoint now, Duration step_time, uint32_t batch_size);
  // What rank `r`'s client tells the coordinator: what it released, what it holds, how long it stepped and stalled.
  ClientHeartbeatRequest Heartbeat(uint32_t r) const;
};

// Writes `dir`/`manifest`: `samples` samples (512 bytes each, ten labels) of one tar shard named `shard`, which is
// never read (the pipelines are simulated). Returns its path.
std::string WriteSimManifest(Env& env, const TempDir& dir, const std::string& manifest, const std::string& shard,
                             uint64_t samples);
// A job of `world_size` ranks over that manifest: unshuffled, outputs 4 x 4.
JobSpec SimSpec(const std::string& name, const std::string& manifest_path, uint32_t batch_size, uint32_t world_size,
                uint32_t epochs);

// What a simulation tells the wiring of its jobs.
struct SimHooks {
  // The samples in a job's manifest (the plan its workers load).
  std::function<uint64_t(const std::string& job)> samples;
  // Each batch a worker is given to make, as it joins the worker's queue (may be empty).
  std::function<void(const worker::BatchBuild&)> queued;
  // Each error a worker sends a client's connection (may be empty: dropped).
  std::function<void(size_t worker, const std::string& peer, const DataError& error)> refused;
};

// The coordinator and the workers' Impls, wired to each other.
class SimWiring {
 public:
  // The clock and env outlive the wiring.
  SimWiring(const Clock& clock, Env& env, SimHooks hooks) : clock_(clock), env_(env), hooks_(std::move(hooks)) {}

  void StartCoordinator(const coordinator::CoordinatorOptions& options);
  // `count` workers, w-0 up, each one pipeline thread, registering (Deliver sends it).
  void StartWorkers(uint32_t count);
  coordinator::CoordinatorImpl& coordinator() { return *coordinator_; }
  std::vector<SimWorker>& workers() { return workers_; }

  // Delivers everything the Impls asked to send, until nothing more is asked: batches to make join their worker's
  // queue (none is started here).
  void Deliver();
  // The coordinator's and every worker's timers.
  void Tick();

  // A job's clients: each rank registers (with `spec` and its prefetch `window`), gives every worker `credits`
  // (0 withdraws them), and acknowledges what it released and holds.
  void Register(LockstepJob& job, const JobSpec& spec, uint32_t window);
  void GiveCredits(const LockstepJob& job, uint32_t credits);
  void Acknowledge(const LockstepJob& job);

 private:
  void Route(size_t w, const RequestTracker::Pending& request);
  void Reply(size_t w, uint64_t id, StatusOr<ReplyBody> body);

  const Clock& clock_;
  Env& env_;
  const SimHooks hooks_;
  std::unique_ptr<coordinator::CoordinatorImpl> coordinator_;
  std::vector<SimWorker> workers_;
  std::map<coordinator::RequestHandle, std::pair<size_t, uint64_t>> parked_;  // -> (worker, request id)
  coordinator::RequestHandle next_handle_ = 1;
};

}  // namespace stoker::testing
