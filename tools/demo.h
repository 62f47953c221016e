// Demo: what `stoker demo` runs, as steps a reader can follow — prepare the dataset (generated and indexed once),
// start the coordinator and worker processes on loopback, start one consuming client per rank in this process
// (each "training" --step-ms per batch, as a GPU step would), watch them with a live progress line and a per-epoch
// verdict from the checker (optionally with chaos), stop the servers as Kubernetes would, and summarise.
//
// Thread safety: Run() from one thread; the consumer threads share only Progress, under its mutex.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "stoker/job_spec.h"
#include "dataset/plan.h"
#include "stoker/status.h"
#include "base/sync.h"
#include "stoker/client.h"
#include "storage/options.h"
#include "tools/chaos.h"
#include "tools/delivery_check.h"
#include "tools/local_cluster.h"

namespace stoker::tools {

struct DemoOptions {
  std::string data = "stoker-demo-data";
  uint64_t images = 2048;
  uint32_t workers = 3;
  uint32_t threads_per_worker = 1;
  uint32_t prefetch = 8;
  std::string summary_json;
  std::chrono::milliseconds stall_timeout{60000};
  bool chaos = false;
  // Observability (docs/observability.md).
  std::string metrics_listen = "127.0.0.1:0";  // the consumers' endpoint (every client of this process)
  std::string prometheus_targets;              // file_sd JSON of every endpoint, rewritten as processes come and go
  std::string worker_sample_delay;             // make every sample this slow in every worker (a slow pipeline)
  // The consumers "train" this long on each batch, standing in for a GPU step: the default is one that three
  // single-thread workers keep up with on a laptop-class machine, so the input stall reads near 0 %.
  uint32_t step_ms = 120;
  uint32_t gpus = 0;         // label rank r as feeding GPU r % gpus (0: no GPU labels)
  uint32_t max_workers = 0;  // the "autoscaler's" ceiling the coordinator exports (0: --workers)
  // Over object storage: the shards are uploaded to this s3:// prefix (or read from this http(s):// directory) and
  // indexed there; the workers read them by range.
  std::string object_store;
  storage::StorageOptions storage;
};

// What the consumers have seen so far, shared with the progress line.
struct DemoProgress {
  Mutex mu;
  CondVar changed;  // an epoch ended on some rank, or a rank failed
  std::vector<uint64_t> batches STOKER_GUARDED_BY(mu);         // per rank, whole job
  uint64_t samples STOKER_GUARDED_BY(mu) = 0;                  // all samples handed to the consumers
  double wait_seconds STOKER_GUARDED_BY(mu) = 0;               // summed over ranks
  std::vector<uint32_t> epoch_done STOKER_GUARDED_BY(mu);      // per rank: epochs finished
  std::vector<double> epoch_end_time STOKER_GUARDED_BY(mu);    // per epoch: when its last rank finished it (s)
  std::vector<uint64_t> epoch_samples STOKER_GUARDED_BY(mu);   // per epoch
  std::vector<double> stall_seconds STOKER_GUARDED_BY(mu);     // per rank: waits while the consumer had nothing to do
  std::vector<double> step_seconds STOKER_GUARDED_BY(mu);      // per rank: time between consecutive batches
  std::string metrics_address STOKER_GUARDED_BY(mu);           // the consumers' /metrics, once started
  Status failure STOKER_GUARDED_BY(mu);
};

// The whole run's outcome, for the summary.
struct DemoOutcome {
  bool consumed = false;  // the consumers ran (the dataset and the servers were there)
  std::vector<EpochVerdict> verdicts;
  Status failure;
  double elapsed_seconds = 0;
  double wait_seconds = 0;
  uint64_t samples = 0;
  double stall_seconds = 0;
  double step_seconds = 0;
  bool workers_clean = true;
  bool coordinator_clean = true;
};

class Demo {
 public:
  Demo(const DemoOptions& options, const JobSpec& spec) : o_(options), spec_(spec) {}
  ~Demo();

  // Every step in order; the outcome says what happened (a failure is in it, never thrown).
  DemoOutcome Run(const std::atomic<bool>& interrupted);
  const Plan& plan() const { return *plan_; }
  const std::optional<Chaos>& chaos() const { return chaos_; }

 private:
  Status PrepareDataset();
  // Uploads the local shards to --object-store (missing or different ones only) and indexes them there.
  StatusOr<std::string> StageOnObjectStore(const std::string& shards);
  Status StartServers();
  void StartConsumers();
  void Consume(uint32_t rank);
  void Watch(const std::atomic<bool>& interrupted, DemoOutcome& outcome);
  void ReportEpochs(uint32_t epochs_complete, DemoOutcome& outcome);
  void InjectChaos();
  void WriteTargets();
  void StopServers(DemoOutcome& outcome);

  const DemoOptions o_;
  JobSpec spec_;
  std::optional<Plan> plan_;
  std::optional<LocalCluster> cluster_;
  std::optional<Chaos> chaos_;
  std::optional<DeliveryChecker> checker_;
  DemoProgress progress_;
  ClientOptions client_options_;
  std::chrono::steady_clock::time_point start_;
  std::vector<std::thread> consumers_;
  const std::atomic<bool>* interrupted_ = nullptr;
  uint32_t reported_epochs_ = 0;
  std::string targets_written_;
};

// Prints the summary (and writes it as JSON to options.summary_json when set); returns the exit code.
int SummarizeDemo(const DemoOptions& options, const JobSpec& spec, const Demo& demo, const DemoOutcome& outcome);

}  // namespace stoker::tools
