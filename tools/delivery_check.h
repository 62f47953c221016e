// The checker: compares what ranks actually consumed with the plan, position by position, and reports every
// sample that was lost, duplicated, unexpected or corrupt. It is the proof behind "exactly once per epoch": the
// demo's summary, the integration tests and the chaos tests all judge a run with it.
//
// Definitions, per epoch, over every planned position (rank, batch, slot):
//  - delivered:   consumed once, with the planned sample id and padding flag;
//  - quarantined: consumed once at its position, flagged quarantined (unreadable input, reported by id);
//  - lost:        a planned real (non-padding) position never consumed;
//  - duplicated:  a position consumed more than once (each extra consumption counts);
//  - unexpected:  a consumed batch outside the plan (rank, index or epoch out of range);
//  - corrupt:     a consumed position whose sample id, padding flag or batch size disagrees with the plan.
// Padding positions are accounted separately: they are neither delivered nor lost.
//
// Thread safety: Record and Check may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/json_writer.h"
#include "base/sync.h"
#include "dataset/plan.h"

namespace stoker::tools {

struct ConsumedBatch {
  uint32_t epoch = 0;
  uint32_t rank = 0;
  uint64_t index = 0;
  std::vector<uint64_t> sample_ids;
  std::vector<uint8_t> flags;  // kSampleFlag* bits (common/data_messages.h)
};

struct SamplePosition {
  uint32_t rank = 0;
  uint64_t batch = 0;
  uint32_t slot = 0;
  uint64_t sample_id = 0;
};

// How many problem positions a verdict keeps for its message.
inline constexpr size_t kMaxExamples = 20;

struct EpochVerdict {
  uint32_t epoch = 0;
  uint64_t planned_real = 0;
  uint64_t planned_padding = 0;
  uint64_t delivered = 0;
  uint64_t delivered_padding = 0;
  uint64_t quarantined = 0;
  uint64_t lost = 0;
  uint64_t duplicated = 0;
  uint64_t unexpected = 0;
  uint64_t corrupt = 0;
  std::vector<uint64_t> batches_per_rank;
  std::vector<uint64_t> quarantined_ids;  // sorted, unique
  std::vector<SamplePosition> examples;   // up to kMaxExamples problem positions, for the message

  bool ok() const { return lost == 0 && duplicated == 0 && unexpected == 0 && corrupt == 0; }
  // Every rank consumed exactly steps_per_epoch batches.
  bool balanced(uint64_t steps_per_epoch) const;
  std::string Describe() const;
};

// What a run of epochs added up to (the demo's and the soak's summaries).
struct DeliveryTotals {
  uint64_t planned = 0, delivered = 0, duplicates = 0, lost = 0, quarantined = 0, unexpected = 0, corrupt = 0;

  void Add(const EpochVerdict& v);
  static DeliveryTotals Of(const EpochVerdict& v);
};

// The counts every delivery summary carries, under the keys scripts read (samples_planned, samples_delivered,
// duplicates, lost, quarantined), written into the object `j` has open.
JsonWriter& WriteDeliveryCounts(JsonWriter& j, const DeliveryTotals& t);

class DeliveryChecker {
 public:
  explicit DeliveryChecker(const Plan& plan);

  void Record(const ConsumedBatch& batch);
  EpochVerdict Check(uint32_t epoch) const;

 private:
  struct EpochLog {
    std::vector<uint8_t> consumed;  // per position: times consumed (saturating)
    std::vector<uint8_t> quarantined;
    std::vector<uint64_t> batches_per_rank;
    uint64_t unexpected = 0;
    uint64_t corrupt = 0;
    std::vector<SamplePosition> examples;
  };
  EpochLog& LogFor(uint32_t epoch) STOKER_REQUIRES(mu_);

  const Plan plan_;
  mutable Mutex mu_;
  std::map<uint32_t, EpochLog> epochs_ STOKER_GUARDED_BY(mu_);
};

}  // namespace stoker::tools
