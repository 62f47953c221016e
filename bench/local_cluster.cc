#include "bench/local_cluster.h"

#include <atomic>
#include <csignal>
#include <mutex>
#include <thread>

#include "stoker/client.h"

namespace stoker::bench {

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

LocalCluster::~LocalCluster() { Stop(); }

Status LocalCluster::StartCoordinator() {
  std::string file = dir_ + "/coordinator.endpoint";
  std::remove(file.c_str());
  STOKER_ASSIGN_OR_RETURN(coordinator_, Subprocess::Start({ExecutableDirectory() + "/stoker-coordinator", "--listen",
                                                           "tcp://127.0.0.1:0", "--endpoint-file", file,
                                                           "--log-level", "warning"},
                                                          dir_ + "/coordinator.log"));
  STOKER_ASSIGN_OR_RETURN(endpoint_, WaitForFile(file, std::chrono::seconds(10), &coordinator_));
  return Status::Ok();
}

Status LocalCluster::StartWorkers(uint32_t count, uint32_t threads, const std::vector<std::string>& extra_flags) {
  for (uint32_t i = 0; i < count; ++i) {
    std::vector<std::string> argv = {ExecutableDirectory() + "/stoker-worker", "--coordinator", endpoint_, "--listen",
                                     "tcp://127.0.0.1:0", "--threads", std::to_string(threads), "--log-level",
                                     "warning"};
    argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
    STOKER_ASSIGN_OR_RETURN(Subprocess w,
                            Subprocess::Start(argv, dir_ + "/worker-" + std::to_string(workers_.size()) + ".log"));
    workers_.push_back(std::move(w));
  }
  return Status::Ok();
}

StatusOr<Rate> LocalCluster::Consume(const JobSpec& spec, uint32_t prefetch, uint32_t credits, double warmup,
                                     double seconds) {
  std::vector<std::unique_ptr<Client>> clients;
  for (uint32_t r = 0; r < spec.world_size; ++r) {
    ClientOptions options;
    options.coordinator = endpoint_;
    options.job = spec.name;
    options.spec = spec;
    options.rank = r;
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

void LocalCluster::Stop() {
  for (auto& w : workers_) w.Signal(SIGTERM);
  for (auto& w : workers_) w.Wait(std::chrono::seconds(10));
  workers_.clear();
  coordinator_.Signal(SIGTERM);
  coordinator_.Wait(std::chrono::seconds(5));
}

}  // namespace stoker::bench
