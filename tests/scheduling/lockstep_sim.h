// LockstepSim: a data-parallel job fed by a worker pool, simulated on a FakeClock, deterministic to the
// millisecond. The real coordinator (CoordinatorImpl) and the real workers' decisions (WorkerImpl) run against each
// other with no sockets; what they ask each other to send is delivered at once. Each worker has one pipeline thread
// that makes a batch in a fixed time. The ranks step in lockstep as DDP does: step k starts when every rank has its
// batch k, lasts a fixed time, and then every rank releases it (its window slot frees) and acknowledges; a rank
// waiting for its own batch is a stall.
//
// It answers the scheduling questions no timed test on a two-core machine can: how many steps a pool sustains
// against what it could, how often a worker idles while a rank could use a batch, and what the coordinator advises.
#pragma once

#include <cstdint>
#include <string>

#include "stoker/clock.h"

namespace stoker::testing {

struct LockstepConfig {
  uint32_t ranks = 4;
  uint32_t workers = 8;
  uint32_t window = 16;               // each rank's prefetch window (batches)
  uint32_t credits = 2;               // each rank's credit per worker
  uint32_t batch_size = 8;
  Duration batch_time = Millis(140);  // one worker, one thread, one batch
  Duration step_time = Millis(80);    // one training step of every rank
  // Simulated steps after the warm-up (the simulation also stops at `limit`). The default outlasts the advice's 30 s
  // window, so the advice at the end sees the steady state, not the start.
  uint64_t steps = 500;
  Duration limit = Millis(120000);
  uint64_t warmup_steps = 20;         // not counted in the figures below
  uint32_t worker_queue_batches = 0;  // CoordinatorOptions::worker_queue_batches
};

struct LockstepResult {
  uint64_t steps = 0;                 // steps completed after the warm-up
  double seconds = 0;                 // the time they took
  double ratio = 0;                   // steps x step time / seconds: 1 when input never held a step back
  uint64_t waiting_steps = 0;         // steps after the warm-up at which some rank's batch had not arrived
  // Milliseconds after the warm-up during which, for longer than two of the workers' ticks, a worker held no
  // batch although some rank's window had room for a batch nobody was making.
  uint64_t idle_with_room_ms = 0;
  double worker_busy = 0;             // fraction of the workers' time spent making batches, after the warm-up
  uint32_t advice = 0;                // the coordinator's recommended workers at the end
  std::string bottleneck;             // and its bottleneck for the job ("" when it does not wait)
  uint32_t lowest_advice_while_waiting = UINT32_MAX;  // the least advice seen while ranks waited and workers idled
};

LockstepResult RunLockstep(const LockstepConfig& config);

}  // namespace stoker::testing
