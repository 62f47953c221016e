// The checker over delivery logs (checker.h): what the integration tests judge a run with.
#include "tests/support/checker.h"

namespace stoker::testing {

bool RunVerdict::ok() const {
  for (const auto& v : epochs) {
    if (!v.ok() || !v.balanced(steps_per_epoch)) return false;
  }
  return !epochs.empty();
}

std::string RunVerdict::Describe() const {
  std::string out;
  for (const auto& v : epochs) out += v.Describe() + "\n";
  return out;
}

StatusOr<std::vector<tools::LoggedBatch>> ReadLogs(const std::vector<std::string>& logs) {
  PosixEnv env;
  std::vector<tools::LoggedBatch> all;
  for (const auto& path : logs) {
    STOKER_ASSIGN_OR_RETURN(auto entries, tools::ReadDeliveryLog(env, path));
    for (auto& e : entries) all.push_back(std::move(e));
  }
  return all;
}

StatusOr<RunVerdict> CheckBatches(const JobSpec& spec, uint64_t num_samples, std::vector<tools::LoggedBatch> batches) {
  STOKER_ASSIGN_OR_RETURN(Plan plan, Plan::Make(spec, num_samples));
  tools::DeliveryChecker checker(plan);
  RunVerdict verdict;
  verdict.steps_per_epoch = plan.steps_per_epoch();
  for (auto& e : batches) {
    checker.Record(e.batch);
    verdict.pixel_hashes.emplace(std::make_tuple(e.batch.epoch, e.batch.rank, e.batch.index), e.pixel_hash);
    verdict.batches.push_back(std::move(e));
  }
  for (uint32_t epoch = 0; epoch < plan.epochs(); ++epoch) verdict.epochs.push_back(checker.Check(epoch));
  return verdict;
}

StatusOr<RunVerdict> CheckLogs(const JobSpec& spec, uint64_t num_samples, const std::vector<std::string>& logs) {
  STOKER_ASSIGN_OR_RETURN(auto batches, ReadLogs(logs));
  return CheckBatches(spec, num_samples, std::move(batches));
}

StatusOr<RunVerdict> RunJobToEnd(tools::LocalCluster& cluster, const JobSpec& spec, uint64_t num_samples,
                                 const std::string& tag, std::chrono::milliseconds timeout) {
  std::vector<size_t> consumers;
  for (uint32_t r = 0; r < spec.world_size; ++r) {
    STOKER_ASSIGN_OR_RETURN(size_t c, cluster.StartConsumer(tag + "-" + std::to_string(r), spec, r));
    consumers.push_back(c);
  }
  STOKER_RETURN_IF_ERROR(cluster.WaitForConsumers(timeout).status());
  std::vector<std::string> logs;
  for (uint32_t r = 0; r < consumers.size(); ++r) {
    if (cluster.consumer(consumers[r]).Wait(std::chrono::milliseconds(0)) != 0) {
      return InternalError("consumer " + tag + "-" + std::to_string(r) + " failed: " +
                           cluster.ReadLog("consumer-" + tag + "-" + std::to_string(r) + ".stderr"));
    }
    logs.push_back(cluster.ConsumerLog(consumers[r]));
  }
  return CheckLogs(spec, num_samples, logs);
}

}  // namespace stoker::testing
