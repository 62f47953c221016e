// PoolSim: several data-parallel jobs sharing one worker pool, simulated on a FakeClock, deterministic to the
// millisecond. As in LockstepSim (lockstep_sim.h), the real coordinator (CoordinatorImpl) and the real workers'
// decisions (WorkerImpl) run against each other with no sockets; what they ask each other to send is delivered at
// once, and each worker has one pipeline thread that makes a batch in a fixed time (per job). Each
// job's ranks step in lockstep as DDP does: step k of a job starts when every rank of that job has its batch k,
// lasts the job's step time, and then every rank releases it and acknowledges. Jobs step independently of each
// other; a job may join or leave mid-run. Each job's clients register under their team's identity (the Caller the
// transport would have authenticated), and every worker holds credit for every rank of every running job.
//
// It answers the sharing questions: when the pool cannot feed every job, who gets the batches — in proportion to
// what, and does any job starve — and how the split moves when a job joins or leaves.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "stoker/clock.h"

namespace stoker::coordinator {
struct CoordinatorOptions;
}

namespace stoker::testing {

struct PoolJob {
  std::string name = "job";
  std::string team = "client:team";  // the identity its clients authenticate as (Caller::identity)
  uint32_t ranks = 1;
  uint32_t window = 16;               // each rank's prefetch window (batches): ClientOptions::prefetch's default
  uint32_t credits = 2;               // each rank's credit per worker: ClientOptions::credits_per_worker's default
  uint32_t batch_size = 8;
  Duration step_time = Millis(50);    // one training step of every rank
  Duration start_at{0};               // when its clients register (from the start of the simulation)
  std::optional<Duration> end_at;     // when its clients deregister and withdraw their credit; unset: never
  std::optional<Duration> batch_time; // one worker, one thread, one of its batches; unset: PoolConfig's
};

struct PoolConfig {
  std::vector<PoolJob> jobs;
  uint32_t workers = 2;               // each with one pipeline thread
  Duration batch_time = Millis(100);  // one worker, one thread, one batch (of a job that does not set its own)
  Duration limit = Millis(40000);     // simulated time
  Duration warmup = Millis(5000);     // not counted in the figures below (the samples cover it)
  uint32_t worker_queue_batches = 0;  // CoordinatorOptions::worker_queue_batches (0: its default)
  // Called on the coordinator's options last, before it is made (may be empty).
  std::function<void(coordinator::CoordinatorOptions&)> configure;
};

struct PoolJobResult {
  std::string name;
  uint64_t batches = 0;               // delivered to its ranks after the warm-up
  uint64_t steps = 0;                 // steps completed after the warm-up
  double seconds = 0;                 // the time it ran after the warm-up (between its start and end)
  double steps_per_second = 0;        // steps / seconds
  double ratio = 0;                   // steps x step time / seconds: 1 when input never held a step back
  double share = 0;                   // batches / every job's batches after the warm-up
  // Every 100 ms of simulated time from the start (the warm-up included): (time, batches delivered so far).
  std::vector<std::pair<Duration, uint64_t>> delivered;

  // Batches delivered between two sample times (multiples of 100 ms within the limit), and their rate per second.
  uint64_t BatchesBetween(Duration from, Duration to) const;
  double RateBetween(Duration from, Duration to) const;
};

struct PoolResult {
  std::vector<PoolJobResult> jobs;    // in PoolConfig::jobs' order
  uint64_t batches = 0;               // every job's, after the warm-up
  double worker_busy = 0;             // fraction of the workers' time spent making batches, after the warm-up
};

PoolResult RunPool(const PoolConfig& config);

}  // namespace stoker::testing
