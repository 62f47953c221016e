// Who gets the work, on a FakeClock: a worker holds at most its queue of leased, unsent batches; room in a window
// goes to the least-loaded worker waiting for it; a worker that frees a place gets the rank furthest behind.
#include <gtest/gtest.h>

#include "coordinator/impl_test_fixture.h"

namespace stoker::coordinator {
namespace {

class SchedulingTest : public CoordinatorImplTest {
 protected:
  void SetUp() override {
    CoordinatorImplTest::SetUp();
    options_.worker_queue_batches = 0;  // the default: two batches for these two-thread workers of batch 10
    impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  }
  // A lease request that may wait; its grants now, or nullopt when parked.
  std::optional<std::vector<LeaseGrant>> Ask(RequestHandle handle, const std::string& worker, uint32_t rank,
                                             uint32_t max) {
    auto r = impl_->RequestLease(handle, {worker, "job", rank, max, 1000});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok() || !r->has_value()) return std::nullopt;
    return (*r)->leases;
  }
  // The one parked request the last call woke (a failure if it woke none or several).
  DeferredLeaseReply OnlyWoken() {
    std::vector<DeferredLeaseReply> woken = impl_->TakeDeferredReplies();
    EXPECT_EQ(woken.size(), 1u);
    return woken.empty() ? DeferredLeaseReply{} : woken[0];
  }
};

TEST_F(SchedulingTest, AWorkerHoldsAtMostItsQueueOfUnsentBatches) {
  Register("c-a", 0, /*window=*/8);
  AddWorker("w-1");
  auto first = Ask(1, "w-1", 0, 10);
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->size(), 2u) << "the window has room for 8, the worker's queue for 2";
  EXPECT_FALSE(Ask(2, "w-1", 0, 10).has_value()) << "a full queue waits, parked";
  // One batch leaves the worker: its place is filled at once from the parked request.
  ASSERT_TRUE(Sent("w-1", (*first)[0]).ok());
  DeferredLeaseReply woken = OnlyWoken();
  EXPECT_EQ(woken.handle, 2u);
  ASSERT_EQ(woken.response.leases.size(), 1u);
  EXPECT_EQ(woken.response.leases[0].first_batch, 2u);
}

TEST_F(SchedulingTest, AnExplicitQueueOverridesTheDefaultButNeverSplitsAUnit) {
  options_.worker_queue_batches = 5;
  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  Register("c-a", 0, 8);
  AddWorker("w-1");
  EXPECT_EQ(Lease("w-1", 0, 10).size(), 5u);
}

TEST_F(SchedulingTest, RoomGoesToTheLeastLoadedWorkerNotTheOldestRequest) {
  Register("c-a", 0, /*window=*/3);
  AddWorker("w-1");
  AddWorker("w-2");
  auto busy = Ask(1, "w-1", 0, 10);  // w-1 takes batches 0 and 1 (its queue of 2)
  ASSERT_TRUE(busy.has_value());
  ASSERT_EQ(busy->size(), 2u);
  auto other = Ask(2, "w-2", 0, 10);  // w-2 takes batch 2: the window is full
  ASSERT_TRUE(other.has_value());
  ASSERT_EQ(other->size(), 1u);
  for (const LeaseGrant& g : *busy) ASSERT_TRUE(Sent("w-1", g).ok());  // w-1 is empty now
  EXPECT_FALSE(Ask(3, "w-2", 0, 10).has_value());                     // w-2 (1 unsent) asks first...
  EXPECT_FALSE(Ask(4, "w-1", 0, 10).has_value());                     // ...then w-1 (none unsent)
  ASSERT_TRUE(Ack("c-a", 0, /*consumed=*/1, /*received=*/2).ok());   // one slot opens
  EXPECT_EQ(OnlyWoken().handle, 4u) << "the idle worker gets the batch, not the one with a batch queued";
}

TEST_F(SchedulingTest, AFreedWorkerGetsTheRankFurthestBehind) {
  Register("c-a", 0, /*window=*/6);
  Register("c-b", 1, /*window=*/6);
  AddWorker("w-1");
  AddWorker("w-2");
  // Rank 0 is ahead: w-2 leases two of its batches; w-1 leases one batch of each rank.
  ASSERT_EQ(Lease("w-2", 0, 2).size(), 2u);
  auto a = Ask(1, "w-1", 0, 1);
  auto b = Ask(2, "w-1", 1, 1);
  ASSERT_TRUE(a.has_value() && b.has_value());
  ASSERT_EQ(a->size(), 1u);
  ASSERT_EQ(b->size(), 1u);
  EXPECT_EQ((*a)[0].first_batch, 2u);
  EXPECT_EQ((*b)[0].first_batch, 0u);
  EXPECT_FALSE(Ask(3, "w-1", 0, 1).has_value());  // w-1's queue is full: it waits on both ranks
  EXPECT_FALSE(Ask(4, "w-1", 1, 1).has_value());
  ASSERT_TRUE(Sent("w-1", (*a)[0]).ok());  // a place frees: rank 1 (next batch 1) is behind rank 0 (next 3)
  DeferredLeaseReply woken = OnlyWoken();
  EXPECT_EQ(woken.handle, 4u);
  ASSERT_EQ(woken.response.leases.size(), 1u);
  EXPECT_EQ(woken.response.leases[0].rank, 1u);
}

TEST_F(SchedulingTest, ALostOrRevokedLeaseLeavesTheWorkersQueue) {
  Register("c-a", 0, /*window=*/8);
  AddWorker("w-1");
  ASSERT_EQ(Lease("w-1", 0, 10).size(), 2u);
  EXPECT_TRUE(Lease("w-1", 0, 10).empty());
  // The client restarts: its session's leases are void, and the worker's queue with them.
  ASSERT_TRUE(impl_->Deregister({"c-a", "job", 0}).ok());
  Register("c-a2", 0, 8);
  EXPECT_EQ(Lease("w-1", 0, 10).size(), 2u);
}

}  // namespace
}  // namespace stoker::coordinator
