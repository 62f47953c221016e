// The checker (delivery_check.h): what each epoch's consumption says against the plan, and the totals over a run.
#include "tools/delivery_check.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "wire/data_messages.h"
#include "base/sync.h"

namespace stoker::tools {
bool EpochVerdict::balanced(uint64_t steps_per_epoch) const {
  return std::all_of(batches_per_rank.begin(), batches_per_rank.end(),
                     [&](uint64_t n) { return n == steps_per_epoch; });
}

void DeliveryTotals::Add(const EpochVerdict& v) {
  planned += v.planned_real;
  delivered += v.delivered;
  duplicates += v.duplicated;
  lost += v.lost;
  quarantined += v.quarantined;
  unexpected += v.unexpected;
  corrupt += v.corrupt;
}

DeliveryTotals DeliveryTotals::Of(const EpochVerdict& v) {
  DeliveryTotals t;
  t.Add(v);
  return t;
}

JsonWriter& WriteDeliveryCounts(JsonWriter& j, const DeliveryTotals& t) {
  return j.Key("samples_planned").Value(t.planned)
      .Key("samples_delivered").Value(t.delivered)
      .Key("duplicates").Value(t.duplicates)
      .Key("lost").Value(t.lost)
      .Key("quarantined").Value(t.quarantined);
}

std::string EpochVerdict::Describe() const {
  std::ostringstream out;
  out << "epoch " << epoch << ": planned " << planned_real << " (+" << planned_padding << " padding), delivered "
      << delivered << ", quarantined " << quarantined << ", lost " << lost << ", duplicated " << duplicated
      << ", unexpected " << unexpected << ", corrupt " << corrupt << "; batches per rank [";
  for (size_t r = 0; r < batches_per_rank.size(); ++r) out << (r ? " " : "") << batches_per_rank[r];
  out << "]";
  for (const auto& e : examples) {
    out << "\n  rank " << e.rank << " batch " << e.batch << " slot " << e.slot << " sample " << e.sample_id;
  }
  return out.str();
}

DeliveryChecker::DeliveryChecker(const Plan& plan) : plan_(plan) {}

DeliveryChecker::EpochLog& DeliveryChecker::LogFor(uint32_t epoch) {
  auto it = epochs_.find(epoch);
  if (it != epochs_.end()) return it->second;
  EpochLog& log = epochs_[epoch];
  size_t positions = plan_.steps_per_epoch() * plan_.world_size() * plan_.batch_size();
  log.consumed.assign(positions, 0);
  log.quarantined.assign(positions, 0);
  log.batches_per_rank.assign(plan_.world_size(), 0);
  return log;
}

void DeliveryChecker::Record(const ConsumedBatch& batch) {
  MutexLock lock(mu_);
  if (batch.epoch >= plan_.epochs()) {
    // Nothing to attribute it to: count it against the last epoch so it is not silently ignored.
    ++LogFor(plan_.epochs() - 1).unexpected;
    return;
  }
  EpochLog& log = LogFor(batch.epoch);
  if (batch.rank >= plan_.world_size() || batch.index >= plan_.steps_per_epoch()) {
    ++log.unexpected;
    if (log.examples.size() < kMaxExamples) log.examples.push_back({batch.rank, batch.index, 0, 0});
    return;
  }
  ++log.batches_per_rank[batch.rank];
  if (batch.sample_ids.size() != plan_.batch_size() || batch.flags.size() != plan_.batch_size()) {
    log.corrupt += plan_.batch_size();
    if (log.examples.size() < kMaxExamples) log.examples.push_back({batch.rank, batch.index, 0, 0});
    return;
  }
  std::vector<PlannedSample> planned(plan_.batch_size());
  plan_.BatchSamples(batch.epoch, batch.rank, batch.index, planned);
  size_t base = (batch.index * plan_.world_size() + batch.rank) * plan_.batch_size();
  for (uint32_t slot = 0; slot < plan_.batch_size(); ++slot) {
    bool padding = (batch.flags[slot] & kSampleFlagPadding) != 0;
    bool quarantined = (batch.flags[slot] & kSampleFlagQuarantined) != 0;
    if (planned[slot].sample_id != batch.sample_ids[slot] || planned[slot].padding != padding) {
      ++log.corrupt;
      if (log.examples.size() < kMaxExamples) {
        log.examples.push_back({batch.rank, batch.index, slot, batch.sample_ids[slot]});
      }
      continue;
    }
    uint8_t& count = log.consumed[base + slot];
    if (count < 255) ++count;
    if (quarantined) log.quarantined[base + slot] = 1;
  }
}

EpochVerdict DeliveryChecker::Check(uint32_t epoch) const {
  MutexLock lock(mu_);
  EpochVerdict v;
  v.epoch = epoch;
  v.batches_per_rank.assign(plan_.world_size(), 0);
  v.planned_real = plan_.real_samples_per_epoch();
  v.planned_padding = plan_.padded_samples_per_epoch();
  auto it = epochs_.find(epoch);
  const EpochLog* log = it == epochs_.end() ? nullptr : &it->second;
  if (log != nullptr) {
    v.batches_per_rank = log->batches_per_rank;
    v.unexpected = log->unexpected;
    v.corrupt = log->corrupt;
    v.examples = log->examples;
  }
  std::set<uint64_t> quarantined_ids;
  std::vector<PlannedSample> planned(plan_.batch_size());
  for (uint64_t batch = 0; batch < plan_.steps_per_epoch(); ++batch) {
    for (uint32_t rank = 0; rank < plan_.world_size(); ++rank) {
      plan_.BatchSamples(epoch, rank, batch, planned);
      size_t base = (batch * plan_.world_size() + rank) * plan_.batch_size();
      for (uint32_t slot = 0; slot < plan_.batch_size(); ++slot) {
        uint8_t count = log ? log->consumed[base + slot] : 0;
        if (count > 1) v.duplicated += count - 1;
        if (planned[slot].padding) {
          if (count > 0) ++v.delivered_padding;
          continue;
        }
        if (count == 0) {
          ++v.lost;
          if (v.examples.size() < kMaxExamples) v.examples.push_back({rank, batch, slot, planned[slot].sample_id});
        } else if (log->quarantined[base + slot]) {
          ++v.quarantined;
          quarantined_ids.insert(planned[slot].sample_id);
        } else {
          ++v.delivered;
        }
      }
    }
  }
  v.quarantined_ids.assign(quarantined_ids.begin(), quarantined_ids.end());
  return v;
}

}  // namespace stoker::tools
