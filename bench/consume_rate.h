// What the benchmarks share: consuming a job through the real client, in the benchmark's own process, for a fixed
// time and reporting the rates; starting the servers as processes (tools/local_cluster.h); their scratch
// directories and ways to fail. The frame of their mains and the --json flag are bench_main.h's.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "stoker/client.h"
#include "stoker/job_spec.h"
#include "stoker/status.h"
#include "tools/local_cluster.h"

namespace stoker::bench {

struct Rate {
  double bytes_per_second = 0;
  double batches_per_second = 0;
  double images_per_second = 0;
  double wait_fraction = 0;  // of the consumer's time, blocked in Next()
};

// Consumes `spec` (all ranks, one client each, with the cluster's client key) from the cluster's coordinator for
// warmup + seconds; rates over the timed part.
StatusOr<Rate> ConsumeFor(const tools::LocalCluster& cluster, const JobSpec& spec, uint32_t prefetch, uint32_t credits,
                          double warmup, double seconds);

// A client of rank `rank` of `spec` on the cluster's coordinator, with the cluster's client key.
ClientOptions ClientOf(const tools::LocalCluster& cluster, const JobSpec& spec, uint32_t rank = 0);

// How a benchmark's data plane is secured: the default (CURVE on the control plane, data ports checking data
// tickets, batches sealed with AES-256-GCM); --insecure (nothing at all).
enum class DataSecurity { kSealed, kInsecure };
const char* DataSecurityName(DataSecurity security);
void ApplyDataSecurity(DataSecurity security, tools::LocalClusterOptions& options);

// For the transport benchmarks: a manifest of `samples` JPEG samples that are never read, written as
// dir/name.stoker (returned), and a coordinator with `workers` workers of `threads` threads each that only send
// (--bench-skip-decode: batches hold patterns, so the feed is measured, not decoding), secured as `security` says.
StatusOr<std::string> WriteNeverReadManifest(const std::string& dir, uint32_t samples, const std::string& name);
StatusOr<std::unique_ptr<tools::LocalCluster>> StartSkipDecodeCluster(const std::string& dir, uint32_t workers,
                                                               uint32_t threads,
                                                               DataSecurity security = DataSecurity::kSealed);
// A coordinator and `workers` workers of `threads` threads (logging warnings only) in `dir`, secured as `security`
// says, each worker with `worker_flags` too.
StatusOr<std::unique_ptr<tools::LocalCluster>> StartCluster(const std::string& dir, uint32_t workers, uint32_t threads,
                                                            const std::vector<std::string>& worker_flags = {},
                                                            DataSecurity security = DataSecurity::kSealed);

// Empties `dir`, or makes it.
Status FreshDirectory(const std::string& dir);

// A fresh directory /tmp/stoker-<name>-XXXXXX, removed with everything in it when the object goes.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The middle value (of an odd count; the upper middle of an even one).
double Median(std::vector<double> values);

// Exits the benchmark with "<program>: <what>: <status>" unless `s` is ok.
void DieUnlessOk(const Status& s, const char* what);

// Elapsed seconds since `t`.
double SecondsSince(std::chrono::steady_clock::time_point t);

}  // namespace stoker::bench
