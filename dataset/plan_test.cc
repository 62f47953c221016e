// The plan and its keyed permutation: bijective, balanced, deterministic, shuffled per epoch, units that tile epochs;
// plans with an origin.
#include "dataset/plan.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

namespace stoker {
namespace {

JobSpec Spec(uint32_t ranks, uint32_t batch, Remainder remainder, uint32_t epochs = 2, uint32_t per_unit = 1) {
  return {.name = "plan-test",
          .manifest_path = "/dev/null",
          .batch_size = batch,
          .world_size = ranks,
          .epochs = epochs,
          .seed = 1234,
          .remainder = remainder,
          .batches_per_unit = per_unit};
}

TEST(KeyedPermutation, IsABijectionForAwkwardSizes) {
  for (uint64_t n : {1ull, 2ull, 3ull, 5ull, 17ull, 1000ull, 4096ull, 4097ull, 12345ull}) {
    KeyedPermutation perm(n, 99);
    std::vector<bool> seen(n, false);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t v = perm(i);
      ASSERT_LT(v, n);
      ASSERT_FALSE(seen[v]) << "n=" << n << " value " << v << " twice";
      seen[v] = true;
    }
  }
}

TEST(KeyedPermutation, DifferentKeysGiveDifferentOrders) {
  KeyedPermutation a(1000, 1), b(1000, 2);
  int same = 0;
  for (uint64_t i = 0; i < 1000; ++i) same += a(i) == b(i);
  EXPECT_LT(same, 20);
}

// Every rank gets the same number of batches; every sample appears at most once per epoch as a real sample,
// and exactly once when the plan covers the dataset (pad, or drop with a divisible size).
TEST(Plan, BalancedAndExactForRanksOneToThree) {
  for (uint32_t ranks = 1; ranks <= 3; ++ranks) {
    for (uint32_t batch : {1u, 4u, 7u}) {
      for (uint64_t n : {1ull, 10ull, 29ull, 64ull, 101ull}) {
        for (Remainder rem : {Remainder::kDrop, Remainder::kPad}) {
          auto plan_or = Plan::Make(Spec(ranks, batch, rem), n);
          uint64_t global = uint64_t{ranks} * batch;
          if (rem == Remainder::kDrop && n < global) {
            EXPECT_FALSE(plan_or.ok());
            EXPECT_EQ(plan_or.status().code(), StatusCode::kInvalidArgument);
            continue;
          }
          ASSERT_TRUE(plan_or.ok()) << plan_or.status().ToString();
          const Plan& plan = *plan_or;
          uint64_t steps = rem == Remainder::kDrop ? n / global : (n + global - 1) / global;
          ASSERT_EQ(plan.steps_per_epoch(), steps);
          for (uint32_t epoch = 0; epoch < 2; ++epoch) {
            std::vector<int> real_count(n, 0);
            uint64_t padding = 0;
            for (uint32_t r = 0; r < ranks; ++r) {
              for (uint64_t k = 0; k < steps; ++k) {
                for (uint32_t s = 0; s < batch; ++s) {
                  PlannedSample p = plan.Sample(epoch, r, k, s);
                  ASSERT_LT(p.sample_id, n);
                  if (p.padding) ++padding; else ++real_count[p.sample_id];
                }
              }
            }
            uint64_t covered = 0;
            for (int c : real_count) {
              ASSERT_LE(c, 1);
              covered += c;
            }
            EXPECT_EQ(covered, plan.real_samples_per_epoch());
            EXPECT_EQ(padding, plan.padded_samples_per_epoch());
            EXPECT_EQ(covered, rem == Remainder::kPad ? n : steps * global);
          }
        }
      }
    }
  }
}

TEST(Plan, IsDeterministicAndShufflesPerEpoch) {
  auto a = Plan::Make(Spec(2, 8, Remainder::kDrop, 3), 500);
  auto b = Plan::Make(Spec(2, 8, Remainder::kDrop, 3), 500);
  ASSERT_TRUE(a.ok() && b.ok());
  int same_across_epochs = 0;
  for (uint64_t k = 0; k < a->steps_per_epoch(); ++k) {
    for (uint32_t s = 0; s < 8; ++s) {
      EXPECT_EQ(a->Sample(1, 1, k, s), b->Sample(1, 1, k, s));
      same_across_epochs += a->Sample(0, 0, k, s) == a->Sample(1, 0, k, s);
    }
  }
  EXPECT_LT(same_across_epochs, 10);
  JobSpec other_seed = Spec(2, 8, Remainder::kDrop, 3);
  other_seed.seed = 4321;
  auto c = Plan::Make(other_seed, 500);
  EXPECT_NE(c->Sample(0, 0, 0, 0).sample_id * 1000 + c->Sample(0, 0, 0, 1).sample_id,
            a->Sample(0, 0, 0, 0).sample_id * 1000 + a->Sample(0, 0, 0, 1).sample_id);
}

TEST(Plan, WithoutShuffleFollowsManifestOrder) {
  JobSpec spec = Spec(2, 3, Remainder::kPad);
  spec.shuffle = false;
  auto plan = Plan::Make(spec, 10);
  ASSERT_TRUE(plan.ok());
  // Global step 0: rank 0 takes positions 0..2, rank 1 takes 3..5.
  EXPECT_EQ(plan->Sample(0, 0, 0, 0).sample_id, 0u);
  EXPECT_EQ(plan->Sample(0, 1, 0, 2).sample_id, 5u);
  // Step 1 holds positions 6..11: 10 and 11 wrap to samples 0 and 1 as padding.
  EXPECT_EQ(plan->Sample(0, 1, 1, 0), (PlannedSample{9, false}));
  EXPECT_EQ(plan->Sample(0, 1, 1, 1), (PlannedSample{0, true}));
  EXPECT_EQ(plan->Sample(0, 1, 1, 2), (PlannedSample{1, true}));
}

TEST(Plan, FewerSamplesThanRanksPadsEveryRank) {
  auto plan = Plan::Make(Spec(3, 2, Remainder::kPad), 2);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->steps_per_epoch(), 1u);
  EXPECT_EQ(plan->real_samples_per_epoch(), 2u);
  EXPECT_EQ(plan->padded_samples_per_epoch(), 4u);
  EXPECT_TRUE(plan->Sample(0, 2, 0, 1).padding);
}

TEST(Plan, RejectsEmptyDatasetAndTooFewSamplesToDrop) {
  auto empty = Plan::Make(Spec(1, 4, Remainder::kPad), 0);
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("no samples"), std::string::npos);
  auto small = Plan::Make(Spec(2, 4, Remainder::kDrop), 7);
  EXPECT_EQ(small.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("--remainder pad"), std::string::npos);
}

TEST(KeyedPermutation, InverseUndoesIt) {
  for (uint64_t n : {1ull, 2ull, 3ull, 17ull, 4097ull, 12345ull}) {
    KeyedPermutation perm(n, 7);
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(perm.Inverse(perm(i)), i) << "n=" << n;
  }
}

// UnitHolds answers exactly "is this sample among the unit's batch slots for this rank", checked against the
// samples the plan lists, for every unit, rank and sample id, with padding that wraps the dataset more than once.
TEST(Plan, UnitHoldsExactlyTheSamplesOfTheUnitsBatches) {
  struct Case {
    uint32_t ranks, batch, per_unit;
    uint64_t n;
    Remainder remainder;
    bool shuffle;
  };
  for (const Case& c : {Case{1, 4, 2, 29, Remainder::kDrop, true}, Case{3, 4, 2, 101, Remainder::kPad, true},
                        Case{2, 3, 1, 64, Remainder::kDrop, false}, Case{3, 4, 3, 5, Remainder::kPad, true},
                        Case{2, 7, 4, 200, Remainder::kPad, false}}) {
    JobSpec spec = Spec(c.ranks, c.batch, c.remainder, 2, c.per_unit);
    spec.shuffle = c.shuffle;
    auto plan = Plan::Make(spec, c.n);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    std::vector<PlannedSample> slots(c.batch);
    for (uint64_t unit = 0; unit < plan->total_units(); ++unit) {
      const Plan::UnitRange range = plan->Unit(unit);
      for (uint32_t rank = 0; rank < c.ranks; ++rank) {
        std::set<uint64_t> listed;
        for (uint64_t b = range.first_batch; b < range.first_batch + range.count; ++b) {
          plan->BatchSamples(range.epoch, rank, b, slots);
          for (const PlannedSample& s : slots) listed.insert(s.sample_id);
        }
        for (uint64_t id = 0; id < c.n + 2; ++id) {
          ASSERT_EQ(plan->UnitHolds(unit, rank, id), listed.count(id) != 0)
              << "n=" << c.n << " unit " << unit << " rank " << rank << " sample " << id;
        }
      }
    }
  }
}

TEST(Plan, UnitsTileEveryEpochWithAShortLastUnit) {
  auto plan = Plan::Make(Spec(1, 1, Remainder::kDrop, 2, 4), 10);  // 10 steps, units of 4: 4+4+2
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->units_per_epoch(), 3u);
  EXPECT_EQ(plan->total_units(), 6u);
  uint64_t next = 0;
  for (uint64_t q = 0; q < plan->total_units(); ++q) {
    Plan::UnitRange r = plan->Unit(q);
    EXPECT_EQ(plan->GlobalBatch(r.epoch, r.first_batch), next);
    for (uint32_t i = 0; i < r.count; ++i) EXPECT_EQ(plan->UnitOf(next + i), q);
    next += r.count;
    EXPECT_EQ(plan->UnitEnd(q), next);
  }
  EXPECT_EQ(next, plan->total_batches());
  EXPECT_EQ(plan->Unit(2).count, 2u);
  EXPECT_EQ(plan->Unit(5).epoch, 1u);
}

// Plans with an origin (a job resumed from a checkpoint on another shape): what is left of the origin epoch is
// dealt exactly once, in the epoch's order, in equal steps, the remainder rule applied once; batches keep their
// global numbering; the steps after a point do not depend on the origin the plan was made with.

Plan MakeAt(JobSpec spec, uint64_t n, Plan::Point point) {
  point = Plan::NormalOrigin(spec, n, point);
  spec.origin_epoch = point.epoch;
  spec.origin_offset = point.offset;
  auto plan = Plan::Make(spec, n);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return *plan;
}

// The samples of an epoch of `plan` in step order, rank order, slot order, with their padding flags.
std::vector<PlannedSample> Dealt(const Plan& plan, uint32_t epoch) {
  std::vector<PlannedSample> out;
  std::vector<PlannedSample> batch(plan.batch_size());
  for (uint64_t k = plan.FirstBatch(epoch); k < plan.steps_per_epoch(); ++k) {
    for (uint32_t r = 0; r < plan.world_size(); ++r) {
      plan.BatchSamples(epoch, r, k, batch);
      out.insert(out.end(), batch.begin(), batch.end());
    }
  }
  return out;
}

TEST(PlanOrigin, AnOriginAtTheStartIsTheOrdinaryPlan) {
  const JobSpec spec = Spec(3, 4, Remainder::kPad, 3);
  auto plain = Plan::Make(spec, 50);
  ASSERT_TRUE(plain.ok());
  const Plan at_zero = MakeAt(spec, 50, {0, 0});
  for (uint32_t e = 0; e < spec.epochs; ++e) EXPECT_EQ(Dealt(*plain, e), Dealt(at_zero, e));
  EXPECT_EQ(at_zero.StartBatch(), 0u);
  EXPECT_EQ(SpecFingerprint(spec), SpecFingerprint(spec));  // origin 0, 0 leaves the fingerprint as it was
}

// For every dataset size up to 60, both remainders, several shapes and every offset: the origin epoch deals each
// position in [offset, N) once, in the epoch's order, then (kPad) flagged repeats, never more than one global batch
// short (kDrop) or padded (kPad).
TEST(PlanOrigin, DealsWhatIsLeftOfTheEpochExactlyOnceInOrder) {
  for (Remainder remainder : {Remainder::kDrop, Remainder::kPad}) {
    for (auto [ranks, batch] : {std::pair{1u, 1u}, std::pair{3u, 2u}, std::pair{2u, 5u}, std::pair{4u, 3u}}) {
      for (uint64_t n = 1; n <= 60; ++n) {
        const JobSpec spec = Spec(ranks, batch, remainder, 3);
        const uint64_t global = uint64_t{ranks} * batch;
        if (remainder == Remainder::kDrop && n < global) continue;
        auto whole = Plan::Make(spec, n);
        ASSERT_TRUE(whole.ok());
        const std::vector<PlannedSample> order = Dealt(*whole, 1);  // the epoch's order, as the plain plan deals it
        for (uint64_t offset = 0; offset < n; ++offset) {
          SCOPED_TRACE("n=" + std::to_string(n) + " shape " + std::to_string(ranks) + "x" + std::to_string(batch) +
                       " offset " + std::to_string(offset) + (remainder == Remainder::kDrop ? " drop" : " pad"));
          const Plan plan = MakeAt(spec, n, {1, offset});
          if (plan.origin_epoch() != 1) {  // less than a global batch left under kDrop: the next epoch's start
            ASSERT_EQ(remainder, Remainder::kDrop);
            ASSERT_LT(n - offset, global);
            EXPECT_EQ(plan.StartBatch(), plan.GlobalBatch(2, 0));
            continue;
          }
          const std::vector<PlannedSample> left = Dealt(plan, 1);
          ASSERT_EQ(left.size() % global, 0u);
          uint64_t real = 0;
          for (size_t i = 0; i < left.size(); ++i) {
            if (left[i].padding) continue;
            ++real;
            const uint64_t position = offset + i;
            ASSERT_LT(position, order.size() + global);  // (the plain plan may have dropped the tail itself)
            if (position < order.size() && !order[position].padding) {
              EXPECT_EQ(left[i], order[position]);
            }
          }
          const uint64_t missing = n - offset - real;
          if (remainder == Remainder::kDrop) {
            EXPECT_LT(missing, global);
          } else {
            EXPECT_EQ(missing, 0u);
            EXPECT_LT(left.size() - real, global);
          }
          EXPECT_EQ(plan.RealSamples(1), real);
          EXPECT_EQ(plan.PaddedSamples(1), left.size() - real);
          EXPECT_EQ(plan.RealSamples(0), 0u);
          // Later epochs are the ordinary plan of this shape.
          EXPECT_EQ(Dealt(plan, 2), Dealt(*whole, 2));
        }
      }
    }
  }
}

TEST(PlanOrigin, NumbersTheOriginEpochsBatchesSoThatItEndsWhereEveryEpochEnds) {
  // 100 samples, 3 x 4 = 12 a step, kDrop: 8 steps per epoch. Resumed at 30 of epoch 1: 70 left = 5 steps.
  const Plan plan = MakeAt(Spec(3, 4, Remainder::kDrop, 3), 100, {1, 30});
  EXPECT_EQ(plan.steps_per_epoch(), 8u);
  EXPECT_EQ(plan.FirstBatch(0), 8u);  // nothing of epoch 0
  EXPECT_EQ(plan.FirstBatch(1), 3u);
  EXPECT_EQ(plan.FirstBatch(2), 0u);
  EXPECT_EQ(plan.StartBatch(), plan.GlobalBatch(1, 3));
  EXPECT_EQ(plan.PointOf(plan.StartBatch()), (Plan::Point{1, 30}));
  EXPECT_EQ(plan.PointOf(plan.GlobalBatch(1, 4)), (Plan::Point{1, 42}));
  EXPECT_EQ(plan.PointOf(plan.GlobalBatch(2, 1)), (Plan::Point{2, 12}));
  EXPECT_EQ(plan.PointOf(plan.total_batches()), (Plan::Point{3, 0}));
  EXPECT_EQ(plan.PointOf(0), (Plan::Point{1, 30}));  // before the start reads as the origin
  EXPECT_EQ(plan.BatchAt({1, 42}), plan.GlobalBatch(1, 4));
  EXPECT_EQ(plan.BatchAt({1, 30 + 5 * 12}), plan.GlobalBatch(2, 0));  // only the dropped tail left
  EXPECT_FALSE(plan.BatchAt({1, 31}).has_value());  // not a step of this plan
  EXPECT_FALSE(plan.BatchAt({1, 18}).has_value());  // before the origin
  EXPECT_FALSE(plan.BatchAt({0, 0}).has_value());
  EXPECT_EQ(plan.BatchAt({2, 24}), plan.GlobalBatch(2, 2));
  EXPECT_EQ(plan.BatchAt({3, 0}), plan.total_batches());
  for (uint64_t g = plan.StartBatch(); g <= plan.total_batches(); ++g) {
    EXPECT_EQ(plan.BatchAt(plan.PointOf(g)), g) << g;
  }
}

// The steps after (epoch, offset) are the same whatever origin the plan had, so a rank resumed against a plan of
// one origin and a rank resumed against the same shape at a later origin get the same samples.
TEST(PlanOrigin, TheStepsAfterAPointDoNotDependOnTheOrigin) {
  const JobSpec spec = Spec(2, 3, Remainder::kPad, 3);
  const Plan early = MakeAt(spec, 40, {0, 5});
  const Plan late = MakeAt(spec, 40, {0, 5 + 2 * 6});
  std::vector<PlannedSample> a(3), b(3);
  for (uint64_t k = late.FirstBatch(0); k < late.steps_per_epoch(); ++k) {
    for (uint32_t r = 0; r < 2; ++r) {
      early.BatchSamples(0, r, k, a);
      late.BatchSamples(0, r, k, b);
      EXPECT_EQ(a, b) << "step " << k << " rank " << r;
    }
  }
}

// 4 x 8 for three steps, then 3 x 5 for two, then 6 x 7 to the end: every sample of the epoch once, at most one
// global batch (of the last shape) not delivered.
TEST(PlanOrigin, AChainOfShapesCoversTheEpochOnce) {
  const uint64_t n = 500;
  std::map<uint64_t, int> seen;
  auto take = [&](const Plan& plan, uint64_t steps) {
    std::vector<PlannedSample> batch(plan.batch_size());
    const uint64_t first = plan.FirstBatch(0);
    for (uint64_t k = first; k < std::min(first + steps, plan.steps_per_epoch()); ++k) {
      for (uint32_t r = 0; r < plan.world_size(); ++r) {
        plan.BatchSamples(0, r, k, batch);
        for (const PlannedSample& s : batch) seen[s.sample_id] += s.padding ? 0 : 1;
      }
    }
    return plan.PointOf(plan.GlobalBatch(0, std::min(first + steps, plan.steps_per_epoch())));
  };
  Plan::Point point = take(MakeAt(Spec(4, 8, Remainder::kDrop, 1), n, {0, 0}), 3);
  EXPECT_EQ(point, (Plan::Point{0, 96}));
  point = take(MakeAt(Spec(3, 5, Remainder::kDrop, 1), n, point), 2);
  EXPECT_EQ(point, (Plan::Point{0, 126}));
  take(MakeAt(Spec(6, 7, Remainder::kDrop, 1), n, point), 1000);
  uint64_t once = 0;
  for (const auto& [id, count] : seen) {
    EXPECT_LE(count, 1) << "sample " << id;
    once += count == 1;
  }
  EXPECT_GT(once, n - 42);  // (500 - 126) % 42 = 38 dropped
  EXPECT_EQ(once, n - (n - 126) % 42);
}

TEST(PlanOrigin, UnitHoldsOnlyTheOriginEpochsDealtSamples) {
  const Plan plan = MakeAt(Spec(2, 3, Remainder::kDrop, 2, 2), 40, {0, 12});
  std::vector<PlannedSample> batch(3);
  for (uint64_t unit = 0; unit < plan.units_per_epoch(); ++unit) {
    const Plan::UnitRange range = plan.Unit(unit);
    for (uint32_t rank = 0; rank < 2; ++rank) {
      std::map<uint64_t, bool> in;
      for (uint64_t k = std::max(range.first_batch, plan.FirstBatch(0)); k < range.first_batch + range.count; ++k) {
        plan.BatchSamples(0, rank, k, batch);
        for (const auto& s : batch) in[s.sample_id] = true;
      }
      for (uint64_t id = 0; id < 40; ++id) EXPECT_EQ(plan.UnitHolds(unit, rank, id), in.count(id) != 0) << unit;
    }
  }
}

TEST(PlanOrigin, RefusesAnOriginPastTheDataOrTheJob) {
  JobSpec spec = Spec(2, 2, Remainder::kPad, 3);
  spec.origin_epoch = 1;
  spec.origin_offset = 40;
  EXPECT_EQ(Plan::Make(spec, 40).status().code(), StatusCode::kInvalidArgument);
  spec.origin_epoch = 4;
  spec.origin_offset = 0;
  EXPECT_EQ(Plan::Make(spec, 40).status().code(), StatusCode::kInvalidArgument);
  spec.origin_epoch = 3;  // the end of the job
  auto done = Plan::Make(spec, 40);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->StartBatch(), done->total_batches());
  EXPECT_EQ(Plan::NormalOrigin(spec, 40, {7, 3}), (Plan::Point{3, 0}));
}

}  // namespace
}  // namespace stoker
