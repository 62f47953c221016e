// What the end-to-end benchmarks share: a coordinator and worker processes on loopback (the real binaries beside
// the benchmark), and a client in the benchmark's own process that consumes for a fixed time and reports rates.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "tools/subprocess.h"

namespace stoker::bench {

struct Rate {
  double bytes_per_second = 0;
  double batches_per_second = 0;
  double images_per_second = 0;
  double wait_fraction = 0;  // of the consumer's time, blocked in Next()
};

class LocalCluster {
 public:
  explicit LocalCluster(std::string dir) : dir_(std::move(dir)) {}
  ~LocalCluster();

  Status StartCoordinator();
  Status StartWorkers(uint32_t count, uint32_t threads, const std::vector<std::string>& extra_flags = {});
  const std::string& endpoint() const { return endpoint_; }

  // Consumes `spec` (all ranks, one client each, in this process) for warmup + seconds; rates over the timed part.
  StatusOr<Rate> Consume(const JobSpec& spec, uint32_t prefetch, uint32_t credits, double warmup, double seconds);

  // SIGTERM everything and wait.
  void Stop();

 private:
  std::string dir_;
  std::string endpoint_;
  Subprocess coordinator_;
  std::vector<Subprocess> workers_;
};

// Elapsed seconds since `t`.
double SecondsSince(std::chrono::steady_clock::time_point t);

}  // namespace stoker::bench
