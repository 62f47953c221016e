// The checker: a perfect epoch passes; lost, duplicated, corrupt, unexpected and quarantined samples are found.
#include "tools/delivery_check.h"

#include <gtest/gtest.h>

#include "wire/data_messages.h"

namespace stoker::tools {
namespace {

Plan MakePlan(uint32_t ranks, uint32_t batch, uint64_t n, Remainder rem) {
  JobSpec spec{.name = "check", .manifest_path = "m", .batch_size = batch, .world_size = ranks, .epochs = 2,
               .remainder = rem};
  return *Plan::Make(spec, n);
}

ConsumedBatch AsPlanned(const Plan& plan, uint32_t epoch, uint32_t rank, uint64_t index) {
  ConsumedBatch b{epoch, rank, index, {}, {}};
  for (uint32_t s = 0; s < plan.batch_size(); ++s) {
    PlannedSample p = plan.Sample(epoch, rank, index, s);
    b.sample_ids.push_back(p.sample_id);
    b.flags.push_back(p.padding ? kSampleFlagPadding : 0);
  }
  return b;
}

void DeliverAll(DeliveryChecker& checker, const Plan& plan, uint32_t epoch) {
  for (uint32_t r = 0; r < plan.world_size(); ++r) {
    for (uint64_t k = 0; k < plan.steps_per_epoch(); ++k) checker.Record(AsPlanned(plan, epoch, r, k));
  }
}

TEST(DeliveryChecker, PerfectEpochPasses) {
  Plan plan = MakePlan(2, 4, 30, Remainder::kPad);  // G=8: 4 steps, 32 positions, 2 padding
  DeliveryChecker checker(plan);
  DeliverAll(checker, plan, 0);
  EpochVerdict v = checker.Check(0);
  EXPECT_TRUE(v.ok()) << v.Describe();
  EXPECT_TRUE(v.balanced(4));
  EXPECT_EQ(v.delivered, 30u);
  EXPECT_EQ(v.delivered_padding, 2u);
  EXPECT_EQ(v.planned_real, 30u);
  // Epoch 1 was never consumed: everything in it is lost.
  EpochVerdict missing = checker.Check(1);
  EXPECT_EQ(missing.lost, 30u);
  EXPECT_FALSE(missing.ok());
}

TEST(DeliveryChecker, FindsLostDuplicatedCorruptUnexpectedAndQuarantined) {
  Plan plan = MakePlan(2, 4, 32, Remainder::kDrop);
  DeliveryChecker checker(plan);
  for (uint32_t r = 0; r < 2; ++r) {
    for (uint64_t k = 0; k < plan.steps_per_epoch(); ++k) {
      if (r == 1 && k == 2) continue;  // lost: 4 samples
      ConsumedBatch b = AsPlanned(plan, 0, r, k);
      if (r == 0 && k == 1) b.flags[3] |= kSampleFlagQuarantined;
      if (r == 0 && k == 3) b.sample_ids[0] ^= 1;  // corrupt: wrong sample at a position
      checker.Record(b);
    }
  }
  checker.Record(AsPlanned(plan, 0, 0, 0));    // duplicated: 4 positions again
  ConsumedBatch stray = AsPlanned(plan, 0, 0, 0);
  stray.index = 99;
  checker.Record(stray);                       // unexpected
  EpochVerdict v = checker.Check(0);
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.lost, 4u + 1u);                  // the missing batch + the corrupted position
  EXPECT_EQ(v.duplicated, 4u);
  EXPECT_EQ(v.corrupt, 1u);
  EXPECT_EQ(v.unexpected, 1u);
  EXPECT_EQ(v.quarantined, 1u);
  ASSERT_EQ(v.quarantined_ids.size(), 1u);
  EXPECT_EQ(v.quarantined_ids[0], plan.Sample(0, 0, 1, 3).sample_id);
  EXPECT_EQ(v.batches_per_rank, (std::vector<uint64_t>{5, 3}));
  EXPECT_FALSE(v.balanced(4));
  EXPECT_NE(v.Describe().find("lost 5"), std::string::npos);
}

TEST(DeliveryChecker, PaddingFlagMustMatchThePlan) {
  Plan plan = MakePlan(1, 4, 6, Remainder::kPad);  // positions 6, 7 are padding
  DeliveryChecker checker(plan);
  ConsumedBatch b0 = AsPlanned(plan, 0, 0, 0);
  ConsumedBatch b1 = AsPlanned(plan, 0, 0, 1);
  b1.flags[3] = 0;  // padding delivered as if real
  checker.Record(b0);
  checker.Record(b1);
  EpochVerdict v = checker.Check(0);
  EXPECT_EQ(v.corrupt, 1u);
  EXPECT_EQ(v.lost, 0u);
  EXPECT_EQ(v.delivered, 6u);
}

}  // namespace
}  // namespace stoker::tools
