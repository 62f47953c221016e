// CapacityEstimator: the coordinator's advice on how many workers the running jobs need — the
// stoker_coordinator_recommended_workers gauge an autoscaler or an operator reads (tf.data service exports the
// same advice).
//
//   demand    = sum over ranks of samples / (step seconds - stall seconds): what each training loop would consume
//               if input never stalled (clients report these counters in their heartbeats)
//   per worker = mean over workers of samples / busy seconds x threads: what one worker makes when fully busy
//               (workers report busy seconds and samples in theirs)
//   recommended = ceil(demand / per worker), kept within [1, max(2 x workers, workers + 1)] so that one estimate never asks
//               for more than a doubling (a training loop that does no work of its own has unbounded demand)
//
// Rates come from each reporter's counters over its last 30 s, once they span at least 2 s. A reporter silent for
// that long drops out. Until both figures exist the advice is the current worker count (no change).
//
// Thread safety: none; the Impl calls it under its mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>

#include "stoker/clock.h"

namespace stoker::coordinator {

struct CapacityAdvice {
  double demand = -1;          // samples/s the clients would take; < 0: unknown
  double per_worker = -1;      // samples/s one worker makes at full busy; < 0: unknown
  uint32_t recommended = 0;
  std::map<std::string, double> demand_by_job;
};

class CapacityEstimator {
 public:
  void Worker(const std::string& worker_id, uint32_t threads, double busy_seconds, uint64_t samples, TimePoint now);
  void Client(const std::string& job, uint32_t rank, const std::string& client_id, double step_seconds,
              double stall_seconds, uint64_t samples, TimePoint now);
  void ForgetWorker(const std::string& worker_id);
  // Drops reporters silent for the window (departed clients and workers): memory stays bounded.
  void Prune(TimePoint now);

  CapacityAdvice Advise(size_t workers, TimePoint now) const;

 private:
  struct Sample {
    TimePoint at;
    double a = 0;  // busy seconds | step seconds
    double b = 0;  // -            | stall seconds
    double samples = 0;
  };
  struct Series {
    uint32_t threads = 1;
    std::string job;
    std::deque<Sample> samples;
  };
  static void Record(Series& series, const Sample& sample);
  static const Sample* Oldest(const Series& series, TimePoint now);

  std::map<std::string, Series> workers_;
  std::map<std::tuple<std::string, uint32_t, std::string>, Series> clients_;
};

}  // namespace stoker::coordinator
