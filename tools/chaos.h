// Chaos: injects faults into a LocalCluster at random moments — the faults of RELIABILITY.md's soak (item 22):
// kill -9 a worker, SIGTERM a worker, kill -9 and restart the coordinator, SIGSTOP a worker past its lease and
// SIGCONT it, cut a worker off from the coordinator or from its clients (black-holed TCP), reset a worker's
// connections. Workers started through Chaos sit behind two TcpProxy each (control and data) so the network
// faults have somewhere to happen. Every fault is undone or compensated (a replacement worker, a heal, a SIGCONT)
// so the cluster keeps its size. Used by `stoker demo --chaos` and `stoker soak`.
//
// Thread safety: none; drive it from one thread by calling Step() often (every ~100 ms).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "stoker/status.h"
#include "tools/local_cluster.h"
#include "tools/tcp_proxy.h"

namespace stoker::tools {

struct ChaosOptions {
  std::chrono::milliseconds min_interval{1500};  // between two faults
  std::chrono::milliseconds max_interval{4000};
  std::chrono::milliseconds lease_ttl{1500};     // the coordinator's: stops and partitions outlast it
  uint32_t worker_threads = 1;
  bool coordinator_restarts = true;
  bool network_faults = true;                    // partitions and resets (needs the proxies)
  uint64_t seed = 1;
};

class Chaos {
 public:
  Chaos(LocalCluster& cluster, const ChaosOptions& options);

  // Starts a worker behind its own control and data proxies.
  StatusOr<size_t> StartWorker();
  // Injects the next fault if its time has come, finishes faults that have run their course. Returns what it did
  // (empty if nothing), for the caller's log. Kinds are drawn like cards from a shuffled deck, so every kind
  // happens once in each round of as many faults as there are kinds (a short demo sees all of them).
  StatusOr<std::vector<std::string>> Step();
  // Heals everything (partitions, stopped workers): call before judging a run.
  void Calm();

  const std::map<std::string, uint64_t>& counts() const { return counts_; }

 private:
  struct Proxies {
    std::unique_ptr<TcpProxy> control;
    std::unique_ptr<TcpProxy> data;
  };
  struct Pending {
    std::chrono::steady_clock::time_point at;
    std::string what;  // "cont", "heal-control", "heal-data"
    size_t worker;
  };
  std::vector<size_t> Running();
  void Schedule();

  LocalCluster& cluster_;
  ChaosOptions options_;
  std::mt19937_64 rng_;
  std::map<size_t, Proxies> proxies_;  // worker index -> its proxies
  std::vector<Pending> pending_;
  std::set<size_t> stopped_;
  std::chrono::steady_clock::time_point next_;
  std::vector<std::string> deck_;  // kinds not yet drawn in this round
  std::map<std::string, uint64_t> counts_;
};

}  // namespace stoker::tools
