// The checker for logs across shape changes (shaped_check.h).
#include "tools/shaped_check.h"

#include <sstream>

#include "wire/data_messages.h"

namespace stoker::tools {
namespace {
constexpr uint32_t kPositionExample = UINT32_MAX;  // an example that is a position of the order, not a batch slot

std::string ShapeName(const LoggedShape& s) {
  std::string name = std::to_string(s.ranks) + "x" + std::to_string(s.batch_size);
  if (s.origin_epoch != 0 || s.origin_offset != 0) {
    name += "@" + std::to_string(s.origin_epoch) + "+" + std::to_string(s.origin_offset);
  }
  return name;
}
}  // namespace

std::string ShapedVerdict::Describe() const {
  std::ostringstream out;
  const EpochVerdict& v = counts;
  out << "epoch " << v.epoch << ": planned " << v.planned_real << " (+" << remainder << " remainder, "
      << v.planned_padding << " padding), delivered " << v.delivered << ", quarantined " << v.quarantined
      << ", lost " << v.lost << ", duplicated " << v.duplicated << ", unexpected " << v.unexpected << ", corrupt "
      << v.corrupt << "; batches per rank by shape: " << shapes << (balanced ? "" : " (unequal)");
  for (const auto& e : v.examples) {
    if (e.rank == kPositionExample) {
      out << "\n  position " << e.sample_id << " of the epoch's order not consumed";
    } else {
      out << "\n  rank " << e.rank << " batch " << e.batch << " slot " << e.slot << " sample " << e.sample_id;
    }
  }
  return out.str();
}

ShapedChecker::ShapedChecker(const JobSpec& spec, uint64_t num_samples) : spec_(spec), num_samples_(num_samples) {}

StatusOr<const Plan*> ShapedChecker::PlanFor(const LoggedShape& shape) {
  auto it = plans_.find(shape);
  if (it != plans_.end()) return &it->second;
  JobSpec spec = spec_;
  spec.world_size = shape.ranks;
  spec.batch_size = shape.batch_size;
  spec.origin_epoch = shape.origin_epoch;
  spec.origin_offset = shape.origin_offset;
  STOKER_ASSIGN_OR_RETURN(Plan plan, Plan::Make(spec, num_samples_));
  return &plans_.emplace(shape, std::move(plan)).first->second;
}

ShapedChecker::EpochLog& ShapedChecker::LogFor(uint32_t epoch) {
  auto [it, added] = epochs_.try_emplace(epoch);
  if (added) it->second.consumed.assign(num_samples_, 0);
  return it->second;
}

Status ShapedChecker::Record(const LoggedBatch& logged) {
  // A log line with no S line before it is of the job as it started.
  const LoggedShape shape = logged.shape.ranks != 0 ? logged.shape
                                                    : LoggedShape{spec_.world_size, spec_.batch_size,
                                                                  spec_.origin_epoch, spec_.origin_offset};
  STOKER_ASSIGN_OR_RETURN(const Plan* plan, PlanFor(shape));
  const ConsumedBatch& batch = logged.batch;
  EpochLog& log = LogFor(std::min(batch.epoch, spec_.epochs - 1));
  auto unexpected = [&] {
    ++log.unexpected;
    if (log.examples.size() < kMaxExamples) log.examples.push_back({batch.rank, batch.index, 0, 0});
  };
  if (batch.epoch >= plan->epochs() || batch.rank >= plan->world_size() || batch.index >= plan->steps_per_epoch() ||
      batch.index < plan->FirstBatch(batch.epoch)) {
    unexpected();
    return Status::Ok();
  }
  std::vector<uint64_t>& per_rank = log.batches[shape];
  per_rank.resize(plan->world_size(), 0);
  ++per_rank[batch.rank];
  if (batch.sample_ids.size() != plan->batch_size() || batch.flags.size() != plan->batch_size()) {
    log.corrupt += plan->batch_size();
    return Status::Ok();
  }
  for (uint32_t slot = 0; slot < plan->batch_size(); ++slot) {
    const PlannedSample planned = plan->Sample(batch.epoch, batch.rank, batch.index, slot);
    const bool padding = (batch.flags[slot] & kSampleFlagPadding) != 0;
    if (planned.sample_id != batch.sample_ids[slot] || planned.padding != padding) {
      ++log.corrupt;
      if (log.examples.size() < kMaxExamples) {
        log.examples.push_back({batch.rank, batch.index, slot, batch.sample_ids[slot]});
      }
      continue;
    }
    if (padding) {
      ++log.padding;
      continue;
    }
    ++log.consumed[plan->Position(batch.epoch, batch.rank, batch.index, slot)];
    if ((batch.flags[slot] & kSampleFlagQuarantined) != 0) ++log.quarantined;
  }
  return Status::Ok();
}

ShapedVerdict ShapedChecker::Check(uint32_t epoch) const {
  ShapedVerdict out;
  EpochVerdict& v = out.counts;
  v.epoch = epoch;
  auto it = epochs_.find(epoch);
  if (it == epochs_.end()) {
    v.planned_real = num_samples_;
    v.lost = num_samples_;
    return out;
  }
  const EpochLog& log = it->second;
  // The epoch's delivered end: that of the last shape that dealt it (the one with the latest origin).
  const Plan* last = nullptr;
  LoggedShape last_shape;
  for (const auto& [shape, batches] : log.batches) {
    const Plan& plan = plans_.at(shape);
    if (last == nullptr || std::pair(shape.origin_epoch, shape.origin_offset) >=
                               std::pair(last_shape.origin_epoch, last_shape.origin_offset)) {
      last = &plan;
      last_shape = shape;
    }
  }
  uint64_t end = num_samples_;
  if (last != nullptr) {
    const uint64_t first = epoch == last->origin_epoch() ? last->origin_offset() : 0;
    end = first + last->RealSamples(epoch);
  }
  v.planned_real = end;
  out.remainder = num_samples_ - end;
  v.planned_padding = log.padding;
  v.delivered_padding = log.padding;
  v.quarantined = log.quarantined;
  v.unexpected = log.unexpected;
  v.corrupt = log.corrupt;
  v.examples = log.examples;
  for (uint64_t p = 0; p < num_samples_; ++p) {
    const uint32_t n = log.consumed[p];
    if (n > 1) v.duplicated += n - 1;
    if (p < end && n == 0) {
      ++v.lost;
      if (v.examples.size() < kMaxExamples) v.examples.push_back({kPositionExample, 0, 0, p});
    }
    if (n > 0) v.delivered += 1;
    if (p >= end && n > 0) ++v.unexpected;  // the remainder is never dealt
  }
  v.delivered -= std::min(v.delivered, v.quarantined);
  for (const auto& [shape, batches] : log.batches) {
    if (!out.shapes.empty()) out.shapes += ", ";
    out.shapes += ShapeName(shape) + " [";
    for (size_t r = 0; r < batches.size(); ++r) {
      out.shapes += (r ? " " : "") + std::to_string(batches[r]);
      if (batches[r] != batches[0]) out.balanced = false;
    }
    out.shapes += "]";
  }
  return out;
}

}  // namespace stoker::tools
