// PrefetchWindow on its own: every outcome of an insertion, the positions an ack reports, releases in any order,
// putting a batch back, and the coordinator's attempts fencing stale copies.
#include "client/src/window.h"

#include <gtest/gtest.h>

namespace stoker::internal {
namespace {

std::unique_ptr<ReceivedBatch> Batch(uint64_t g, uint64_t unit, uint64_t attempt) {
  auto b = std::make_unique<ReceivedBatch>();
  b->global = g;
  b->unit = unit;
  b->attempt = attempt;
  return b;
}

using Outcome = PrefetchWindow::Outcome;

TEST(PrefetchWindow, AcceptsEachBatchOnceInsideTheWindow) {
  PrefetchWindow w(3, /*start=*/10);
  EXPECT_EQ(w.Insert(Batch(12, 12, 1)), Outcome::kAccepted);  // out of order is fine
  EXPECT_EQ(w.Insert(Batch(12, 12, 1)), Outcome::kDuplicate);
  EXPECT_EQ(w.Insert(Batch(13, 13, 1)), Outcome::kOutOfWindow);  // consumed + 3 = 13
  EXPECT_EQ(w.Insert(Batch(9, 9, 1)), Outcome::kDuplicate);     // before this session's start
  EXPECT_EQ(w.received_watermark(), 10u);
  EXPECT_EQ(w.received_above(), std::set<uint64_t>({12}));
  EXPECT_EQ(w.Insert(Batch(10, 10, 1)), Outcome::kAccepted);
  EXPECT_EQ(w.Insert(Batch(11, 11, 1)), Outcome::kAccepted);
  EXPECT_EQ(w.received_watermark(), 13u);  // 10, 11 and the 12 above all count now
  EXPECT_TRUE(w.received_above().empty());
  EXPECT_EQ(w.filled(), 3u);
}

TEST(PrefetchWindow, HandsOutInOrderAndMovesConsumedPastReleasedBatchesOnly) {
  PrefetchWindow w(3, 0);
  for (uint64_t g = 0; g < 3; ++g) ASSERT_EQ(w.Insert(Batch(g, g, 1)), Outcome::kAccepted);
  auto b0 = w.TakeNext();
  auto b1 = w.TakeNext();
  EXPECT_EQ(b0->global, 0u);
  EXPECT_EQ(b1->global, 1u);
  EXPECT_EQ(w.next(), 2u);
  EXPECT_EQ(w.Insert(Batch(0, 0, 1)), Outcome::kDuplicate);  // delivered already
  EXPECT_TRUE(w.Release(1));                                 // out of order: consumed stays at 0
  EXPECT_EQ(w.consumed(), 0u);
  EXPECT_FALSE(w.Release(1));  // twice
  EXPECT_EQ(w.Insert(Batch(3, 3, 1)), Outcome::kOutOfWindow);  // slot 0 still out with the application
  EXPECT_TRUE(w.Release(0));
  EXPECT_EQ(w.consumed(), 2u);
  EXPECT_EQ(w.Insert(Batch(3, 3, 1)), Outcome::kAccepted);
  EXPECT_EQ(w.Insert(Batch(5, 5, 1)), Outcome::kOutOfWindow);
}

TEST(PrefetchWindow, PutBackReturnsOnlyTheLastBatchHandedOut) {
  PrefetchWindow w(4, 0);
  for (uint64_t g = 0; g < 2; ++g) ASSERT_EQ(w.Insert(Batch(g, g, 1)), Outcome::kAccepted);
  auto b0 = w.TakeNext();
  auto b1 = w.TakeNext();
  EXPECT_FALSE(w.PutBack(b0));  // not the last one
  ASSERT_NE(b0, nullptr);
  EXPECT_TRUE(w.PutBack(b1));
  EXPECT_EQ(b1, nullptr);
  EXPECT_EQ(w.next(), 1u);
  EXPECT_TRUE(w.Holds(1));
  EXPECT_EQ(w.TakeNext()->global, 1u);
}

TEST(PrefetchWindow, BatchesOfAnOlderAttemptThanTheCoordinatorListsAreStale) {
  JobSpec spec;
  spec.name = "j";
  spec.manifest_path = "/m.stoker";
  spec.batch_size = 1;
  spec.epochs = 1;
  spec.batches_per_unit = 2;
  auto plan = Plan::Make(spec, 8);
  ASSERT_TRUE(plan.ok());
  PrefetchWindow w(8, 0);
  w.NoteLeases({LeaseRef{"j", 0, 1, 5}}, *plan);  // unit 1 = batches 2 and 3, now under attempt 5
  EXPECT_EQ(w.Insert(Batch(2, 1, 4)), Outcome::kStaleAttempt);
  EXPECT_EQ(w.Insert(Batch(2, 1, 5)), Outcome::kAccepted);
  EXPECT_EQ(w.Insert(Batch(3, 1, 6)), Outcome::kAccepted);  // newer than listed: the coordinator's reply is late
  EXPECT_EQ(w.Insert(Batch(0, 0, 1)), Outcome::kAccepted);  // units it did not list are not fenced
  w.ForgetAttempts();  // a new coordinator session
  EXPECT_EQ(w.Insert(Batch(4, 2, 1)), Outcome::kAccepted);
}

}  // namespace
}  // namespace stoker::internal
