// LocalCluster: stoker's real binaries as separate processes on loopback — a stoker-coordinator (with a journal,
// restartable on the same port), any number of stoker-worker processes and `stoker consume` clients — each
// logging to a file in one directory. Used by the demo (and its --chaos), `stoker soak`, the integration and
// fault tests, and the end-to-end benchmarks. Ports are ephemeral at first (each process publishes the endpoint
// it bound in a file), so several clusters run side by side. Everything still running is killed (SIGKILL) when
// the cluster is destroyed. Every process serves its metrics on an ephemeral loopback port too (published the
// same way), so tests and the demo can scrape them. CURVE is on: the cluster makes a keyring in dir/keys (a key for
// the coordinator, the workers and the clients, and their trust file) and gives each process its key.
//
// Thread safety: none; one owner.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "stoker/job_spec.h"
#include "stoker/status.h"
#include "stoker/client.h"
#include "tools/keyring.h"
#include "base/subprocess.h"

namespace stoker::tools {

// `stoker consume` flags for a job spec.
std::vector<std::string> JobFlags(const JobSpec& spec);

struct LocalClusterOptions {
  std::string dir;                        // logs, endpoint files, the journal
  std::string bin_dir;                    // where stoker, stoker-coordinator, stoker-worker are (default: beside us)
  bool journal = true;                    // the coordinator keeps dir/coordinator.journal
  std::vector<std::string> coordinator_flags;
  std::vector<std::string> coordinator_prefix;  // run the coordinator under this, e.g. {"taskset", "-c", "0"}
  bool insecure = false;                  // CURVE off everywhere (--insecure): measuring what CURVE costs
  std::vector<std::string> peer_prefix;   // run workers and consumers under this (e.g. a private /etc/hosts)
  // Peers are told tcp://<coordinator_name>:<port> instead of the address the coordinator bound (a DNS name that
  // can move, as a Service's does); empty: the bound address.
  std::string coordinator_name;
};

class LocalCluster {
 public:
  explicit LocalCluster(LocalClusterOptions options);

  // Starts the coordinator; the first time on an ephemeral port, every later time on that same port.
  Status StartCoordinator(const std::vector<std::string>& extra_flags = {});
  // kill -9 the coordinator (if it runs) and start it again on the same port and journal.
  Status RestartCoordinator(const std::vector<std::string>& extra_flags = {});
  // kill -9 the coordinator and start it again on the same port and journal, listening on `host` instead (a pod
  // rescheduled to another address).
  Status MoveCoordinator(const std::string& host);
  // What peers are told to connect to: the bound endpoint, or the coordinator_name with its port.
  std::string PeerCoordinatorEndpoint() const;
  Subprocess& coordinator() { return coordinator_; }
  const std::string& coordinator_endpoint() const { return coordinator_endpoint_; }
  // host:port of its /metrics, /healthz, /readyz, /state (the same across restarts).
  const std::string& coordinator_metrics() const { return coordinator_metrics_; }

  // Starts a worker and waits until it has bound its data endpoint. `coordinator` overrides the endpoint it is
  // given (e.g. a proxy in front of the coordinator). Returns its index.
  StatusOr<size_t> StartWorker(uint32_t threads = 1, const std::vector<std::string>& extra_flags = {},
                               const std::string& coordinator = "");
  Subprocess& worker(size_t i) { return workers_[i].process; }
  size_t worker_count() const { return workers_.size(); }
  const std::string& worker_endpoint(size_t i) const { return workers_[i].endpoint; }
  const std::string& worker_metrics(size_t i) const { return workers_[i].metrics; }
  // Workers still running.
  std::vector<size_t> RunningWorkers();

  // Starts `stoker consume` for one rank, logging batches to consumer-<name>.log, a summary to
  // consumer-<name>.json and its output to consumer-<name>.stderr.log.
  StatusOr<size_t> StartConsumer(const std::string& name, const JobSpec& spec, uint32_t rank,
                                 const std::vector<std::string>& extra_flags = {});
  Subprocess& consumer(size_t i) { return consumers_[i].process; }
  std::string ConsumerLog(size_t i) const;
  std::string ConsumerSummary(size_t i) const;
  std::string ConsumerOutput(size_t i) const { return ReadLog("consumer-" + consumers_[i].name + ".stderr"); }
  // Its metrics address, once it has connected (the file appears then); empty before.
  std::string ConsumerMetrics(size_t i) const;
  // Waits for every consumer to exit; returns their exit codes. DeadlineExceeded names the one still running.
  StatusOr<std::vector<int>> WaitForConsumers(std::chrono::milliseconds timeout);

  // The cluster's keys (made when the coordinator first starts), and the flags a process of `role` needs for them.
  const Keyring& keyring() const { return keyring_; }
  std::vector<std::string> SecurityFlags(Role role) const;
  // Sets a client's CURVE options to the cluster's client key (or insecure).
  void Secure(ClientOptions& options) const;

  const std::string& dir() const { return options_.dir; }
  std::string LogPath(const std::string& process) const;
  std::string ReadLog(const std::string& process) const;
  std::string bin(const std::string& program) const { return options_.bin_dir + "/" + program; }

 private:
  struct Worker {
    Subprocess process;
    std::string endpoint;
    std::string metrics;
  };
  struct Consumer {
    std::string name;
    Subprocess process;
  };
  LocalClusterOptions options_;
  Keyring keyring_;
  Subprocess coordinator_;
  std::string coordinator_endpoint_;
  std::string coordinator_metrics_;
  std::vector<Worker> workers_;
  std::vector<Consumer> consumers_;
};

// Batch lines of a delivery log (tools/delivery_log.h), its shape lines not counted.
size_t CountLines(const std::string& path);
// Waits until the delivery log `path` has at least `lines` batch lines; DeadlineExceeded after `timeout`, or as soon as `process` exits.
Status WaitForLines(const std::string& path, size_t lines, std::chrono::milliseconds timeout,
                    Subprocess* process = nullptr);

}  // namespace stoker::tools
