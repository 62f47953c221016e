// Demo (demo.h), while it runs and after: the live progress line with the input stall over the last 10 s, each
// epoch's verdict as soon as every rank has finished it, chaos steps, the Prometheus targets file, and stopping
// the servers as Kubernetes would.
#include <csignal>
#include <cstdio>
#include <deque>
#include <tuple>

#include "base/env.h"
#include "base/json_writer.h"
#include "base/logging.h"
#include "tools/demo.h"
#include "tools/progress.h"

namespace stoker::tools {
namespace {

std::string Bar(double fraction, int width) {
  const int filled = static_cast<int>(fraction * width + 0.5);
  std::string bar(filled, '#');
  bar.append(width - filled, '.');
  return bar;
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
  if (!cluster.coordinator_metrics().empty()) target(cluster.coordinator_metrics(), "stoker-coordinator", "coordinator-0");
  for (size_t i : cluster.RunningWorkers()) {
    target(cluster.worker_metrics(i), "stoker-worker", "worker-" + std::to_string(i));
  }
  if (!client_metrics.empty()) target(client_metrics, "stoker-client", "trainer-0");
  j.EndArray();
  return j.str() + "\n";
}

// A snapshot of the consumers' progress for one refresh of the line.
struct Snapshot {
  uint64_t batches = 0;
  uint64_t samples = 0;
  double stall = 0;
  double step = 0;
  uint32_t epochs_complete = 0;
  bool finished = false;
  std::string client_metrics;
};

}  // namespace

void Demo::Watch(const std::atomic<bool>& interrupted, DemoOutcome& outcome) {
  ProgressLine line(std::chrono::milliseconds(1000));
  const uint64_t per_epoch = std::max<uint64_t>(1, plan_->steps_per_epoch() * spec_.world_size);
  const uint64_t total_batches = plan_->total_batches() * spec_.world_size;
  bool endpoints_shown = false;
  // The stall ratio over the last ~10 s, as Prometheus's rate() would show it: samples of (stall, step) sums.
  std::deque<std::tuple<double, double, double>> window;  // (elapsed, stall, step)
  while (true) {
    Snapshot s;
    s.epochs_complete = spec_.epochs;
    {
      MutexLock lock(progress_.mu);
      for (uint64_t b : progress_.batches) s.batches += b;
      for (uint32_t d : progress_.epoch_done) s.epochs_complete = std::min(s.epochs_complete, d);
      s.samples = progress_.samples;
      s.finished = !progress_.failure.ok() || s.epochs_complete == spec_.epochs;
      for (double x : progress_.stall_seconds) s.stall += x;
      for (double x : progress_.step_seconds) s.step += x;
      s.client_metrics = progress_.metrics_address;
    }
    WriteTargets();
    if (!endpoints_shown && !s.client_metrics.empty()) {
      endpoints_shown = true;
      line.Finish();
      std::fprintf(stderr, "metrics: coordinator http://%s/metrics, consumers http://%s/metrics%s%s\n",
                   cluster_->coordinator_metrics().c_str(), s.client_metrics.c_str(),
                   o_.prometheus_targets.empty() ? "" : "; Prometheus targets in ", o_.prometheus_targets.c_str());
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    window.emplace_back(elapsed, s.stall, s.step);
    while (window.size() > 2 && std::get<0>(window.front()) < elapsed - 10) window.pop_front();
    const double d_step = s.step - std::get<2>(window.front());
    const double recent_stall = d_step > 0 ? (s.stall - std::get<1>(window.front())) / d_step : 0;
    if (reported_epochs_ < s.epochs_complete) line.Finish();
    ReportEpochs(s.epochs_complete, outcome);
    if (s.finished || interrupted.load()) break;
    if (chaos_) InjectChaos();
    const uint32_t epoch = std::min<uint32_t>(spec_.epochs - 1, static_cast<uint32_t>(s.batches / per_epoch));
    const double in_epoch = static_cast<double>(s.batches % per_epoch) / per_epoch;
    char text[256];
    std::snprintf(text, sizeof(text),
                  "epoch %u/%u [%s] %3.0f%%  %6.0f img/s  input stall %4.1f%% (10 s), %4.1f%% overall  "
                  "%llu/%llu batches",
                  epoch + 1, spec_.epochs, Bar(in_epoch, 24).c_str(), in_epoch * 100,
                  elapsed > 0 ? s.samples / elapsed : 0, 100 * recent_stall, s.step > 0 ? 100 * s.stall / s.step : 0.0,
                  static_cast<unsigned long long>(s.batches), static_cast<unsigned long long>(total_batches));
    line.Update(text);
    // Refresh twice a second, or at once when a rank finishes an epoch or fails.
    MutexLock lock(progress_.mu);
    progress_.changed.WaitUntil(progress_.mu,
                                std::chrono::steady_clock::now() + std::chrono::milliseconds(chaos_ ? 100 : 500));
  }
  line.Finish();
}

// The verdict of every epoch all ranks have finished and that was not reported yet.
void Demo::ReportEpochs(uint32_t epochs_complete, DemoOutcome& outcome) {
  while (reported_epochs_ < epochs_complete) {
    const uint32_t epoch = reported_epochs_++;
    EpochVerdict v = checker_->Check(epoch);
    double seconds, samples;
    {
      MutexLock lock(progress_.mu);
      const double begin = epoch == 0 ? 0 : progress_.epoch_end_time[epoch - 1];
      seconds = progress_.epoch_end_time[epoch] - begin;
      samples = static_cast<double>(progress_.epoch_samples[epoch]);
    }
    std::fprintf(stderr,
                 "%s epoch %u: %llu planned, %llu delivered, %llu duplicates, %llu lost, %llu quarantined, "
                 "batches per rank [",
                 v.ok() && v.balanced(plan_->steps_per_epoch()) ? "ok  " : "FAIL", epoch,
                 static_cast<unsigned long long>(v.planned_real), static_cast<unsigned long long>(v.delivered),
                 static_cast<unsigned long long>(v.duplicated), static_cast<unsigned long long>(v.lost),
                 static_cast<unsigned long long>(v.quarantined));
    for (size_t r = 0; r < v.batches_per_rank.size(); ++r) {
      std::fprintf(stderr, "%s%llu", r ? " " : "", static_cast<unsigned long long>(v.batches_per_rank[r]));
    }
    std::fprintf(stderr, "], %.0f img/s\n", seconds > 0 ? samples / seconds : 0);
    outcome.verdicts.push_back(std::move(v));
  }
}

void Demo::InjectChaos() {
  auto did = chaos_->Step();
  if (!did.ok()) {
    std::fprintf(stderr, "\nchaos: %s\n", did.status().ToString().c_str());
    return;
  }
  for (const std::string& d : *did) std::fprintf(stderr, "\nchaos: %s\n", d.c_str());
}

// Keeps --prometheus-targets current as processes come and go.
void Demo::WriteTargets() {
  if (o_.prometheus_targets.empty()) return;
  std::string client_metrics;
  {
    MutexLock lock(progress_.mu);
    client_metrics = progress_.metrics_address;
  }
  std::string targets = PrometheusTargets(*cluster_, client_metrics);
  if (targets == targets_written_) return;
  PosixEnv env;
  if (Status s = env.WriteFileAtomically(o_.prometheus_targets, targets.data(), targets.size()); !s.ok()) {
    STOKER_LOG(kWarning) << "--prometheus-targets: " << s.ToString();
    return;
  }
  targets_written_ = targets;
}

// SIGTERM to every worker (each drains and exits 0), then to the coordinator.
void Demo::StopServers(DemoOutcome& outcome) {
  if (chaos_) chaos_->Calm();
  const std::vector<size_t> running = cluster_->RunningWorkers();
  for (size_t i : running) cluster_->worker(i).Signal(SIGTERM);
  for (size_t i : running) {
    auto code = cluster_->worker(i).Wait(std::chrono::seconds(10));
    outcome.workers_clean = outcome.workers_clean && code.has_value() && *code == 0;
  }
  cluster_->coordinator().Signal(SIGTERM);
  auto code = cluster_->coordinator().Wait(std::chrono::seconds(5));
  outcome.coordinator_clean = code.has_value() && *code == 0;
}

}  // namespace stoker::tools
