// Who delivers (coordinator/impl_overdue.cc): a worker whose heartbeats renew leases it never sends (stuck on a read,
// or a stolen worker key hoarding a rank's window) kept a job waiting for ever. It is judged against the job's other
// workers: its unit goes back once older than the lease TTL and four times the job's lease-to-commit time while
// another worker committed meanwhile, and three such strikes bench it for the job. With nobody delivering, nobody is
// struck.
#include "coordinator/impl_test_fixture.h"

namespace stoker::coordinator {
namespace {

class OverdueTest : public CoordinatorImplTest {
 protected:
  // A heartbeat from `worker` renewing `held`.
  void Beat(const std::string& worker, const std::vector<LeaseGrant>& held = {}) {
    WorkerHeartbeatRequest hb{worker};
    for (const LeaseGrant& g : held) hb.leases.push_back({g.job, g.rank, g.unit, g.attempt});
    ASSERT_TRUE(impl_->WorkerHeartbeat(hb).ok());
  }
};

TEST_F(OverdueTest, AWorkerHoldingUnitsWhileAnotherDeliversLosesThemAndIsBenched) {
  Register("c-a", 0, /*window=*/8);
  AddWorker("w-stuck");
  AddWorker("w-good");
  std::vector<uint64_t> received;
  for (uint32_t strike = 1; strike <= 3; ++strike) {
    std::vector<LeaseGrant> stuck = Lease("w-stuck", 0, 1);
    ASSERT_EQ(stuck.size(), 1u);
    EXPECT_EQ(stuck[0].first_batch, 0u) << "the unit it lost is leased first again";
    std::vector<LeaseGrant> good = Lease("w-good", 0, 1);
    ASSERT_EQ(good.size(), 1u);
    clock_.Advance(Millis(100));
    ASSERT_TRUE(Sent("w-good", good[0]).ok());
    received.push_back(good[0].first_batch);
    ASSERT_TRUE(Ack("c-a", 0, 0, 0, received).ok());  // batch 0 missing: the others are above the watermark
    ASSERT_EQ(impl_->Stats().units_committed, strike);
    clock_.Advance(options_.lease_ttl - Millis(150));  // its lease is lease_ttl - 50 ms old
    ASSERT_NO_FATAL_FAILURE(Beat("w-stuck", stuck));  // renewed: it never expires
    ASSERT_NO_FATAL_FAILURE(Beat("w-good"));
    impl_->Tick();
    EXPECT_EQ(impl_->Stats().releases.overdue, strike - 1) << "younger than the lease TTL";
    clock_.Advance(Millis(100));
    impl_->Tick();
    EXPECT_EQ(impl_->Stats().releases.overdue, strike);
    EXPECT_EQ(impl_->Stats().releases.lease_expired, 0u);
  }
  EXPECT_EQ(impl_->Stats().workers_benched, 1u);
  auto refused = impl_->RequestLease(9, {"w-stuck", "job", 0, 1, 0});
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << "benched";
  EXPECT_NE(impl_->StateJson().find("\"benched_workers\": [\"w-stuck\"]"), std::string::npos) << impl_->StateJson();
  std::vector<LeaseGrant> redone = Lease("w-good", 0, 1);
  ASSERT_EQ(redone.size(), 1u);
  EXPECT_EQ(redone[0].first_batch, 0u) << "the other worker makes what it held";

  for (int i = 0; i < 31; ++i) {  // the first bench is a minute long
    clock_.Advance(Millis(2000));
    ASSERT_NO_FATAL_FAILURE(Beat("w-stuck"));
    ASSERT_NO_FATAL_FAILURE(Beat("w-good", redone));
    ASSERT_TRUE(Ack("c-a", 0, 0, 0, received).ok());
  }
  EXPECT_TRUE(impl_->RequestLease(10, {"w-stuck", "job", 0, 1, 0}).ok()) << "the bench is over";
}

TEST_F(OverdueTest, WithNobodyDeliveringNobodyIsStruck) {
  Register("c-a", 0, 4);
  AddWorker("w-slow");
  AddWorker("w-idle");
  std::vector<LeaseGrant> slow = Lease("w-slow", 0, 2);
  ASSERT_EQ(slow.size(), 2u);
  for (int i = 0; i < 30; ++i) {  // a minute: slow storage for everyone is no one's fault
    clock_.Advance(Millis(2000));
    ASSERT_NO_FATAL_FAILURE(Beat("w-slow", slow));
    ASSERT_NO_FATAL_FAILURE(Beat("w-idle"));
    ASSERT_TRUE(Ack("c-a", 0, 0, 0).ok());
    impl_->Tick();
  }
  EXPECT_EQ(impl_->Stats().releases.overdue, 0u);
  EXPECT_EQ(impl_->Stats().units_leased, 2u);
  EXPECT_TRUE(Sent("w-slow", slow[0]).ok()) << "still its lease";
}

}  // namespace
}  // namespace stoker::coordinator
