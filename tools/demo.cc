// Demo (demo.h): the dataset, the servers, the consumers and the watch loop of `stoker demo`.
#include "tools/demo.h"

#include <cstdio>

#include "base/logging.h"
#include "dataset/manifest.h"
#include "datagen/synthetic_dataset.h"
#include "tools/dataset_index.h"
#include "tools/progress.h"

namespace stoker::tools {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Demo::~Demo() {
  for (auto& t : consumers_) {
    if (t.joinable()) t.join();
  }
}

DemoOutcome Demo::Run(const std::atomic<bool>& interrupted) {
  interrupted_ = &interrupted;
  DemoOutcome outcome;
  if (Status s = PrepareDataset(); !s.ok()) {
    outcome.failure = s;
    return outcome;
  }
  if (Status s = StartServers(); !s.ok()) {
    outcome.failure = s;
    return outcome;
  }
  StartConsumers();
  outcome.consumed = true;
  Watch(interrupted, outcome);
  for (auto& t : consumers_) t.join();
  outcome.elapsed_seconds = SecondsSince(start_);
  StopServers(outcome);
  MutexLock lock(progress_.mu);
  if (outcome.failure.ok()) outcome.failure = progress_.failure;
  outcome.wait_seconds = progress_.wait_seconds;
  outcome.samples = progress_.samples;
  for (double x : progress_.stall_seconds) outcome.stall_seconds += x;
  for (double x : progress_.step_seconds) outcome.step_seconds += x;
  if (interrupted.load()) outcome.failure = CancelledError("interrupted");
  return outcome;
}

// Generates and indexes the dataset unless a manifest of the right size is there already; makes the plan.
Status Demo::PrepareDataset() {
  PosixEnv env;
  STOKER_RETURN_IF_ERROR(env.CreateDirectories(o_.data));
  const std::string shards = JoinPath(o_.data, "shards");
  const std::string manifest_path = JoinPath(o_.data, "manifest.stoker");
  auto existing = Manifest::Open(env, manifest_path);
  if (existing.ok() && (*existing)->num_samples() == o_.images) {
    std::fprintf(stderr, "dataset: %s (%llu images, already generated)\n", manifest_path.c_str(),
                 static_cast<unsigned long long>(o_.images));
  } else {
    datagen::GenerateOptions gen;
    gen.images = o_.images;
    ProgressLine line;
    const auto start = std::chrono::steady_clock::now();
    gen.progress = [&](uint64_t done, uint64_t total) {
      const double s = SecondsSince(start);
      char text[160];
      std::snprintf(text, sizeof(text), "generating ImageNet-like JPEGs: %llu/%llu (%.0f img/s)",
                    static_cast<unsigned long long>(done), static_cast<unsigned long long>(total),
                    s > 0 ? done / s : 0);
      line.Update(text);
    };
    STOKER_RETURN_IF_ERROR(datagen::GenerateTarDataset(env, shards, gen));
    line.Finish();
    STOKER_ASSIGN_OR_RETURN(IndexReport report, IndexDataset(env, shards, manifest_path, IndexOptions{}));
    std::fprintf(stderr, "dataset: %s: %llu samples in %llu shards (%.0f MB)\n", manifest_path.c_str(),
                 static_cast<unsigned long long>(report.samples), static_cast<unsigned long long>(report.shards),
                 report.bytes / 1e6);
  }
  if (!o_.object_store.empty()) {
    STOKER_ASSIGN_OR_RETURN(std::string remote_manifest, StageOnObjectStore(shards));
    if (spec_.manifest_path.empty()) spec_.manifest_path = remote_manifest;
  }
  if (spec_.manifest_path.empty()) spec_.manifest_path = manifest_path;
  STOKER_ASSIGN_OR_RETURN(auto manifest, Manifest::Open(env, spec_.manifest_path));
  STOKER_ASSIGN_OR_RETURN(plan_, Plan::Make(spec_, manifest->num_samples()));
  checker_.emplace(*plan_);
  return Status::Ok();
}

// The servers, as separate processes on loopback, each logging to a file under --data/run.
Status Demo::StartServers() {
  PosixEnv env;
  const std::string run_dir = JoinPath(o_.data, "run");
  STOKER_RETURN_IF_ERROR(env.CreateDirectories(run_dir));
  std::remove(JoinPath(run_dir, "coordinator.journal").c_str());  // each demo run starts afresh
  cluster_.emplace(
      LocalClusterOptions{run_dir, "", true, {"--max-workers", std::to_string(o_.max_workers ? o_.max_workers : o_.workers)}});
  STOKER_RETURN_IF_ERROR(cluster_->StartCoordinator().WithContext("the coordinator did not start (see its log)"));
  if (o_.chaos) {
    ChaosOptions chaos;
    chaos.worker_threads = o_.threads_per_worker;
    chaos.seed = spec_.seed;
    // Dense enough that a two-epoch demo on a laptop sees every kind of fault.
    chaos.min_interval = std::chrono::milliseconds(600);
    chaos.max_interval = std::chrono::milliseconds(1200);
    chaos_.emplace(*cluster_, chaos);
  }
  std::vector<std::string> worker_flags;
  if (!o_.worker_sample_delay.empty()) worker_flags = {"--inject-sample-delay", o_.worker_sample_delay};
  for (uint32_t i = 0; i < o_.workers; ++i) {
    auto w = chaos_ ? chaos_->StartWorker() : cluster_->StartWorker(o_.threads_per_worker, worker_flags);
    if (!w.ok()) return w.status();
  }
  std::fprintf(stderr, "coordinator %s, %u workers x %u threads%s; logs in %s\n",
               cluster_->coordinator_endpoint().c_str(), o_.workers, o_.threads_per_worker,
               o_.chaos ? ", chaos on (faults injected at random)" : "", run_dir.c_str());
  std::fprintf(stderr, "job: %u ranks x batch %u, %llu steps per epoch, %u epochs, pipeline %s, seed %llu; each "
                       "consumer trains %u ms per batch (--step-ms)\n",
               spec_.world_size, spec_.batch_size, static_cast<unsigned long long>(plan_->steps_per_epoch()),
               spec_.epochs, PipelineModeName(spec_.pipeline.mode), static_cast<unsigned long long>(spec_.seed),
               o_.step_ms);
  return Status::Ok();
}

// One client per rank, in this process, each on its own thread.
void Demo::StartConsumers() {
  {
    MutexLock lock(progress_.mu);
    progress_.batches.assign(spec_.world_size, 0);
    progress_.epoch_done.assign(spec_.world_size, 0);
    progress_.epoch_end_time.assign(spec_.epochs, 0);
    progress_.epoch_samples.assign(spec_.epochs, 0);
    progress_.stall_seconds.assign(spec_.world_size, 0);
    progress_.step_seconds.assign(spec_.world_size, 0);
  }
  client_options_.metrics_listen = o_.metrics_listen;
  client_options_.coordinator = cluster_->coordinator_endpoint();
  cluster_->Secure(client_options_);
  client_options_.job = spec_.name;
  client_options_.spec = spec_;
  client_options_.prefetch = o_.prefetch;
  start_ = std::chrono::steady_clock::now();
  for (uint32_t r = 0; r < spec_.world_size; ++r) consumers_.emplace_back([this, r] { Consume(r); });
}

void Demo::Consume(uint32_t rank) {
  ClientOptions mine = client_options_;
  mine.rank = rank;
  if (o_.gpus > 0) mine.gpu = static_cast<int>(rank % o_.gpus);
  auto client = Client::Connect(mine);
  if (!client.ok()) {
    MutexLock lock(progress_.mu);
    progress_.failure = client.status().WithContext("rank " + std::to_string(rank));
    progress_.changed.NotifyAll();
    return;
  }
  {
    MutexLock lock(progress_.mu);
    if (progress_.metrics_address.empty()) progress_.metrics_address = (*client)->Stats().metrics_address;
  }
  while (!interrupted_->load()) {
    const auto before = std::chrono::steady_clock::now();
    auto d = (*client)->Next(o_.stall_timeout);
    const double waited = SecondsSince(before);
    const ClientStats stats = (*client)->Stats();
    MutexLock lock(progress_.mu);
    if (!d.ok()) {
      progress_.failure = d.status().WithContext("rank " + std::to_string(rank));
      progress_.changed.NotifyAll();
      return;
    }
    progress_.wait_seconds += waited;
    progress_.stall_seconds[rank] = stats.stall_seconds;
    progress_.step_seconds[rank] = stats.step_seconds;
    if (d->kind == Delivery::Kind::kEndOfJob) return;
    if (d->kind == Delivery::Kind::kEndOfEpoch) {
      const uint32_t epoch = ++progress_.epoch_done[rank] - 1;
      bool all = true;
      for (uint32_t done : progress_.epoch_done) all = all && done > epoch;
      if (all) progress_.epoch_end_time[epoch] = SecondsSince(start_);
      progress_.changed.NotifyAll();
      continue;
    }
    const Batch& b = d->batch;
    checker_->Record({b.epoch(), b.rank(), b.index(), {b.sample_ids().begin(), b.sample_ids().end()},
                      {b.flags().begin(), b.flags().end()}});
    ++progress_.batches[rank];
    progress_.samples += b.size();
    progress_.epoch_samples[b.epoch()] += b.size();
    lock.Unlock();
    // "Training" on the batch, as a GPU step would: the consumer is busy, so this time is not a stall.
    if (o_.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o_.step_ms));
  }
}

}  // namespace stoker::tools
