// The plan and its keyed permutation: bijective, balanced, deterministic, shuffled per epoch, units that tile epochs.
#include "dataset/plan.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace stoker
