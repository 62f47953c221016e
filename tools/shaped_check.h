// The checker for logs that span shape changes (a job resumed from a checkpoint on other ranks or another batch
// size): each batch is judged against the plan of the shape its log line was written under (delivery_log.h's S
// lines), and every epoch in the positions of its order, which mean the same under every shape.
//
// Per epoch: every position of the order before the epoch's delivered end is consumed exactly once, with the
// sample its plan puts there (lost, duplicated, corrupt otherwise); positions past that end are the epoch's
// remainder (kDrop: fewer than one global batch of the last shape, not delivered); padding is flagged. Balanced
// means: within each shape, every rank consumed the same number of batches of the epoch.
//
// Thread safety: none; one thread records, then checks.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dataset/plan.h"
#include "tools/delivery_check.h"
#include "tools/delivery_log.h"

namespace stoker::tools {

struct ShapedVerdict {
  EpochVerdict counts;        // planned_real: positions before the delivered end; batches_per_rank: unused
  uint64_t remainder = 0;     // positions past the delivered end (kDrop), not delivered by design
  bool balanced = true;       // within each shape, equal batches per rank
  std::string shapes;         // "4x4 [3 3 3 3], 3x6@0+96 [2 2 2]": batches per rank of each shape

  bool ok() const { return counts.ok() && balanced; }
  std::string Describe() const;
};

class ShapedChecker {
 public:
  // `spec`: the job as it started (dataset, seed, order, pipeline, epochs); each batch's shape comes from its log.
  ShapedChecker(const JobSpec& spec, uint64_t num_samples);

  // InvalidArgument for a shape the job cannot have (no plan).
  Status Record(const LoggedBatch& batch);
  ShapedVerdict Check(uint32_t epoch) const;

 private:
  struct EpochLog {
    std::vector<uint32_t> consumed;  // per position of the order below num_samples
    uint64_t padding = 0, quarantined = 0, unexpected = 0, corrupt = 0;
    std::map<LoggedShape, std::vector<uint64_t>> batches;  // shape -> batches per rank
    std::vector<SamplePosition> examples;
  };
  StatusOr<const Plan*> PlanFor(const LoggedShape& shape);
  EpochLog& LogFor(uint32_t epoch);

  JobSpec spec_;
  uint64_t num_samples_;
  std::map<LoggedShape, Plan> plans_;
  std::map<uint32_t, EpochLog> epochs_;
};

}  // namespace stoker::tools
