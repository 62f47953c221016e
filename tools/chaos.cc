// Chaos (chaos.h): the fault schedule, and each fault done to the local cluster's processes and proxies.
#include "tools/chaos.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "tools/socket_io.h"

namespace stoker::tools {
Chaos::Chaos(LocalCluster& cluster, const ChaosOptions& options)
    : cluster_(cluster), options_(options), rng_(options.seed) {
  Schedule();
}

void Chaos::Schedule() {
  std::uniform_int_distribution<int64_t> gap(options_.min_interval.count(), options_.max_interval.count());
  next_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(gap(rng_));
}

StatusOr<size_t> Chaos::StartWorker() {
  Proxies p;
  STOKER_ASSIGN_OR_RETURN(uint16_t port, FreeLoopbackPort());
  std::string listen = "tcp://127.0.0.1:" + std::to_string(port);
  STOKER_ASSIGN_OR_RETURN(p.data, TcpProxy::Start(listen));
  STOKER_ASSIGN_OR_RETURN(p.control, TcpProxy::Start(cluster_.coordinator_endpoint()));
  STOKER_ASSIGN_OR_RETURN(size_t index,
                          cluster_.StartWorker(options_.worker_threads,
                                               {"--listen", listen, "--advertise", p.data->endpoint()},
                                               p.control->endpoint()));
  proxies_[index] = std::move(p);
  return index;
}

std::vector<size_t> Chaos::Running() {
  std::vector<size_t> running;
  for (size_t i : cluster_.RunningWorkers()) {
    if (proxies_.count(i) != 0 && stopped_.count(i) == 0) running.push_back(i);
  }
  return running;
}

StatusOr<std::vector<std::string>> Chaos::Step() {
  std::vector<std::string> did;
  auto now = std::chrono::steady_clock::now();
  // Finish what has run its course.
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->at > now) {
      ++it;
      continue;
    }
    if (it->what == "cont") {
      cluster_.worker(it->worker).Signal(SIGCONT);
      stopped_.erase(it->worker);
    } else if (it->what == "heal-control" && proxies_.count(it->worker)) {
      proxies_[it->worker].control->Heal();
    } else if (it->what == "heal-data" && proxies_.count(it->worker)) {
      proxies_[it->worker].data->Heal();
    }
    did.push_back(it->what + " worker " + std::to_string(it->worker));
    it = pending_.erase(it);
  }
  if (now < next_) return did;
  Schedule();
  std::vector<size_t> running = Running();
  if (running.empty()) return did;
  size_t victim = running[std::uniform_int_distribution<size_t>(0, running.size() - 1)(rng_)];
  if (deck_.empty()) {
    deck_ = {"kill_worker", "term_worker", "stop_worker"};
    if (options_.coordinator_restarts) deck_.push_back("restart_coordinator");
    if (options_.network_faults) {
      deck_.push_back("partition_control");
      deck_.push_back("partition_data");
      deck_.push_back("reset_data");
    }
    std::shuffle(deck_.begin(), deck_.end(), rng_);
  }
  std::string kind = deck_.back();
  deck_.pop_back();
  auto outlast = now + options_.lease_ttl * 2 + std::chrono::milliseconds(500);
  if (kind == "kill_worker" || kind == "term_worker") {
    cluster_.worker(victim).Signal(kind == "kill_worker" ? SIGKILL : SIGTERM);
    STOKER_ASSIGN_OR_RETURN(size_t replacement, StartWorker());
    did.push_back(std::string(kind == "kill_worker" ? "kill -9" : "SIGTERM") + " worker " + std::to_string(victim) +
                  ", started worker " + std::to_string(replacement));
  } else if (kind == "stop_worker") {
    cluster_.worker(victim).Signal(SIGSTOP);
    stopped_.insert(victim);
    pending_.push_back({outlast, "cont", victim});
    did.push_back("SIGSTOP worker " + std::to_string(victim));
  } else if (kind == "restart_coordinator") {
    STOKER_RETURN_IF_ERROR(cluster_.RestartCoordinator());
    did.push_back("kill -9 and restart the coordinator");
  } else if (kind == "partition_control") {
    proxies_[victim].control->Blackhole();
    pending_.push_back({outlast, "heal-control", victim});
    did.push_back("cut worker " + std::to_string(victim) + " off from the coordinator");
  } else if (kind == "partition_data") {
    proxies_[victim].data->Blackhole();
    pending_.push_back({outlast, "heal-data", victim});
    did.push_back("cut worker " + std::to_string(victim) + " off from its clients");
  } else if (kind == "reset_data") {
    proxies_[victim].data->ResetAll();
    did.push_back("reset worker " + std::to_string(victim) + "'s client connections");
  }
  ++counts_[kind];
  return did;
}

void Chaos::Calm() {
  for (const Pending& p : pending_) {
    if (p.what == "cont") cluster_.worker(p.worker).Signal(SIGCONT);
    if (p.what == "heal-control" && proxies_.count(p.worker)) proxies_[p.worker].control->Heal();
    if (p.what == "heal-data" && proxies_.count(p.worker)) proxies_[p.worker].data->Heal();
  }
  pending_.clear();
  stopped_.clear();
}

}  // namespace stoker::tools
