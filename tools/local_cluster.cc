// LocalCluster (local_cluster.h): the coordinator, workers and consumers as processes on loopback.
#include "tools/local_cluster.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace stoker::tools {

std::vector<std::string> JobFlags(const JobSpec& spec) {
  std::vector<std::string> flags = {
      "--job", spec.name, "--manifest", spec.manifest_path, "--batch-size", std::to_string(spec.batch_size),
      "--ranks", std::to_string(spec.world_size), "--epochs", std::to_string(spec.epochs), "--seed",
      std::to_string(spec.seed), "--remainder", RemainderName(spec.remainder), "--batches-per-unit",
      std::to_string(spec.batches_per_unit), "--pipeline", PipelineModeName(spec.pipeline.mode), "--image-height",
      std::to_string(spec.pipeline.output_height), "--image-width", std::to_string(spec.pipeline.output_width),
      spec.shuffle ? "--shuffle" : "--no-shuffle"};
  if (spec.pipeline.DecodesOnGpu()) flags.insert(flags.end(), {"--gpu-decode", GpuDecodeName(spec.pipeline.gpu_decode)});
  return flags;
}

namespace {
// Whole batch lines of a delivery log (not its shape lines, nor a line still being written).
size_t BatchLines(const std::string& text) {
  size_t n = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    if (end == std::string::npos) break;
    n += text.compare(at, 2, "B ") == 0;
    at = end + 1;
  }
  return n;
}
}  // namespace

size_t CountLines(const std::string& path) {
  std::ifstream in(path);
  return BatchLines(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
}

Status WaitForLines(const std::string& path, size_t lines, std::chrono::milliseconds timeout, Subprocess* process) {
  return WaitForFileContent(path, [lines](const std::string& c) { return BatchLines(c) >= lines; }, timeout, process)
      .status();
}

LocalCluster::LocalCluster(LocalClusterOptions options) : options_(std::move(options)) {
  if (options_.bin_dir.empty()) options_.bin_dir = ExecutableDirectory();
}

std::string LocalCluster::LogPath(const std::string& process) const { return options_.dir + "/" + process + ".log"; }

std::string LocalCluster::ReadLog(const std::string& process) const {
  std::ifstream in(LogPath(process));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> LocalCluster::SecurityFlags(Role role) const {
  if (options_.insecure) return {"--insecure"};
  return keyring_.Flags(role);
}

void LocalCluster::Secure(ClientOptions& options) const {
  options.insecure = options_.insecure;
  options.key_file = options_.insecure ? "" : keyring_.client_key;
  options.trust_file = options_.insecure ? "" : keyring_.trust;
}

Status LocalCluster::StartCoordinator(const std::vector<std::string>& extra_flags) {
  if (!options_.insecure && keyring_.dir.empty()) {
    STOKER_ASSIGN_OR_RETURN(keyring_, MakeKeyring(options_.dir + "/keys"));
  }
  std::string endpoint_file = options_.dir + "/coordinator.endpoint";
  std::remove(endpoint_file.c_str());
  std::string metrics_file = options_.dir + "/coordinator.metrics";
  std::remove(metrics_file.c_str());
  std::string listen = coordinator_endpoint_.empty() ? "tcp://127.0.0.1:0" : coordinator_endpoint_;
  std::string metrics_listen = coordinator_metrics_.empty() ? "127.0.0.1:0" : coordinator_metrics_;
  std::vector<std::string> argv = options_.coordinator_prefix;
  for (const std::string& a : {bin("stoker-coordinator"), std::string("--listen"), listen,
                               std::string("--endpoint-file"), endpoint_file, std::string("--metrics-listen"),
                               metrics_listen, std::string("--metrics-address-file"), metrics_file}) {
    argv.push_back(a);
  }
  if (options_.journal) {
    argv.push_back("--journal");
    argv.push_back(options_.dir + "/coordinator.journal");
  }
  const std::vector<std::string> security = SecurityFlags(Role::kCoordinator);
  argv.insert(argv.end(), security.begin(), security.end());
  argv.insert(argv.end(), options_.coordinator_flags.begin(), options_.coordinator_flags.end());
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  STOKER_ASSIGN_OR_RETURN(coordinator_, Subprocess::Start(argv, LogPath("coordinator")));
  auto endpoint = WaitForFile(endpoint_file, std::chrono::seconds(20), &coordinator_);
  if (!endpoint.ok()) return endpoint.status().WithContext(ReadLog("coordinator"));
  coordinator_endpoint_ = *endpoint;
  // The admin endpoint starts before the journal replays: its file may come first or after; either way, soon.
  auto metrics = WaitForFile(metrics_file, std::chrono::seconds(20), &coordinator_);
  if (!metrics.ok()) return metrics.status().WithContext(ReadLog("coordinator"));
  coordinator_metrics_ = *metrics;
  return Status::Ok();
}

Status LocalCluster::RestartCoordinator(const std::vector<std::string>& extra_flags) {
  coordinator_.Kill();
  return StartCoordinator(extra_flags);
}

Status LocalCluster::MoveCoordinator(const std::string& host) {
  const size_t colon = coordinator_endpoint_.rfind(':');
  if (colon == std::string::npos) return FailedPreconditionError("the coordinator has not started yet");
  coordinator_.Kill();
  coordinator_endpoint_ = "tcp://" + host + coordinator_endpoint_.substr(colon);
  return StartCoordinator();
}

std::string LocalCluster::PeerCoordinatorEndpoint() const {
  if (options_.coordinator_name.empty()) return coordinator_endpoint_;
  return "tcp://" + options_.coordinator_name + coordinator_endpoint_.substr(coordinator_endpoint_.rfind(':'));
}

StatusOr<size_t> LocalCluster::StartWorker(uint32_t threads, const std::vector<std::string>& extra_flags,
                                           const std::string& coordinator) {
  size_t index = workers_.size();
  std::string name = "worker-" + std::to_string(index);
  std::string endpoint_file = options_.dir + "/" + name + ".endpoint";
  std::vector<std::string> argv = options_.peer_prefix;
  for (const std::string& a : {bin("stoker-worker"), std::string("--coordinator"),
                               coordinator.empty() ? PeerCoordinatorEndpoint() : coordinator}) {
    argv.push_back(a);
  }
  for (const std::string& a :
       {std::string("--listen"), std::string("tcp://127.0.0.1:0"), std::string("--threads"), std::to_string(threads),
        std::string("--endpoint-file"), endpoint_file, std::string("--metrics-listen"), std::string("127.0.0.1:0"),
        std::string("--metrics-address-file"), options_.dir + "/" + name + ".metrics"}) {
    argv.push_back(a);
  }
  const std::vector<std::string> security = SecurityFlags(Role::kWorker);
  argv.insert(argv.end(), security.begin(), security.end());
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  // A directory reused from an earlier run still has that run's files: never read a dead process's address.
  std::remove(endpoint_file.c_str());
  std::remove((options_.dir + "/" + name + ".metrics").c_str());
  STOKER_ASSIGN_OR_RETURN(Subprocess p, Subprocess::Start(argv, LogPath(name)));
  workers_.push_back({std::move(p), ""});
  auto endpoint = WaitForFile(endpoint_file, std::chrono::seconds(20), &workers_.back().process);
  if (!endpoint.ok()) return endpoint.status().WithContext(ReadLog(name));
  workers_.back().endpoint = *endpoint;
  auto metrics = WaitForFile(options_.dir + "/" + name + ".metrics", std::chrono::seconds(20), &workers_.back().process);
  if (!metrics.ok()) return metrics.status().WithContext(ReadLog(name));
  workers_.back().metrics = *metrics;
  return index;
}

std::vector<size_t> LocalCluster::RunningWorkers() {
  std::vector<size_t> running;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i].process.running()) running.push_back(i);
  }
  return running;
}

StatusOr<size_t> LocalCluster::StartConsumer(const std::string& name, const JobSpec& spec, uint32_t rank,
                                             const std::vector<std::string>& extra_flags) {
  std::remove((options_.dir + "/consumer-" + name + ".metrics").c_str());
  std::vector<std::string> argv = options_.peer_prefix;
  for (const std::string& a :
       {bin("stoker"), std::string("consume"), std::string("--coordinator"), PeerCoordinatorEndpoint(),
        std::string("--rank"), std::to_string(rank), std::string("--log"), options_.dir + "/consumer-" + name + ".log",
        std::string("--summary-json"), options_.dir + "/consumer-" + name + ".json", std::string("--stall-timeout"),
        std::string("60s"), std::string("--metrics-listen"), std::string("127.0.0.1:0"),
        std::string("--metrics-address-file"), options_.dir + "/consumer-" + name + ".metrics"}) {
    argv.push_back(a);
  }
  std::vector<std::string> job = JobFlags(spec);
  argv.insert(argv.end(), job.begin(), job.end());
  const std::vector<std::string> security = SecurityFlags(Role::kClient);
  argv.insert(argv.end(), security.begin(), security.end());
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  STOKER_ASSIGN_OR_RETURN(Subprocess p, Subprocess::Start(argv, LogPath("consumer-" + name + ".stderr")));
  consumers_.push_back({name, std::move(p)});
  return consumers_.size() - 1;
}

std::string LocalCluster::ConsumerLog(size_t i) const {
  return options_.dir + "/consumer-" + consumers_[i].name + ".log";
}
std::string LocalCluster::ConsumerMetrics(size_t i) const {
  std::ifstream in(options_.dir + "/consumer-" + consumers_[i].name + ".metrics");
  std::string address;
  std::getline(in, address);
  return address;
}
std::string LocalCluster::ConsumerSummary(size_t i) const {
  return options_.dir + "/consumer-" + consumers_[i].name + ".json";
}

StatusOr<std::vector<int>> LocalCluster::WaitForConsumers(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> codes;
  for (auto& c : consumers_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    auto code = c.process.Wait(std::max(left, std::chrono::milliseconds(0)));
    if (!code) {
      return DeadlineExceededError("consumer " + c.name + " still running after " + std::to_string(timeout.count()) +
                                   " ms:\n" + ReadLog("consumer-" + c.name + ".stderr"));
    }
    codes.push_back(*code);
  }
  return codes;
}

}  // namespace stoker::tools
