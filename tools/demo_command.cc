// stoker demo: the whole data path on one machine. It generates and indexes a dataset (once), starts the
// coordinator and several worker processes on loopback, consumes every rank's batches in this process through the
// real client, shows a live progress line, checks every epoch against the plan, and prints (and optionally
// writes as JSON) a summary: planned, delivered, duplicates, lost, quarantined, batches per rank, images/s.
#include <atomic>
#include <condition_variable>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <deque>
#include <fstream>
#include <tuple>
#include <mutex>
#include <thread>

#include "tools/delivery_check.h"
#include "common/flags.h"
#include "common/json_writer.h"
#include "common/logging.h"
#include "common/manifest.h"
#include "tools/dataset_index.h"
#include "stoker/client.h"
#include "tools/chaos.h"
#include "tools/commands.h"
#include "tools/local_cluster.h"
#include "tools/progress.h"
#include "tools/subprocess.h"
#include "datagen/synthetic_dataset.h"

namespace stoker {
namespace {

std::atomic<bool> g_interrupted{false};
void OnInterrupt(int) { g_interrupted.store(true); }

struct DemoOptions {
  std::string data = "stoker-demo-data";
  uint64_t images = 2048;
  uint32_t workers = 3;
  uint32_t threads_per_worker = 1;
  uint32_t prefetch = 8;
  std::string summary_json;
  std::string stall = "60s";
  bool chaos = false;
  // Observability (docs/observability.md).
  std::string metrics_listen = "127.0.0.1:0";  // the consumers' endpoint (every client of this process)
  std::string prometheus_targets;              // file_sd JSON of every endpoint, rewritten as processes come and go
  std::string worker_sample_delay;             // make every sample this slow in every worker (a slow pipeline)
  uint32_t step_ms = 0;                        // the consumers "train" this long on each batch
  uint32_t gpus = 0;                           // label rank r as feeding GPU r % gpus (0: no GPU labels)
  uint32_t max_workers = 0;                    // the "autoscaler's" ceiling the coordinator exports (0: --workers)
};

// What the consumers have seen so far, shared with the progress line.
struct Progress {
  std::mutex mu;
  std::vector<uint64_t> batches;        // per rank, whole job
  uint64_t samples = 0;                 // all samples handed to the consumers
  double wait_seconds = 0;              // summed over ranks
  std::vector<uint32_t> epoch_done;     // per rank: epochs finished
  std::vector<double> epoch_end_time;   // per epoch: when the last rank finished it (seconds since start)
  std::vector<uint64_t> epoch_samples;  // per epoch
  std::vector<double> stall_seconds;    // per rank, from the client: waits while the consumer had nothing to do
  std::vector<double> step_seconds;     // per rank, from the client: time between consecutive batches
  std::string metrics_address;          // the consumers' /metrics, once the first client started it
  Status failure;
  std::condition_variable changed;      // an epoch ended on some rank, or a rank failed
};

void Consume(const ClientOptions& options, DeliveryChecker& checker, Progress& progress, uint32_t rank,
             std::chrono::milliseconds stall, std::chrono::steady_clock::time_point start, uint32_t gpus,
             std::chrono::milliseconds step) {
  ClientOptions mine = options;
  mine.rank = rank;
  if (gpus > 0) mine.gpu = static_cast<int>(rank % gpus);
  auto client = Client::Connect(mine);
  if (!client.ok()) {
    std::lock_guard<std::mutex> lock(progress.mu);
    progress.failure = client.status().WithContext("rank " + std::to_string(rank));
    progress.changed.notify_all();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(progress.mu);
    if (progress.metrics_address.empty()) progress.metrics_address = (*client)->Stats().metrics_address;
  }
  while (!g_interrupted.load()) {
    auto before = std::chrono::steady_clock::now();
    auto d = (*client)->Next(stall);
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
    if (!d.ok()) {
      std::lock_guard<std::mutex> lock(progress.mu);
      progress.failure = d.status().WithContext("rank " + std::to_string(rank));
      progress.changed.notify_all();
      return;
    }
    ClientStats stats = (*client)->Stats();
    std::unique_lock<std::mutex> lock(progress.mu);
    progress.wait_seconds += waited;
    progress.stall_seconds[rank] = stats.stall_seconds;
    progress.step_seconds[rank] = stats.step_seconds;
    if (d->kind == Delivery::Kind::kEndOfJob) return;
    if (d->kind == Delivery::Kind::kEndOfEpoch) {
      uint32_t epoch = ++progress.epoch_done[rank] - 1;
      bool all = true;
      for (uint32_t done : progress.epoch_done) all = all && done > epoch;
      if (all) {
        progress.epoch_end_time[epoch] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      progress.changed.notify_all();
      continue;
    }
    const Batch& b = d->batch;
    checker.Record({b.epoch(), b.rank(), b.index(), {b.sample_ids().begin(), b.sample_ids().end()},
                    {b.flags().begin(), b.flags().end()}});
    ++progress.batches[rank];
    progress.samples += b.size();
    progress.epoch_samples[b.epoch()] += b.size();
    lock.unlock();
    // "Training" on the batch: the consumer is busy, so time spent here is not a stall.
    if (step.count() > 0) std::this_thread::sleep_for(step);
  }
}

// Prometheus file_sd targets for every process of the demo, with the labels a PodMonitor would add.
std::string PrometheusTargets(LocalCluster& cluster, const std::string& client_metrics) {
  JsonWriter j;
  j.BeginArray();
  auto target = [&](const std::string& address, const std::string& job, const std::string& pod) {
    j.BeginObject().Key("targets").BeginArray().Value(address).EndArray();
    j.Key("labels").BeginObject().Key("job").Value(job).Key("namespace").Value("demo").Key("pod").Value(pod);
    j.EndObject().EndObject();
  };
  if (!cluster.coordinator_metrics().empty()) {
    target(cluster.coordinator_metrics(), "stoker-coordinator", "coordinator-0");
  }
  for (size_t i : cluster.RunningWorkers()) {
    target(cluster.worker_metrics(i), "stoker-worker", "worker-" + std::to_string(i));
  }
  if (!client_metrics.empty()) target(client_metrics, "stoker-client", "trainer-0");
  j.EndArray();
  return j.str() + "\n";
}

Status PrepareDataset(const DemoOptions& o, std::string* manifest_path) {
  PosixEnv env;
  std::string shards = JoinPath(o.data, "shards");
  *manifest_path = JoinPath(o.data, "manifest.stoker");
  auto existing = Manifest::Open(*manifest_path);
  if (existing.ok() && (*existing)->num_samples() == o.images) {
    std::fprintf(stderr, "dataset: %s (%llu images, already generated)\n", manifest_path->c_str(),
                 static_cast<unsigned long long>(o.images));
    return Status::Ok();
  }
  GenerateOptions gen;
  gen.images = o.images;
  gen.per_shard = 256;
  gen.classes = 10;
  ProgressLine line;
  auto start = std::chrono::steady_clock::now();
  gen.progress = [&](uint64_t done, uint64_t total) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char text[160];
    std::snprintf(text, sizeof(text), "generating ImageNet-like JPEGs: %llu/%llu (%.0f img/s)",
                  static_cast<unsigned long long>(done), static_cast<unsigned long long>(total), s > 0 ? done / s : 0);
    line.Update(text);
  };
  STOKER_RETURN_IF_ERROR(GenerateTarDataset(env, shards, gen));
  line.Finish();
  auto report = IndexDataset(env, shards, *manifest_path, IndexOptions{});
  if (!report.ok()) return report.status();
  std::fprintf(stderr, "dataset: %s: %llu samples in %llu shards (%.0f MB)\n", manifest_path->c_str(),
               static_cast<unsigned long long>(report->samples), static_cast<unsigned long long>(report->shards),
               report->bytes / 1e6);
  return Status::Ok();
}

std::string Bar(double fraction, int width) {
  int filled = static_cast<int>(fraction * width + 0.5);
  std::string bar(filled, '#');
  bar.append(width - filled, '.');
  return bar;
}

}  // namespace

int DemoCommand(int argc, char** argv) {
  DemoOptions o;
  JobSpec spec;
  spec.name = "demo";
  spec.batch_size = 32;
  spec.world_size = 2;
  spec.epochs = 2;
  spec.seed = 2026;
  std::string log_level = "warning";
  FlagSet flags("stoker demo [flags]",
                "Runs the whole data path on this machine: generates an ImageNet-like dataset (once), starts a "
                "coordinator and worker processes on loopback, consumes every rank through the client library "
                "with a live progress line, and checks each epoch delivered every planned sample exactly once.");
  flags.AddString("data", &o.data, "directory for the generated dataset, manifest and process logs");
  flags.AddUint("images", &o.images, "images in the generated dataset");
  flags.AddUint32("workers", &o.workers, "worker processes");
  flags.AddUint32("threads-per-worker", &o.threads_per_worker, "pipeline threads in each worker");
  flags.AddUint32("prefetch", &o.prefetch, "batches each rank's client holds at once");
  flags.AddString("summary-json", &o.summary_json, "write the summary here as JSON");
  flags.AddString("stall-timeout", &o.stall, "fail if a rank receives nothing for this long");
  flags.AddString("log-level", &log_level, "log level of this process (the servers log to files under --data)");
  flags.AddString("metrics-listen", &o.metrics_listen,
                  "host:port where the consumers (this process) serve /metrics; the coordinator and workers pick "
                  "free loopback ports (see --prometheus-targets); empty: none");
  flags.AddString("prometheus-targets", &o.prometheus_targets,
                  "keep a Prometheus file_sd JSON of every process's metrics endpoint here (job, namespace and pod "
                  "labels as in Kubernetes)");
  flags.AddString("worker-sample-delay", &o.worker_sample_delay,
                  "make every sample this much slower in every worker (e.g. 20ms): too few workers, on purpose");
  flags.AddUint32("step-ms", &o.step_ms, "the consumers train for this long on each batch (0: consume at once)");
  flags.AddUint32("gpus", &o.gpus, "label rank r as feeding GPU r % N (gpu, gpu_uuid labels; NVML metrics)");
  flags.AddUint32("max-workers", &o.max_workers,
                  "the worker ceiling the coordinator exports for the 'workers saturated' alert (0: --workers)");
  flags.AddBool("chaos", &o.chaos,
                "inject faults at random while the demo runs: kill -9 and SIGTERM workers (replacing them), kill -9 "
                "and restart the coordinator on its journal, SIGSTOP workers, cut workers off the network");
  AddJobSpecFlags(flags, &spec);
  Status parsed = flags.Parse(argc, argv, 2);
  if (!parsed.ok()) return Fail("demo", parsed);
  if (!SetLogLevelFromString(log_level)) return Fail("demo", InvalidArgumentError("--log-level " + log_level));
  auto stall_ms = ParseDurationMs(o.stall);
  if (!stall_ms.ok()) return Fail("demo", stall_ms.status().WithContext("--stall-timeout"));
  if (o.workers == 0) return Fail("demo", InvalidArgumentError("--workers must be at least 1"));
  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGTERM, OnInterrupt);

  PosixEnv env;
  if (Status s = env.CreateDirectories(o.data); !s.ok()) return Fail("demo", s);
  std::string manifest_path;
  if (Status s = PrepareDataset(o, &manifest_path); !s.ok()) return Fail("demo", s);
  if (spec.manifest_path.empty()) spec.manifest_path = manifest_path;
  auto manifest = Manifest::Open(spec.manifest_path);
  if (!manifest.ok()) return Fail("demo", manifest.status());
  auto plan = Plan::Make(spec, (*manifest)->num_samples());
  if (!plan.ok()) return Fail("demo", plan.status());

  // The servers, as separate processes on loopback, each logging to a file.
  std::string run_dir = JoinPath(o.data, "run");
  if (Status s = env.CreateDirectories(run_dir); !s.ok()) return Fail("demo", s);
  std::remove(JoinPath(run_dir, "coordinator.journal").c_str());  // each demo run starts afresh
  LocalCluster cluster(
      {run_dir, "", true, {"--max-workers", std::to_string(o.max_workers ? o.max_workers : o.workers)}});
  if (Status s = cluster.StartCoordinator(); !s.ok()) {
    return Fail("demo", s.WithContext("the coordinator did not start (see its log)"));
  }
  ChaosOptions chaos_options;
  chaos_options.worker_threads = o.threads_per_worker;
  chaos_options.seed = spec.seed;
  // Dense enough that a two-epoch demo on a laptop sees every kind of fault.
  chaos_options.min_interval = std::chrono::milliseconds(600);
  chaos_options.max_interval = std::chrono::milliseconds(1200);
  std::optional<Chaos> chaos;
  if (o.chaos) chaos.emplace(cluster, chaos_options);
  std::vector<std::string> worker_flags;
  if (!o.worker_sample_delay.empty()) {
    if (auto d = ParseDurationMs(o.worker_sample_delay); !d.ok()) {
      return Fail("demo", d.status().WithContext("--worker-sample-delay"));
    }
    worker_flags = {"--inject-sample-delay", o.worker_sample_delay};
  }
  for (uint32_t i = 0; i < o.workers; ++i) {
    auto w = chaos ? chaos->StartWorker() : cluster.StartWorker(o.threads_per_worker, worker_flags);
    if (!w.ok()) return Fail("demo", w.status());
  }
  std::fprintf(stderr, "coordinator %s, %u workers x %u threads%s; logs in %s\n",
               cluster.coordinator_endpoint().c_str(), o.workers, o.threads_per_worker,
               o.chaos ? ", chaos on (faults injected at random)" : "", run_dir.c_str());
  std::fprintf(stderr, "job: %u ranks x batch %u, %llu steps per epoch, %u epochs, pipeline %s, seed %llu\n",
               spec.world_size, spec.batch_size, static_cast<unsigned long long>(plan->steps_per_epoch()), spec.epochs,
               PipelineModeName(spec.pipeline.mode), static_cast<unsigned long long>(spec.seed));

  // The consumers: one client per rank, in this process.
  DeliveryChecker checker(*plan);
  Progress progress;
  progress.batches.assign(spec.world_size, 0);
  progress.epoch_done.assign(spec.world_size, 0);
  progress.epoch_end_time.assign(spec.epochs, 0);
  progress.epoch_samples.assign(spec.epochs, 0);
  progress.stall_seconds.assign(spec.world_size, 0);
  progress.step_seconds.assign(spec.world_size, 0);
  ClientOptions client_options;
  client_options.metrics_listen = o.metrics_listen;
  client_options.coordinator = cluster.coordinator_endpoint();
  client_options.job = spec.name;
  client_options.spec = spec;
  client_options.prefetch = o.prefetch;
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> consumers;
  for (uint32_t r = 0; r < spec.world_size; ++r) {
    consumers.emplace_back(Consume, std::cref(client_options), std::ref(checker), std::ref(progress), r,
                           std::chrono::milliseconds(*stall_ms), start, o.gpus, std::chrono::milliseconds(o.step_ms));
  }
  std::string targets_written;
  auto write_targets = [&] {
    if (o.prometheus_targets.empty()) return;
    std::string client_metrics;
    {
      std::lock_guard<std::mutex> lock(progress.mu);
      client_metrics = progress.metrics_address;
    }
    std::string targets = PrometheusTargets(cluster, client_metrics);
    if (targets == targets_written) return;
    if (Status s = env.WriteFileAtomically(o.prometheus_targets, targets.data(), targets.size()); !s.ok()) {
      STOKER_LOG(kWarning) << "--prometheus-targets: " << s.ToString();
      return;
    }
    targets_written = targets;
  };
  bool endpoints_shown = false;
  // The stall ratio over the last ~10 s, as Prometheus's rate() would show it: samples of (stall, step) sums.
  std::deque<std::tuple<double, double, double>> stall_window;  // (elapsed, stall, step)

  // Live progress until every rank has finished (or failed).
  ProgressLine line(std::chrono::milliseconds(1000));
  const uint64_t total_batches = plan->total_batches() * spec.world_size;
  uint32_t reported_epochs = 0;
  std::vector<EpochVerdict> verdicts;
  while (true) {
    bool finished;
    uint64_t batches = 0, samples;
    double stall_sum = 0, step_sum = 0;
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string client_metrics;
    uint32_t epochs_complete = spec.epochs;
    {
      std::lock_guard<std::mutex> lock(progress.mu);
      for (uint64_t b : progress.batches) batches += b;
      for (uint32_t d : progress.epoch_done) epochs_complete = std::min(epochs_complete, d);
      samples = progress.samples;
      finished = !progress.failure.ok() || epochs_complete == spec.epochs;
      for (double x : progress.stall_seconds) stall_sum += x;
      for (double x : progress.step_seconds) step_sum += x;
      client_metrics = progress.metrics_address;
    }
    write_targets();
    if (!endpoints_shown && !client_metrics.empty()) {
      endpoints_shown = true;
      line.Finish();
      std::fprintf(stderr, "metrics: coordinator http://%s/metrics, consumers http://%s/metrics%s%s\n",
                   cluster.coordinator_metrics().c_str(), client_metrics.c_str(),
                   o.prometheus_targets.empty() ? "" : "; Prometheus targets in ",
                   o.prometheus_targets.c_str());
    }
    stall_window.emplace_back(elapsed, stall_sum, step_sum);
    while (stall_window.size() > 2 && std::get<0>(stall_window.front()) < elapsed - 10) stall_window.pop_front();
    const double d_step = step_sum - std::get<2>(stall_window.front());
    const double recent_stall = d_step > 0 ? (stall_sum - std::get<1>(stall_window.front())) / d_step : 0;
    // Per-epoch summary as soon as every rank has finished the epoch.
    while (reported_epochs < epochs_complete) {
      line.Finish();
      EpochVerdict v = checker.Check(reported_epochs);
      double begin = reported_epochs == 0 ? 0 : progress.epoch_end_time[reported_epochs - 1];
      double seconds = progress.epoch_end_time[reported_epochs] - begin;
      std::fprintf(stderr, "%s epoch %u: %llu planned, %llu delivered, %llu duplicates, %llu lost, %llu quarantined, "
                           "batches per rank [",
                   v.ok() && v.balanced(plan->steps_per_epoch()) ? "ok  " : "FAIL", reported_epochs,
                   static_cast<unsigned long long>(v.planned_real), static_cast<unsigned long long>(v.delivered),
                   static_cast<unsigned long long>(v.duplicated), static_cast<unsigned long long>(v.lost),
                   static_cast<unsigned long long>(v.quarantined));
      for (size_t r = 0; r < v.batches_per_rank.size(); ++r) {
        std::fprintf(stderr, "%s%llu", r ? " " : "", static_cast<unsigned long long>(v.batches_per_rank[r]));
      }
      std::fprintf(stderr, "], %.0f img/s\n", seconds > 0 ? progress.epoch_samples[reported_epochs] / seconds : 0);
      verdicts.push_back(v);
      ++reported_epochs;
    }
    if (finished || g_interrupted.load()) break;
    if (chaos) {
      auto did = chaos->Step();
      if (!did.ok()) {
        line.Finish();
        std::fprintf(stderr, "chaos: %s\n", did.status().ToString().c_str());
      } else {
        for (const std::string& d : *did) {
          line.Finish();
          std::fprintf(stderr, "chaos: %s\n", d.c_str());
        }
      }
    }
    uint32_t epoch = std::min<uint32_t>(spec.epochs - 1, static_cast<uint32_t>(batches / std::max<uint64_t>(1, plan->steps_per_epoch() * spec.world_size)));
    double in_epoch = static_cast<double>(batches % std::max<uint64_t>(1, plan->steps_per_epoch() * spec.world_size)) /
                      (plan->steps_per_epoch() * spec.world_size);
    char text[256];
    std::snprintf(text, sizeof(text),
                  "epoch %u/%u [%s] %3.0f%%  %6.0f img/s  input stall %4.1f%% (10 s), %4.1f%% overall  "
                  "%llu/%llu batches",
                  epoch + 1, spec.epochs, Bar(in_epoch, 24).c_str(), in_epoch * 100, elapsed > 0 ? samples / elapsed : 0,
                  100 * recent_stall, step_sum > 0 ? 100 * stall_sum / step_sum : 0.0,
                  static_cast<unsigned long long>(batches), static_cast<unsigned long long>(total_batches));
    line.Update(text);
    // Refresh twice a second, or at once when a rank finishes an epoch or fails.
    std::unique_lock<std::mutex> wait_lock(progress.mu);
    progress.changed.wait_for(wait_lock, std::chrono::milliseconds(chaos ? 100 : 500));
  }
  line.Finish();
  for (auto& t : consumers) t.join();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Stop the servers the way Kubernetes would: SIGTERM, then wait.
  if (chaos) chaos->Calm();
  std::vector<size_t> running = cluster.RunningWorkers();
  for (size_t i : running) cluster.worker(i).Signal(SIGTERM);
  bool workers_clean = true;
  for (size_t i : running) {
    auto code = cluster.worker(i).Wait(std::chrono::seconds(10));
    workers_clean = workers_clean && code.has_value() && *code == 0;
  }
  cluster.coordinator().Signal(SIGTERM);
  auto coordinator_code = cluster.coordinator().Wait(std::chrono::seconds(5));

  // The summary.
  uint64_t planned = 0, delivered = 0, duplicates = 0, lost = 0, quarantined = 0, unexpected = 0, corrupt = 0;
  std::vector<uint64_t> per_rank(spec.world_size, 0);
  bool all_ok = verdicts.size() == spec.epochs;
  for (const EpochVerdict& v : verdicts) {
    planned += v.planned_real;
    delivered += v.delivered;
    duplicates += v.duplicated;
    lost += v.lost;
    quarantined += v.quarantined;
    unexpected += v.unexpected;
    corrupt += v.corrupt;
    for (size_t r = 0; r < per_rank.size(); ++r) per_rank[r] += v.batches_per_rank[r];
    all_ok = all_ok && v.ok() && v.balanced(plan->steps_per_epoch());
  }
  Status failure;
  double wait, stall_total = 0, step_total = 0;
  uint64_t samples;
  {
    std::lock_guard<std::mutex> lock(progress.mu);
    failure = progress.failure;
    wait = progress.wait_seconds;
    samples = progress.samples;
    for (double x : progress.stall_seconds) stall_total += x;
    for (double x : progress.step_seconds) step_total += x;
  }
  const double stall_ratio = step_total > 0 ? stall_total / step_total : 0;
  if (g_interrupted.load()) failure = CancelledError("interrupted");
  double rate = elapsed > 0 ? samples / elapsed : 0;
  std::fprintf(stderr, "\nsummary: %llu samples planned, %llu delivered, %llu duplicates, %llu lost, %llu quarantined; "
                       "%.0f img/s over %.1f s; input stall %.1f%% (consumers idle for lack of input)\n",
               static_cast<unsigned long long>(planned), static_cast<unsigned long long>(delivered),
               static_cast<unsigned long long>(duplicates), static_cast<unsigned long long>(lost),
               static_cast<unsigned long long>(quarantined), rate, elapsed, 100 * stall_ratio);
  if (!o.summary_json.empty()) {
    JsonWriter j;
    j.BeginObject()
        .Key("ok").Value(all_ok && failure.ok())
        .Key("samples_planned").Value(planned)
        .Key("samples_delivered").Value(delivered)
        .Key("duplicates").Value(duplicates)
        .Key("lost").Value(lost)
        .Key("quarantined").Value(quarantined)
        .Key("unexpected").Value(unexpected)
        .Key("corrupt").Value(corrupt)
        .Key("batches_per_rank").BeginArray();
    for (uint64_t b : per_rank) j.Value(b);
    j.EndArray()
        .Key("steps_per_epoch").Value(plan->steps_per_epoch())
        .Key("images_per_second").Value(rate)
        .Key("elapsed_seconds").Value(elapsed)
        .Key("consumer_wait_fraction").Value(elapsed > 0 ? wait / (elapsed * spec.world_size) : 0.0)
        .Key("input_stall_ratio").Value(stall_ratio)
        .Key("input_stall_seconds").Value(stall_total)
        .Key("step_seconds").Value(step_total)
        .Key("ranks").Value(spec.world_size)
        .Key("batch_size").Value(spec.batch_size)
        .Key("epochs").BeginArray();
    for (const EpochVerdict& v : verdicts) {
      j.BeginObject()
          .Key("epoch").Value(v.epoch)
          .Key("samples_planned").Value(v.planned_real)
          .Key("samples_delivered").Value(v.delivered)
          .Key("duplicates").Value(v.duplicated)
          .Key("lost").Value(v.lost)
          .Key("quarantined").Value(v.quarantined)
          .Key("quarantined_ids").BeginArray();
      for (uint64_t id : v.quarantined_ids) j.Value(id);
      j.EndArray().Key("batches_per_rank").BeginArray();
      for (uint64_t b : v.batches_per_rank) j.Value(b);
      j.EndArray().EndObject();
    }
    j.EndArray()
        .Key("workers").Value(o.workers)
        .Key("chaos").Value(o.chaos)
        .Key("faults").BeginObject();
    if (chaos) {
      for (const auto& [kind, n] : chaos->counts()) j.Key(kind).Value(n);
    }
    j.EndObject()
        .Key("workers_exited_cleanly").Value(workers_clean)
        .Key("error").Value(failure.ok() ? "" : failure.ToString())
        .EndObject();
    std::ofstream(o.summary_json, std::ios::trunc) << j.str() << "\n";
    std::fprintf(stderr, "summary written to %s\n", o.summary_json.c_str());
  }
  if (!failure.ok()) return Fail("demo", failure);
  if (!workers_clean) std::fprintf(stderr, "warning: a worker did not drain and exit 0 on SIGTERM (see its log)\n");
  if (!coordinator_code || *coordinator_code != 0) std::fprintf(stderr, "warning: the coordinator did not exit cleanly\n");
  return all_ok ? 0 : 1;
}

}  // namespace stoker
