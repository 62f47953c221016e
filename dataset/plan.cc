// The plan (plan.h): which sample each rank gets at each slot of each batch, in O(1) per sample.
#include "dataset/plan.h"

#include <algorithm>

#include "base/hash.h"

namespace stoker {

KeyedPermutation::KeyedPermutation(uint64_t n, uint64_t key) : n_(n) {
  uint32_t bits = 2;
  while (bits < 64 && (uint64_t{1} << bits) < n) ++bits;
  if (bits % 2 != 0) ++bits;
  half_bits_ = bits / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  for (int i = 0; i < 4; ++i) round_keys_[i] = DeriveSeed(key, static_cast<uint64_t>(i));
}

uint64_t KeyedPermutation::Encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (uint64_t k : round_keys_) {
    uint64_t next = left ^ (Mix64(right ^ k) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

// Encrypt's rounds undone in reverse order: each round maps (left, right) to (right, left ^ F(right ^ key)).
uint64_t KeyedPermutation::Decrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (int i = 3; i >= 0; --i) {
    const uint64_t previous_left = right ^ (Mix64(left ^ round_keys_[i]) & half_mask_);
    right = left;
    left = previous_left;
  }
  return (left << half_bits_) | right;
}

uint64_t KeyedPermutation::Inverse(uint64_t value) const {
  STOKER_CHECK(value < n_, "permutation value out of range");
  // The cycle walk backwards: Decrypt until the value lands in [0, n), the way operator() walks forwards.
  uint64_t x = Decrypt(value);
  while (x >= n_) x = Decrypt(x);
  return x;
}

uint64_t KeyedPermutation::operator()(uint64_t i) const {
  STOKER_CHECK(i < n_, "permutation index out of range");
  // Cycle walking: Encrypt is a bijection of [0, 2^bits); following it until the value lands in [0, n) gives a
  // bijection of [0, n). The domain is less than 4n, so the walk is short.
  uint64_t x = Encrypt(i);
  while (x >= n_) x = Encrypt(x);
  return x;
}

// Steps that deal `positions` in global batches of `global`: the remainder policy's one rule (drop the last short
// batch, or pad it).
static uint64_t StepsFor(uint64_t positions, uint64_t global, Remainder remainder) {
  return remainder == Remainder::kDrop ? positions / global : (positions + global - 1) / global;
}

StatusOr<Plan> Plan::Make(const JobSpec& spec, uint64_t num_samples) {
  STOKER_RETURN_IF_ERROR(spec.Validate());
  if (num_samples == 0) {
    return InvalidArgumentError("job '" + spec.name + "': the dataset has no samples");
  }
  Plan plan;
  plan.num_samples_ = num_samples;
  plan.world_size_ = spec.world_size;
  plan.batch_size_ = spec.batch_size;
  plan.epochs_ = spec.epochs;
  plan.batches_per_unit_ = spec.batches_per_unit;
  plan.seed_ = spec.seed;
  plan.shuffle_ = spec.shuffle;
  uint64_t global = uint64_t{spec.world_size} * spec.batch_size;
  plan.steps_ = StepsFor(num_samples, global, spec.remainder);
  if (plan.steps_ == 0) {
    return InvalidArgumentError("job '" + spec.name + "': the dataset has " + std::to_string(num_samples) +
                                " samples, fewer than one global batch (" + std::to_string(spec.world_size) +
                                " ranks x " + std::to_string(spec.batch_size) +
                                "); use --remainder pad or a smaller batch size");
  }
  plan.units_per_epoch_ = (plan.steps_ + spec.batches_per_unit - 1) / spec.batches_per_unit;
  plan.origin_epoch_ = spec.origin_epoch;
  plan.origin_offset_ = spec.origin_offset;
  if (spec.origin_epoch < spec.epochs) {
    if (spec.origin_offset >= num_samples) {
      return InvalidArgumentError("job '" + spec.name + "': origin offset " + std::to_string(spec.origin_offset) +
                                  " is past the dataset's " + std::to_string(num_samples) + " samples");
    }
    const uint64_t steps_left = StepsFor(num_samples - spec.origin_offset, global, spec.remainder);
    if (steps_left == 0) {
      return InvalidArgumentError("job '" + spec.name + "': origin offset " + std::to_string(spec.origin_offset) +
                                  " leaves less than one global batch of its epoch (Plan::NormalOrigin moves it)");
    }
    plan.origin_skip_ = plan.steps_ - steps_left;
  }  // else the job's end, whose offset is 0 (JobSpec::Validate)
  return plan;
}

Plan::Point Plan::NormalOrigin(const JobSpec& shape, uint64_t num_samples, Point point) {
  const uint64_t global = uint64_t{shape.world_size} * shape.batch_size;
  if (point.epoch < shape.epochs && point.offset != 0 &&
      StepsFor(num_samples - std::min(point.offset, num_samples), global, shape.remainder) == 0) {
    point = {point.epoch + 1, 0};
  }
  if (point.epoch >= shape.epochs) point = {shape.epochs, 0};
  return point;
}

uint64_t Plan::FirstBatch(uint32_t epoch) const {
  if (epoch < origin_epoch_) return steps_;
  return epoch == origin_epoch_ ? origin_skip_ : 0;
}

uint64_t Plan::StartBatch() const {
  return origin_epoch_ >= epochs_ ? total_batches() : GlobalBatch(origin_epoch_, origin_skip_);
}

uint64_t Plan::StepStart(uint32_t epoch, uint64_t batch) const {
  const uint64_t global = uint64_t{world_size_} * batch_size_;
  return epoch == origin_epoch_ ? origin_offset_ + (batch - origin_skip_) * global : batch * global;
}

uint64_t Plan::EpochPositions(uint32_t epoch) const {
  if (epoch >= epochs_) return 0;
  return (steps_ - FirstBatch(epoch)) * world_size_ * batch_size_;
}

uint64_t Plan::RealSamples(uint32_t epoch) const {
  if (epoch >= epochs_ || epoch < origin_epoch_) return 0;
  const uint64_t first = epoch == origin_epoch_ ? origin_offset_ : 0;
  return std::min(first + EpochPositions(epoch), num_samples_) - first;
}

uint64_t Plan::PaddedSamples(uint32_t epoch) const { return EpochPositions(epoch) - RealSamples(epoch); }

Plan::Point Plan::PointOf(uint64_t global_batch) const {
  if (global_batch >= total_batches()) return {epochs_, 0};
  if (global_batch < StartBatch()) return {origin_epoch_, origin_offset_};
  const uint32_t epoch = EpochOf(global_batch);
  return {epoch, StepStart(epoch, BatchInEpoch(global_batch))};
}

std::optional<uint64_t> Plan::BatchAt(Point point) const {
  if (point.epoch >= epochs_) {
    return point == Point{epochs_, 0} ? std::optional<uint64_t>(total_batches()) : std::nullopt;
  }
  if (point.epoch < origin_epoch_ || point.offset >= num_samples_) return std::nullopt;
  const uint64_t base = point.epoch == origin_epoch_ ? origin_offset_ : 0;
  const uint64_t global = uint64_t{world_size_} * batch_size_;
  if (point.offset < base || (point.offset - base) % global != 0) return std::nullopt;
  // Past the last step (only kDrop's tail, less than a global batch): the next epoch's start.
  return GlobalBatch(point.epoch, FirstBatch(point.epoch) + (point.offset - base) / global);
}

uint64_t Plan::real_samples_per_epoch() const {
  uint64_t positions = steps_ * world_size_ * batch_size_;
  return positions < num_samples_ ? positions : num_samples_;
}

uint64_t Plan::padded_samples_per_epoch() const {
  return steps_ * world_size_ * batch_size_ - real_samples_per_epoch();
}

Plan::UnitRange Plan::Unit(uint64_t global_unit) const {
  STOKER_CHECK(global_unit < total_units(), "unit out of range");
  UnitRange range;
  range.epoch = static_cast<uint32_t>(global_unit / units_per_epoch_);
  uint64_t u = global_unit % units_per_epoch_;
  range.first_batch = u * batches_per_unit_;
  uint64_t end = range.first_batch + batches_per_unit_;
  if (end > steps_) end = steps_;
  range.count = static_cast<uint32_t>(end - range.first_batch);
  return range;
}

uint64_t Plan::UnitOf(uint64_t global_batch) const {
  return EpochOf(global_batch) * units_per_epoch_ + BatchInEpoch(global_batch) / batches_per_unit_;
}

uint64_t Plan::UnitEnd(uint64_t global_unit) const {
  UnitRange r = Unit(global_unit);
  return GlobalBatch(r.epoch, r.first_batch + r.count);
}

KeyedPermutation Plan::Permutation(uint32_t epoch) const {
  return KeyedPermutation(num_samples_, DeriveSeed(seed_, 0x706c616eULL /* "plan" */, epoch));
}

PlannedSample Plan::AtPosition(const KeyedPermutation& perm, uint64_t position) const {
  PlannedSample s;
  s.padding = position >= num_samples_;
  uint64_t source = s.padding ? position % num_samples_ : position;
  s.sample_id = shuffle_ ? perm(source) : source;
  return s;
}

uint64_t Plan::Position(uint32_t epoch, uint32_t rank, uint64_t batch, uint32_t slot) const {
  STOKER_CHECK(rank < world_size_ && batch < steps_ && slot < batch_size_ && epoch < epochs_ &&
                   batch >= FirstBatch(epoch),
               "plan position out of range");
  return StepStart(epoch, batch) + uint64_t{rank} * batch_size_ + slot;
}

PlannedSample Plan::Sample(uint32_t epoch, uint32_t rank, uint64_t batch, uint32_t slot) const {
  return AtPosition(Permutation(epoch), Position(epoch, rank, batch, slot));
}

void Plan::BatchSamples(uint32_t epoch, uint32_t rank, uint64_t batch, std::span<PlannedSample> out) const {
  STOKER_CHECK(out.size() == batch_size_, "BatchSamples needs batch_size entries");
  STOKER_CHECK(rank < world_size_ && batch < steps_ && epoch < epochs_ && batch >= FirstBatch(epoch),
               "plan position out of range");
  KeyedPermutation perm = Permutation(epoch);
  uint64_t first = StepStart(epoch, batch) + uint64_t{rank} * batch_size_;
  for (uint32_t slot = 0; slot < batch_size_; ++slot) out[slot] = AtPosition(perm, first + slot);
}

// A position p holds source sample p % num_samples (p itself below num_samples, a padding repeat above), so the
// sample is in the unit when some p with p % N == source falls in one of the rank's batch slots of the unit. Either
// walk the unit's batches, or the candidate positions source + k * N across the unit's span: whichever is fewer.
bool Plan::UnitHolds(uint64_t global_unit, uint32_t rank, uint64_t sample_id) const {
  if (sample_id >= num_samples_ || rank >= world_size_) return false;
  UnitRange unit = Unit(global_unit);
  const uint64_t first_batch = std::max(unit.first_batch, FirstBatch(unit.epoch));  // the origin epoch starts late
  if (first_batch >= unit.first_batch + unit.count) return false;
  unit.count = static_cast<uint32_t>(unit.first_batch + unit.count - first_batch);
  unit.first_batch = first_batch;
  const uint64_t source = shuffle_ ? Permutation(unit.epoch).Inverse(sample_id) : sample_id;
  const uint64_t n = num_samples_;
  const uint64_t global = uint64_t{world_size_} * batch_size_;
  const uint64_t begin = StepStart(unit.epoch, unit.first_batch);
  const uint64_t end = begin + uint64_t{unit.count} * global;
  // The first position at or after `from` that holds `source`.
  auto first_at_or_after = [&](uint64_t from) { return from + (source + n - from % n) % n; };
  if ((end - begin) / n + 2 <= unit.count) {
    for (uint64_t p = first_at_or_after(begin); p < end; p += n) {
      if ((p % global) / batch_size_ == rank) return true;
    }
    return false;
  }
  for (uint64_t batch = unit.first_batch; batch < unit.first_batch + unit.count; ++batch) {
    const uint64_t first = StepStart(unit.epoch, batch) + uint64_t{rank} * batch_size_;
    if (first_at_or_after(first) < first + batch_size_) return true;
  }
  return false;
}

}  // namespace stoker
