// The checker as the tests use it: read every consumer's delivery log, judge each epoch against the plan with
// the DeliveryChecker (tools/delivery_check.h), and collect per-batch pixel hashes to compare runs.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "tools/delivery_check.h"
#include "stoker/job_spec.h"
#include "stoker/status.h"
#include "tools/delivery_log.h"
#include "tools/local_cluster.h"

namespace stoker::testing {

struct RunVerdict {
  std::vector<tools::EpochVerdict> epochs;
  uint64_t steps_per_epoch = 0;
  // (epoch, rank, index) -> xxh64 of the batch's pixels, as delivered (the first delivery if duplicated).
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, uint64_t> pixel_hashes;
  std::vector<tools::LoggedBatch> batches;

  // Every epoch exact and balanced; otherwise a description of what went wrong.
  bool ok() const;
  std::string Describe() const;
};

StatusOr<RunVerdict> CheckLogs(const JobSpec& spec, uint64_t num_samples, const std::vector<std::string>& logs);
// The same over batches already read (e.g. logs cut at a checkpoint).
StatusOr<RunVerdict> CheckBatches(const JobSpec& spec, uint64_t num_samples, std::vector<tools::LoggedBatch> batches);
StatusOr<std::vector<tools::LoggedBatch>> ReadLogs(const std::vector<std::string>& logs);

// Starts one `stoker consume` per rank of `spec` (named TAG-RANK), waits up to `timeout` for every one to exit,
// and judges their logs. An error (naming the consumer and its output) when one does not exit 0 in time.
StatusOr<RunVerdict> RunJobToEnd(tools::LocalCluster& cluster, const JobSpec& spec, uint64_t num_samples,
                                 const std::string& tag, std::chrono::milliseconds timeout);

}  // namespace stoker::testing
