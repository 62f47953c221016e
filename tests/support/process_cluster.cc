#include "tests/support/process_cluster.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace stoker::testing {

std::string BinaryDirectory() {
  const char* dir = std::getenv("STOKER_BIN_DIR");
  return dir != nullptr ? dir : ExecutableDirectory();
}

std::vector<std::string> JobFlags(const JobSpec& spec) {
  return {"--job", spec.name, "--manifest", spec.manifest_path, "--batch-size", std::to_string(spec.batch_size),
          "--ranks", std::to_string(spec.world_size), "--epochs", std::to_string(spec.epochs), "--seed",
          std::to_string(spec.seed), "--remainder", RemainderName(spec.remainder), "--batches-per-unit",
          std::to_string(spec.batches_per_unit), "--pipeline", PipelineModeName(spec.pipeline.mode),
          "--image-height", std::to_string(spec.pipeline.output_height), "--image-width",
          std::to_string(spec.pipeline.output_width), spec.shuffle ? "--shuffle" : "--no-shuffle"};
}

ProcessCluster::ProcessCluster(std::string directory) : dir_(std::move(directory)), bin_(BinaryDirectory()) {}

std::string ProcessCluster::LogPath(const std::string& process) const { return dir_ + "/" + process + ".log"; }

std::string ProcessCluster::ReadLog(const std::string& process) const {
  std::ifstream in(LogPath(process));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Status ProcessCluster::StartCoordinator(const std::vector<std::string>& extra_flags) {
  std::string endpoint_file = dir_ + "/coordinator.endpoint";
  std::remove(endpoint_file.c_str());
  std::vector<std::string> argv = {bin_ + "/stoker-coordinator", "--listen", "tcp://127.0.0.1:0", "--endpoint-file",
                                   endpoint_file};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  STOKER_ASSIGN_OR_RETURN(coordinator_, Subprocess::Start(argv, LogPath("coordinator")));
  auto endpoint = WaitForFile(endpoint_file, std::chrono::seconds(20), &coordinator_);
  if (!endpoint.ok()) return endpoint.status().WithContext(ReadLog("coordinator"));
  coordinator_endpoint_ = *endpoint;
  return Status::Ok();
}

StatusOr<size_t> ProcessCluster::StartWorker(uint32_t threads, const std::vector<std::string>& extra_flags) {
  size_t index = workers_.size();
  std::string name = "worker-" + std::to_string(index);
  std::string endpoint_file = dir_ + "/" + name + ".endpoint";
  std::vector<std::string> argv = {bin_ + "/stoker-worker", "--coordinator", coordinator_endpoint_, "--listen",
                                   "tcp://127.0.0.1:0", "--threads", std::to_string(threads), "--endpoint-file",
                                   endpoint_file};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  STOKER_ASSIGN_OR_RETURN(Subprocess p, Subprocess::Start(argv, LogPath(name)));
  workers_.push_back(std::move(p));
  auto endpoint = WaitForFile(endpoint_file, std::chrono::seconds(20), &workers_.back());
  if (!endpoint.ok()) return endpoint.status().WithContext(ReadLog(name));
  worker_endpoints_.push_back(*endpoint);
  return index;
}

StatusOr<size_t> ProcessCluster::StartConsumer(const std::string& name, const JobSpec& spec, uint32_t rank,
                                               const std::vector<std::string>& extra_flags) {
  std::vector<std::string> argv = {bin_ + "/stoker", "consume", "--coordinator", coordinator_endpoint_, "--rank",
                                   std::to_string(rank), "--log", dir_ + "/consumer-" + name + ".log",
                                   "--summary-json", dir_ + "/consumer-" + name + ".json", "--stall-timeout", "60s"};
  std::vector<std::string> job = JobFlags(spec);
  argv.insert(argv.end(), job.begin(), job.end());
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  STOKER_ASSIGN_OR_RETURN(Subprocess p, Subprocess::Start(argv, LogPath("consumer-" + name + ".stderr")));
  consumers_.push_back({name, std::move(p)});
  return consumers_.size() - 1;
}

std::string ProcessCluster::ConsumerLog(size_t i) const { return dir_ + "/consumer-" + consumers_[i].name + ".log"; }
std::string ProcessCluster::ConsumerSummary(size_t i) const {
  return dir_ + "/consumer-" + consumers_[i].name + ".json";
}

StatusOr<std::vector<int>> ProcessCluster::WaitForConsumers(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> codes;
  for (auto& c : consumers_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    auto code = c.process.Wait(std::max(left, std::chrono::milliseconds(0)));
    if (!code) {
      return DeadlineExceededError("consumer " + c.name + " still running after " +
                                   std::to_string(timeout.count()) + " ms:\n" + ReadLog("consumer-" + c.name + ".stderr"));
    }
    codes.push_back(*code);
  }
  return codes;
}

}  // namespace stoker::testing
