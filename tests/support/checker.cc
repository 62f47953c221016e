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

StatusOr<std::vector<LoggedBatch>> ReadLogs(const std::vector<std::string>& logs) {
  PosixEnv env;
  std::vector<LoggedBatch> all;
  for (const auto& path : logs) {
    STOKER_ASSIGN_OR_RETURN(auto entries, ReadDeliveryLog(env, path));
    for (auto& e : entries) all.push_back(std::move(e));
  }
  return all;
}

StatusOr<RunVerdict> CheckBatches(const JobSpec& spec, uint64_t num_samples, std::vector<LoggedBatch> batches) {
  STOKER_ASSIGN_OR_RETURN(Plan plan, Plan::Make(spec, num_samples));
  DeliveryChecker checker(plan);
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

}  // namespace stoker::testing
