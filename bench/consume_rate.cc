// What the benchmarks share (consume_rate.h).
#include "bench/consume_rate.h"

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "dataset/manifest.h"
#include "stoker/client.h"

namespace stoker::bench {

ScratchDir::ScratchDir(const std::string& name) {
  std::string pattern = "/tmp/stoker-" + name + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    DieUnlessOk(InternalError("mkdtemp " + pattern + ": " + std::strerror(errno)), "scratch directory");
  }
  path_ = pattern;
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void DieUnlessOk(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what, s.ToString().c_str());
  std::exit(1);
}

StatusOr<std::string> WriteNeverReadManifest(const std::string& dir, uint32_t samples, const std::string& name) {
  PosixEnv env;
  ManifestWriter writer(dir, SourceKind::kTarShards);
  uint32_t shard = writer.AddShard("never-read.tar", uint64_t{1} << 40, 0);
  for (uint32_t i = 0; i < samples; ++i) writer.AddSample(shard, 512ull * i, 1, i % 1000, ImageFormat::kJpeg, "s");
  const std::string manifest = dir + "/" + name + ".stoker";
  STOKER_RETURN_IF_ERROR(writer.Write(env, manifest, name).status());
  return manifest;
}

const char* DataSecurityName(DataSecurity security) {
  switch (security) {
    case DataSecurity::kSealed: return "sealed (the default)";
    case DataSecurity::kInsecure: return "--insecure";
  }
  return "?";
}

void ApplyDataSecurity(DataSecurity security, tools::LocalClusterOptions& options) {
  options.insecure = security == DataSecurity::kInsecure;
}

StatusOr<std::unique_ptr<tools::LocalCluster>> StartSkipDecodeCluster(const std::string& dir, uint32_t workers,
                                                               uint32_t threads, DataSecurity security) {
  return StartCluster(dir, workers, threads, {"--bench-skip-decode"}, security);
}

StatusOr<std::unique_ptr<tools::LocalCluster>> StartCluster(const std::string& dir, uint32_t workers, uint32_t threads,
                                                            const std::vector<std::string>& worker_flags,
                                                            DataSecurity security) {
  tools::LocalClusterOptions options{dir, "", true, {"--log-level", "warning"}};
  ApplyDataSecurity(security, options);
  auto cluster = std::make_unique<tools::LocalCluster>(options);
  STOKER_RETURN_IF_ERROR(cluster->StartCoordinator());
  std::vector<std::string> flags = worker_flags;
  flags.insert(flags.end(), {"--log-level", "warning"});
  for (uint32_t i = 0; i < workers; ++i) STOKER_RETURN_IF_ERROR(cluster->StartWorker(threads, flags).status());
  return cluster;
}

Status FreshDirectory(const std::string& dir) {
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  if (!error) std::filesystem::create_directories(dir, error);
  return error ? InternalError(dir + ": " + error.message()) : Status::Ok();
}

ClientOptions ClientOf(const tools::LocalCluster& cluster, const JobSpec& spec, uint32_t rank) {
  ClientOptions options;
  options.coordinator = cluster.coordinator_endpoint();
  cluster.Secure(options);
  options.job = spec.name;
  options.spec = spec;
  options.rank = rank;
  return options;
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

StatusOr<Rate> ConsumeFor(const tools::LocalCluster& cluster, const JobSpec& spec, uint32_t prefetch, uint32_t credits,
                          double warmup, double seconds) {
  std::vector<std::unique_ptr<Client>> clients;
  for (uint32_t r = 0; r < spec.world_size; ++r) {
    ClientOptions options = ClientOf(cluster, spec, r);
    options.prefetch = prefetch;
    options.credits_per_worker = credits;
    STOKER_ASSIGN_OR_RETURN(auto c, Client::Connect(options));
    clients.push_back(std::move(c));
  }
  std::atomic<bool> timing{false}, done{false};
  std::mutex mu;
  Status failure;
  uint64_t bytes = 0, batches = 0, images = 0;
  double waited = 0;
  std::vector<std::thread> threads;
  for (auto& client : clients) {
    threads.emplace_back([&, c = client.get()] {
      while (!done.load()) {
        auto before = std::chrono::steady_clock::now();
        auto d = c->Next(std::chrono::seconds(60));
        double w = SecondsSince(before);
        if (!d.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          failure = d.status();
          return;
        }
        if (d->kind == Delivery::Kind::kEndOfJob) {
          std::lock_guard<std::mutex> lock(mu);
          failure = FailedPreconditionError("the job ended before the measurement did: give it more epochs");
          return;
        }
        if (d->kind != Delivery::Kind::kBatch || !timing.load()) continue;
        std::lock_guard<std::mutex> lock(mu);
        bytes += d->batch.pixel_bytes();
        images += d->batch.size();
        ++batches;
        waited += w;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(warmup));  // let workers start and pipelines fill
  auto start = std::chrono::steady_clock::now();
  timing.store(true);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));  // the measured interval
  timing.store(false);
  double elapsed = SecondsSince(start);
  done.store(true);
  for (auto& t : threads) t.join();
  if (!failure.ok()) return failure;
  Rate r;
  r.bytes_per_second = bytes / elapsed;
  r.batches_per_second = batches / elapsed;
  r.images_per_second = images / elapsed;
  r.wait_fraction = waited / (elapsed * spec.world_size);
  return r;
}

}  // namespace stoker::bench
