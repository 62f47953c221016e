// CapacityEstimator: the coordinator's advice on how many workers the running jobs need — the
// stoker_coordinator_recommended_workers gauge an autoscaler or an operator reads (tf.data service exports the
// same advice) — and, when a job's ranks wait for input, what holds them back.
//
//   job stall  = the largest over the job's ranks of stall seconds / step seconds (at most 0.98). The ranks of a
//                data-parallel job step in lockstep: while one waits for its batch the others wait in the
//                all-reduce, which they count as step time, so the job loses at least its worst rank's stall (not
//                the mean), and at most the sum when the ranks wait at different steps. A pool too small makes every
//                rank late at the same steps, where the largest is the loss; the sum would ask for several times
//                the workers needed and the autoscaler would overshoot and flap. Disjoint waits come from
//                scheduling, not from the pool, and the floor below covers them.
//   demand     = sum over jobs of (sum over ranks of samples / step seconds) / (1 - job stall): what the training
//                loops would consume if input never stalled (clients report these counters in their heartbeats).
//                For one rank it is samples / (step - stall).
//   per worker = mean over workers of samples / busy seconds x threads: what one worker makes when fully busy
//   worker busy = busy seconds / (seconds x threads) over all workers: how much of the pool's time was used
//   local      = what the node-local workers (beside one client each) make at full busy, or what they made when too
//                idle to say, each job's at most its demand x 1.1: supply the pool need not make. They count in
//                neither per worker nor worker busy.
//   recommended = ceil(sum over teams of min(demand x 1.1 - its local, cap x 1.1) / per worker) pool workers, kept
//                within [1, max(2 x workers, workers + 1)] so that one estimate
//                never asks for more than a doubling (a training loop that does no work of its own has unbounded
//                demand) — and never below the workers running while a job waits for input that they are not busy
//                making (more workers would idle too). The 10 % (kHeadroom) keeps the pool from running flat out:
//                ranks in lockstep wait whenever one batch is late, and a pool with no spare time has nothing to
//                absorb a slow batch (ResNet-50 DDP on 4 GPUs: demand / per worker named 41 workers, which fed
//                0.966x of synthetic input; 44 fed 0.981x, and with the headroom it names 45-47; bench/RESULTS.md
//                section 15).
//   caps       = a team capped at N workers (--team-max-workers) counts at most N x per worker of its jobs'
//                demand: workers it may not use would idle.
//   bottleneck (per job, when its stall is at least 3 %): "cap" when its team wants more than its cap (raise the
//                cap, or accept it); else "workers" when the pool is at least 85 % busy (add workers); else
//                "window" when the job's ranks have no room left to lease into (raise the clients' prefetch
//                window); else "scheduling" (workers idle while ranks wait with room to fill).
//
// Rates come from each reporter's counters over its last 30 s, once they span at least 2 s. A reporter silent for
// that long drops out. Until both figures exist the advice is the current worker count (no change).
//
// Thread safety: none; the Impl calls it under its mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "stoker/clock.h"

namespace stoker::coordinator {

struct JobInput {
  double demand = 0;          // samples/s its ranks would take
  double stall = 0;           // job stall, 0..0.98 (see the top of this file)
  std::string bottleneck;     // empty (not waiting), "cap", "workers", "window" or "scheduling"
};

struct CapacityAdvice {
  double demand = -1;          // samples/s the clients would take; < 0: unknown
  double per_worker = -1;      // samples/s one worker makes at full busy; < 0: unknown
  double worker_busy = -1;     // fraction of the pool's thread time spent making batches; < 0: unknown
  double local_supply = -1;    // samples/s the node-local workers make at full busy; < 0: none reporting
  uint32_t recommended = 0;
  std::map<std::string, JobInput> jobs;
};

// A job stalls (for the bottleneck) from this much job stall; the pool is busy (the workers are the bottleneck)
// from this much busy time.
inline constexpr double kJobStalled = 0.03;
inline constexpr double kPoolBusy = 0.85;
// A job's stall is held below this: the consumer's own time is never below 2 % of its step time.
inline constexpr double kMaxJobStall = 0.98;
// The advice sizes the pool for this multiple of the demand (see recommended above).
inline constexpr double kHeadroom = 1.1;

class CapacityEstimator {
 public:
  // `local`: a node-local worker, serving `local_job` (its supply is counted apart from the pool's).
  void Worker(const std::string& worker_id, uint32_t threads, double busy_seconds, uint64_t samples, TimePoint now,
              bool local = false, const std::string& local_job = "");
  void Client(const std::string& job, uint32_t rank, const std::string& client_id, double step_seconds,
              double stall_seconds, uint64_t samples, TimePoint now);
  void ForgetWorker(const std::string& worker_id);
  // Drops reporters silent for the window (departed clients and workers): memory stays bounded.
  void Prune(TimePoint now);

  // `window_bound`: the jobs none of whose waiting ranks had room left in their window (the Impl knows).
  // `caps`: the teams capped (team -> at most this many workers) and each job's team (job -> team); and what a
  // sample of each job costs the pool's pipeline threads, where known (FairShare), with a pool worker's threads:
  // a job's demand needs workers by its own cost, not the pool's mean.
  struct Caps {
    std::map<std::string, uint32_t> max_workers;
    std::map<std::string, std::string> team_of;
    std::map<std::string, double> sample_seconds;
    double worker_threads = 1;
  };
  CapacityAdvice Advise(size_t workers, TimePoint now, const std::set<std::string>& window_bound,
                        const Caps& caps) const;
  CapacityAdvice Advise(size_t workers, TimePoint now, const std::set<std::string>& window_bound = {}) const;
  // Each job's stall (as JobInput.stall) where its clients' reports say, for FairShare's order within shares.
  std::map<std::string, double> JobStalls(TimePoint now) const;
  // Advise's per_worker alone (the pool's rate per worker at full busy; < 0 unknown), without the clients' figures.
  double PerWorker(TimePoint now) const;

 private:
  struct Sample {
    TimePoint at;
    double a = 0;  // busy seconds | step seconds
    double b = 0;  // -            | stall seconds
    double samples = 0;
  };
  struct Series {
    uint32_t threads = 1;
    bool local = false;
    std::string job;  // a client's, or the job a local worker serves
    std::deque<Sample> samples;
  };
  // What a series' counters grew by over the window, and in how many seconds.
  struct Growth {
    double seconds = 0;
    double a = 0, b = 0, samples = 0;
  };
  // Per job: the rate its ranks took (samples/s) and its stall (the largest of its ranks', 0..1).
  struct Observed {
    double rate = 0, stall = 0;
  };
  std::map<std::string, Observed> ObservedJobs(TimePoint now) const;
  static void Record(Series& series, const Sample& sample);
  // The pool workers' rate per worker at full busy and busy fraction, into `advice`.
  void PoolFigures(CapacityAdvice& advice, TimePoint now) const;
  // What the node-local workers make (samples/s), by the job they serve.
  std::map<std::string, double> LocalSupply(TimePoint now) const;
  // None when the series is too short or too old to say.
  static std::optional<Growth> GrowthOver(const Series& series, TimePoint now);

  std::map<std::string, Series> workers_;
  std::map<std::tuple<std::string, uint32_t, std::string>, Series> clients_;
};

}  // namespace stoker::coordinator
