// The plan: which samples rank r gets as its batch k of epoch e, for every (e, r, k). It is a pure function of
// (number of samples, seed, epoch, world size, batch size, remainder policy, shuffle), computed on demand in O(1)
// per sample from a keyed permutation: nothing per sample is stored, and the coordinator, every worker and the
// checker compute the same answer independently.
//
// Layout of one epoch: the shuffled samples are laid out in one sequence of positions; global step k takes the
// positions [k*G, (k+1)*G) with G = world_size * batch_size, and rank r takes [k*G + r*B, k*G + (r+1)*B) of them.
// Every rank therefore gets exactly steps_per_epoch() batches. With Remainder::kDrop the positions past the last
// full global batch are not delivered this epoch (a different random remainder each epoch when shuffling); with
// kPad the last global batch is completed with repeated samples that are flagged as padding.
//
// A plan with an origin (JobSpec::origin_epoch/origin_offset: a job resumed from a checkpoint on another shape)
// delivers nothing before its origin epoch, and in that epoch only the positions from origin_offset on: the same
// order, dealt to this shape in steps of G from origin_offset, the remainder rule applied to what is left. Its
// batches are numbered so that the epoch still ends at steps_per_epoch(): they start at FirstBatch(epoch) (the full
// epoch's steps less those left), so a global batch index means the same everywhere and a rank of the resumed job
// starts at StartBatch() the way a rank resumed mid-epoch does. The samples of the steps after (epoch, offset)
// depend only on the seed, the epoch, the offset and the shape, whatever origin a plan has.
//
// Thread safety: a Plan is immutable after Make(); all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "stoker/job_spec.h"
#include "stoker/status.h"

namespace stoker {

// A bijection of [0, n) keyed by 64 bits: a 4-round Feistel network on the next even power of two, with cycle
// walking. O(1) expected per lookup (fewer than 4 rounds of walking on average), no storage.
class KeyedPermutation {
 public:
  KeyedPermutation(uint64_t n, uint64_t key);
  uint64_t operator()(uint64_t i) const;
  // The i with (*this)(i) == value. Requires value < size().
  uint64_t Inverse(uint64_t value) const;
  uint64_t size() const { return n_; }

 private:
  uint64_t Encrypt(uint64_t x) const;
  uint64_t Decrypt(uint64_t x) const;
  uint64_t n_;
  uint32_t half_bits_;
  uint64_t half_mask_;
  uint64_t round_keys_[4];
};

struct PlannedSample {
  uint64_t sample_id = 0;
  bool padding = false;
  bool operator==(const PlannedSample&) const = default;
};

class Plan {
 public:
  struct UnitRange {
    uint32_t epoch = 0;
    uint64_t first_batch = 0;  // within the epoch
    uint32_t count = 0;
  };

  // InvalidArgument for an empty dataset, or (kDrop) fewer samples than one global batch.
  static StatusOr<Plan> Make(const JobSpec& spec, uint64_t num_samples);

  uint64_t num_samples() const { return num_samples_; }
  uint32_t world_size() const { return world_size_; }
  uint32_t batch_size() const { return batch_size_; }
  uint32_t epochs() const { return epochs_; }
  uint32_t batches_per_unit() const { return batches_per_unit_; }
  uint64_t steps_per_epoch() const { return steps_; }
  uint64_t units_per_epoch() const { return units_per_epoch_; }
  // Batches one rank receives over all epochs, and the units that cover them.
  uint64_t total_batches() const { return steps_ * epochs_; }
  uint64_t total_units() const { return units_per_epoch_ * epochs_; }
  // Real (non-padding) samples delivered per epoch over all ranks.
  uint64_t real_samples_per_epoch() const;
  uint64_t padded_samples_per_epoch() const;

  // The origin (0, 0 without one), the epoch's first batch (0, or later in the origin epoch; steps_per_epoch()
  // before it), and the first global batch of the plan.
  uint32_t origin_epoch() const { return origin_epoch_; }
  uint64_t origin_offset() const { return origin_offset_; }
  uint64_t FirstBatch(uint32_t epoch) const;
  uint64_t StartBatch() const;
  // Real and padding samples epoch `epoch` delivers over all ranks (fewer in the origin epoch, none before it).
  uint64_t RealSamples(uint32_t epoch) const;
  uint64_t PaddedSamples(uint32_t epoch) const;
  // Where global batch g starts in its epoch's order: {epoch, positions of that epoch dealt before it} (the end of
  // the job is {epochs, 0}). What a checkpoint token carries: it means the same under any shape. Batches before
  // StartBatch() read as the origin.
  struct Point {
    uint32_t epoch = 0;
    uint64_t offset = 0;
    bool operator==(const Point&) const = default;
  };
  Point PointOf(uint64_t global_batch) const;
  // The global batch that starts at `point`, if a step of this plan starts there (the end of an epoch's
  // delivered steps counts as the next epoch's start); nullopt otherwise.
  std::optional<uint64_t> BatchAt(Point point) const;
  // The origin a job of `shape` resumed at `point` gets: `point`, or the next epoch's start when what is left of
  // the epoch is less than one global batch that kDrop would drop (the end of the job: {epochs, 0}).
  static Point NormalOrigin(const JobSpec& shape, uint64_t num_samples, Point point);

  // Global batch index g = epoch * steps_per_epoch + batch.
  uint64_t GlobalBatch(uint32_t epoch, uint64_t batch) const { return uint64_t{epoch} * steps_ + batch; }
  uint32_t EpochOf(uint64_t global_batch) const { return static_cast<uint32_t>(global_batch / steps_); }
  uint64_t BatchInEpoch(uint64_t global_batch) const { return global_batch % steps_; }

  UnitRange Unit(uint64_t global_unit) const;
  uint64_t UnitOf(uint64_t global_batch) const;
  // One past the last global batch of the unit.
  uint64_t UnitEnd(uint64_t global_unit) const;

  // The sample at (epoch, rank, batch, slot). Requires rank < world, FirstBatch(epoch) <= batch < steps,
  // slot < batch_size.
  PlannedSample Sample(uint32_t epoch, uint32_t rank, uint64_t batch, uint32_t slot) const;
  // The position in its epoch's order of (epoch, rank, batch, slot): where Sample() takes it from. Positions at
  // or past num_samples() are padding. Same requirements as Sample().
  uint64_t Position(uint32_t epoch, uint32_t rank, uint64_t batch, uint32_t slot) const;
  // All samples of one batch, in slot order. out.size() must be batch_size.
  void BatchSamples(uint32_t epoch, uint32_t rank, uint64_t batch, std::span<PlannedSample> out) const;
  // Whether `sample_id` is one of the samples (real or padding) rank `rank` gets in unit `global_unit`: what a
  // worker holding that unit may report on. O(min(batches in the unit, unit positions / samples + 2)), no storage.
  // Requires global_unit < total_units().
  bool UnitHolds(uint64_t global_unit, uint32_t rank, uint64_t sample_id) const;

 private:
  Plan() = default;
  KeyedPermutation Permutation(uint32_t epoch) const;
  PlannedSample AtPosition(const KeyedPermutation& perm, uint64_t position) const;
  // The position of rank 0's first slot in step `batch` of `epoch` (batch >= FirstBatch(epoch)).
  uint64_t StepStart(uint32_t epoch, uint64_t batch) const;
  uint64_t EpochPositions(uint32_t epoch) const;  // positions dealt in the epoch, padding included

  uint64_t num_samples_ = 0;
  uint32_t world_size_ = 1;
  uint32_t batch_size_ = 1;
  uint32_t epochs_ = 1;
  uint32_t batches_per_unit_ = 1;
  uint64_t steps_ = 0;
  uint64_t units_per_epoch_ = 0;
  uint64_t seed_ = 0;
  bool shuffle_ = true;
  uint32_t origin_epoch_ = 0;
  uint64_t origin_offset_ = 0;
  uint64_t origin_skip_ = 0;  // FirstBatch(origin_epoch_)
};

}  // namespace stoker
