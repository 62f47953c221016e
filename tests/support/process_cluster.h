// ProcessCluster: the real binaries as separate processes on loopback, for integration and fault tests — a
// stoker-coordinator, any number of stoker-worker processes and `stoker consume` clients, each logging to a file
// in the test's directory. Ports are ephemeral (each process writes the endpoint it bound to a file), so tests
// run in parallel. Everything still running is killed when the cluster is destroyed.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "tools/subprocess.h"

namespace stoker::testing {

// Where the binaries are: $STOKER_BIN_DIR (set by CTest), else the test executable's own directory.
std::string BinaryDirectory();

// `stoker consume` flags for a job spec.
std::vector<std::string> JobFlags(const JobSpec& spec);

class ProcessCluster {
 public:
  explicit ProcessCluster(std::string directory);

  Status StartCoordinator(const std::vector<std::string>& extra_flags = {});
  // Starts a worker and waits until it has bound its data endpoint. Returns its index.
  StatusOr<size_t> StartWorker(uint32_t threads = 1, const std::vector<std::string>& extra_flags = {});
  // Starts `stoker consume` for one rank, logging batches to consumer-<name>.log and a summary to
  // consumer-<name>.json.
  StatusOr<size_t> StartConsumer(const std::string& name, const JobSpec& spec, uint32_t rank,
                                 const std::vector<std::string>& extra_flags = {});

  Subprocess& worker(size_t i) { return workers_[i]; }
  Subprocess& consumer(size_t i) { return consumers_[i].process; }
  Subprocess& coordinator() { return coordinator_; }
  const std::string& coordinator_endpoint() const { return coordinator_endpoint_; }
  const std::string& worker_endpoint(size_t i) const { return worker_endpoints_[i]; }
  std::string ConsumerLog(size_t i) const;
  std::string ConsumerSummary(size_t i) const;
  std::string LogPath(const std::string& process) const;
  // The log file's text (for failure messages and for asserting what a process said).
  std::string ReadLog(const std::string& process) const;

  // Waits for every consumer to exit; returns their exit codes. Fails on timeout.
  StatusOr<std::vector<int>> WaitForConsumers(std::chrono::milliseconds timeout);

 private:
  struct Consumer {
    std::string name;
    Subprocess process;
  };
  std::string dir_;
  std::string bin_;
  Subprocess coordinator_;
  std::string coordinator_endpoint_;
  std::vector<Subprocess> workers_;
  std::vector<std::string> worker_endpoints_;
  std::vector<Consumer> consumers_;
};

}  // namespace stoker::testing
