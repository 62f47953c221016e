// PrefetchWindow on its own: every outcome of an insertion, the positions an ack reports, releases in any order,
// putting a batch back, and only the attempts the coordinator lists being delivered.
#include "client/src/window.h"

#include <gtest/gtest.h>

namespace stoker::client {
namespace {

using Outcome = PrefetchWindow::Outcome;

std::unique_ptr<ReceivedBatch> Batch(uint64_t g, uint64_t unit, uint64_t attempt) {
  auto b = std::make_unique<ReceivedBatch>();
  b->global = g;
  b->unit = unit;
  b->attempt = attempt;
  return b;
}

class PrefetchWindowTest : public ::testing::Test {
 protected:
  // A job of 16 batches per rank, one batch per unit (unless `per_unit`).
  Plan MakePlan(uint32_t per_unit = 1) {
    JobSpec spec;
    spec.name = "j";
    spec.manifest_path = "/m.stoker";
    spec.batch_size = 1;
    spec.epochs = 1;
    spec.batches_per_unit = per_unit;
    auto plan = Plan::Make(spec, 16);
    EXPECT_TRUE(plan.ok());
    return *plan;
  }

  // The coordinator lists units [first, end) under `attempt`, in the reply to heartbeat `heartbeat`.
  PrefetchWindow::Confirmed List(PrefetchWindow& w, uint64_t first, uint64_t end, uint64_t attempt,
                                 uint64_t heartbeat = 1) {
    std::vector<LeaseRef> leases;
    for (uint64_t u = first; u < end; ++u) leases.push_back({"j", 0, u, attempt});
    return w.NoteLeases(leases, plan_, heartbeat);
  }

  // Lists every unit under attempt 1 and inserts batches [0, n), each accepted.
  void ListAllAndInsert(PrefetchWindow& w, uint64_t n) {
    List(w, 0, 16, 1);
    for (uint64_t g = 0; g < n; ++g) ASSERT_EQ(w.Insert(Batch(g, g, 1), 1), Outcome::kAccepted);
  }

  Plan plan_ = MakePlan();
};

TEST_F(PrefetchWindowTest, AcceptsEachListedBatchOnceInsideTheWindow) {
  PrefetchWindow w(3, /*start=*/10);
  List(w, 10, 16, 1);
  EXPECT_EQ(w.Insert(Batch(12, 12, 1), 1), Outcome::kAccepted);  // out of order is fine
  EXPECT_EQ(w.Insert(Batch(12, 12, 1), 1), Outcome::kDuplicate);
  EXPECT_EQ(w.Insert(Batch(13, 13, 1), 1), Outcome::kOutOfWindow);  // consumed + 3 = 13
  EXPECT_EQ(w.Insert(Batch(9, 9, 1), 1), Outcome::kDuplicate);      // before this session's start
  EXPECT_EQ(w.received_watermark(), 10u);
  EXPECT_EQ(w.received_above(), std::set<uint64_t>({12}));
  EXPECT_EQ(w.Insert(Batch(10, 10, 1), 1), Outcome::kAccepted);
  EXPECT_EQ(w.Insert(Batch(11, 11, 1), 1), Outcome::kAccepted);
  EXPECT_EQ(w.received_watermark(), 13u);  // 10, 11 and the 12 above all count now
  EXPECT_TRUE(w.received_above().empty());
  EXPECT_EQ(w.filled(), 3u);
}

TEST_F(PrefetchWindowTest, HandsOutInOrderAndMovesConsumedPastReleasedBatchesOnly) {
  PrefetchWindow w(3, 0);
  ListAllAndInsert(w, 3);
  auto b0 = w.TakeNext();
  auto b1 = w.TakeNext();
  EXPECT_EQ(b0->global, 0u);
  EXPECT_EQ(b1->global, 1u);
  EXPECT_EQ(w.next(), 2u);
  EXPECT_EQ(w.Insert(Batch(0, 0, 1), 1), Outcome::kDuplicate);  // delivered already
  EXPECT_TRUE(w.Release(1));                                     // out of order: consumed stays at 0
  EXPECT_EQ(w.consumed(), 0u);
  EXPECT_FALSE(w.Release(1));  // twice
  EXPECT_EQ(w.Insert(Batch(3, 3, 1), 1), Outcome::kOutOfWindow);  // slot 0 still out with the application
  EXPECT_TRUE(w.Release(0));
  EXPECT_EQ(w.consumed(), 2u);
  EXPECT_EQ(w.Insert(Batch(3, 3, 1), 1), Outcome::kAccepted);
  EXPECT_EQ(w.Insert(Batch(5, 5, 1), 1), Outcome::kOutOfWindow);
}

TEST_F(PrefetchWindowTest, PutBackReturnsOnlyTheLastBatchHandedOut) {
  PrefetchWindow w(4, 0);
  ListAllAndInsert(w, 2);
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

TEST_F(PrefetchWindowTest, OnlyTheAttemptTheCoordinatorListsIsDelivered) {
  plan_ = MakePlan(/*per_unit=*/2);  // unit 1 = batches 2 and 3
  PrefetchWindow w(8, 0);
  std::vector<LeaseRef> leases = {{"j", 0, 1, 5}};
  w.NoteLeases(leases, plan_, 1);
  EXPECT_EQ(w.Insert(Batch(2, 1, 4), 1), Outcome::kStaleAttempt);  // older than listed
  EXPECT_EQ(w.Insert(Batch(2, 1, 5), 1), Outcome::kAccepted);
  // Newer than listed: the lease may have been granted after the last reply, so the batch waits for the next one.
  EXPECT_EQ(w.Insert(Batch(3, 1, 6), 1), Outcome::kUnconfirmed);
  EXPECT_FALSE(w.Holds(3));
  EXPECT_EQ(w.received_watermark(), 0u);  // unconfirmed batches are not acknowledged
  // A unit the coordinator did not list: also waits.
  EXPECT_EQ(w.Insert(Batch(0, 0, 1), 1), Outcome::kUnconfirmed);
  EXPECT_TRUE(w.has_unconfirmed());
  // The reply to a heartbeat that left before they arrived decides nothing about them.
  EXPECT_EQ(w.NoteLeases(leases, plan_, 1).accepted + w.NoteLeases(leases, plan_, 1).unlisted, 0u);
  // The reply to the next heartbeat lists unit 1 under attempt 6, and nothing for unit 0: one confirmed, one gone.
  PrefetchWindow::Confirmed c = w.NoteLeases({{"j", 0, 1, 6}}, plan_, 2);
  EXPECT_EQ(c.accepted, 1u);
  EXPECT_EQ(c.unlisted, 1u);
  EXPECT_TRUE(w.Holds(3));
  EXPECT_FALSE(w.Holds(0));
  EXPECT_FALSE(w.has_unconfirmed());
  EXPECT_EQ(w.received_above(), std::set<uint64_t>({2, 3}));
  // Its slot is free again: the batch, when a granted lease makes it, is taken.
  w.NoteLeases({{"j", 0, 0, 7}}, plan_, 3);
  EXPECT_EQ(w.Insert(Batch(0, 0, 7), 3), Outcome::kAccepted);
  EXPECT_EQ(w.received_watermark(), 1u);  // batch 1 (unit 0's second) still missing
  EXPECT_EQ(w.received_above(), std::set<uint64_t>({2, 3}));
}

TEST_F(PrefetchWindowTest, AnUnconfirmedBatchListedUnderAnotherAttemptIsDropped) {
  PrefetchWindow w(4, 0);
  EXPECT_EQ(w.Insert(Batch(1, 1, 3), 0), Outcome::kUnconfirmed);
  PrefetchWindow::Confirmed c = List(w, 0, 4, /*attempt=*/4, /*heartbeat=*/1);
  EXPECT_EQ(c.stale, 1u);
  EXPECT_FALSE(w.Holds(1));
  EXPECT_EQ(w.Insert(Batch(1, 1, 4), 1), Outcome::kAccepted);  // the re-lease's copy
}

TEST_F(PrefetchWindowTest, ANewCoordinatorSessionForgetsTheAttemptsOfTheOldOne) {
  PrefetchWindow w(8, 0);
  List(w, 0, 8, 9);
  w.ForgetAttempts();  // the coordinator lost its journal: attempts start again low
  EXPECT_EQ(w.Insert(Batch(4, 4, 1), 1), Outcome::kUnconfirmed);
  EXPECT_EQ(List(w, 0, 8, 1, 2).accepted, 1u);
  EXPECT_TRUE(w.Holds(4));
}

}  // namespace
}  // namespace stoker::client
