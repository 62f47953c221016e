// Who delivers (coordinator/impl_overdue.cc): a worker whose heartbeats renew leases it never sends (stuck on a read,
// or a stolen worker key hoarding a rank's window) kept a job waiting for ever. It is judged against the rank's other
// workers: its unit goes back once older than the lease TTL and four times the job's lease-to-commit time while
// another worker delivered a unit of the rank leased after it (or of another rank, when the rank's client waits for
// this unit alone), and three such spells bench it for the job. With nobody delivering, or only work leased before
// it, or only on another rank, nobody is struck.
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
  // Both ranks' clients (c-a, c-b; windows of 8) and two workers.
  void TwoRanksTwoWorkers(const std::string& first, const std::string& second) {
    Register("c-a", 0, /*window=*/8);
    Register("c-b", 1, /*window=*/8);
    AddWorker(first);
    AddWorker(second);
  }
  // `n` units of rank 0 leased to `held_by`, then one leased to `by` a millisecond later, sent `after` that and
  // taken by rank 0's client (`received` gathers what it took): work leased after `held_by`'s and delivered first.
  // Returns `held_by`'s leases.
  std::vector<LeaseGrant> Overtaken(const std::string& held_by, uint32_t n, const std::string& by,
                                    std::vector<uint64_t>& received, Duration after = Millis(0)) {
    std::vector<LeaseGrant> held = Lease(held_by, 0, n);
    EXPECT_EQ(held.size(), n);
    clock_.Advance(Millis(1));
    std::vector<LeaseGrant> other = Lease(by, 0, 1);
    if (other.size() != 1) {
      ADD_FAILURE() << by << " was leased " << other.size() << " units, not 1";
      return held;
    }
    clock_.Advance(after);
    EXPECT_TRUE(Sent(by, other[0]).ok());
    received.push_back(other[0].first_batch);
    EXPECT_TRUE(Ack("c-a", 0, 0, 0, received).ok());
    return held;
  }
};

TEST_F(OverdueTest, AWorkerHoldingUnitsWhileAnotherDeliversLosesThemAndIsBenched) {
  Register("c-a", 0, /*window=*/8);
  AddWorker("w-stuck");
  AddWorker("w-good");
  std::vector<uint64_t> received;
  for (uint32_t strike = 1; strike <= 3; ++strike) {
    // (batch 0 stays missing: the others are above the watermark)
    std::vector<LeaseGrant> stuck = Overtaken("w-stuck", 1, "w-good", received, Millis(100));
    ASSERT_EQ(stuck.size(), 1u);
    EXPECT_EQ(stuck[0].first_batch, 0u) << "the unit it lost is leased first again";
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

// A worker whose units all go back in one tick has failed once: one strike, never a bench from one spell.
TEST_F(OverdueTest, UnitsGoingBackTogetherAreOneStrike) {
  Register("c-a", 0, /*window=*/8);
  AddWorker("w-stuck");
  AddWorker("w-good");
  std::vector<uint64_t> received;
  std::vector<LeaseGrant> stuck = Overtaken("w-stuck", 4, "w-good", received);
  ASSERT_EQ(stuck.size(), 4u);
  ASSERT_EQ(impl_->Stats().units_committed, 1u);
  clock_.Advance(options_.lease_ttl - Millis(100));
  ASSERT_NO_FATAL_FAILURE(Beat("w-stuck", stuck));
  ASSERT_NO_FATAL_FAILURE(Beat("w-good"));
  clock_.Advance(Millis(200));
  impl_->Tick();
  EXPECT_EQ(impl_->Stats().releases.overdue, 4u);
  EXPECT_EQ(impl_->Stats().workers_benched, 0u) << "four units, one spell";
  EXPECT_TRUE(impl_->RequestLease(9, {"w-stuck", "job", 0, 1, 0}).ok());
}

// Evidence is work leased after the unit and delivered on the same rank: commits of units leased before it (made
// before a stall that holds every worker) or of another rank's (whose client may be the fast one) are none.
TEST_F(OverdueTest, CommitsOfEarlierLeasesOrOfAnotherRankAreNoEvidence) {
  TwoRanksTwoWorkers("w-slow", "w-other");
  std::vector<LeaseGrant> earlier = Lease("w-other", 0, 1);
  ASSERT_EQ(earlier.size(), 1u);
  clock_.Advance(Millis(10));
  std::vector<LeaseGrant> slow = Lease("w-slow", 0, 2);
  ASSERT_EQ(slow.size(), 2u);
  clock_.Advance(Millis(10));
  std::vector<LeaseGrant> elsewhere = Lease("w-other", 1, 1);
  ASSERT_EQ(elsewhere.size(), 1u);
  for (const LeaseGrant& g : {earlier[0], elsewhere[0]}) ASSERT_TRUE(Sent("w-other", g).ok());
  ASSERT_TRUE(Ack("c-a", 0, 0, 1).ok());
  ASSERT_TRUE(Ack("c-b", 1, 0, 1).ok());
  ASSERT_EQ(impl_->Stats().units_committed, 2u);
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(Millis(1000));
    ASSERT_NO_FATAL_FAILURE(Beat("w-slow", slow));
    ASSERT_NO_FATAL_FAILURE(Beat("w-other"));
    ASSERT_TRUE(Ack("c-a", 0, 0, 1).ok());
    ASSERT_TRUE(Ack("c-b", 1, 0, 1).ok());
    impl_->Tick();
  }
  EXPECT_EQ(impl_->Stats().releases.overdue, 0u);
  EXPECT_TRUE(Sent("w-slow", slow[0]).ok()) << "still its lease";
}

// A unit that waits for its ack is judged by work leased after it was sent: a client that took the other worker's
// unit and then stopped taking batches says nothing against the worker that sent to it last, however often.
TEST_F(OverdueTest, AnUnacknowledgedUnitIsJudgedFromWhenItWasSent) {
  Register("c-a", 0, /*window=*/8);
  AddWorker("w-last");
  AddWorker("w-other");
  std::vector<uint64_t> received;
  for (int round = 0; round < 3; ++round) {
    // w-other's unit is leased after w-last's and delivered before w-last's is sent.
    std::vector<LeaseGrant> last = Overtaken("w-last", 1, "w-other", received);
    ASSERT_EQ(last.size(), 1u);
    clock_.Advance(Millis(10));
    ASSERT_TRUE(Sent("w-last", last[0]).ok());
    for (int i = 0; i < 6; ++i) {  // the client takes nothing more; the ack timeout is 5 s
      clock_.Advance(Millis(1000));
      ASSERT_NO_FATAL_FAILURE(Beat("w-last"));
      ASSERT_NO_FATAL_FAILURE(Beat("w-other"));
      ASSERT_TRUE(Ack("c-a", 0, 0, 0, received).ok());
      impl_->Tick();
    }
    ASSERT_EQ(impl_->Stats().releases.unacked, static_cast<uint64_t>(round + 1));
  }
  EXPECT_EQ(impl_->Stats().workers_benched, 0u) << "struck for a client that stopped";
}

// A rank's last units have nothing of the rank leased after them to overtake them (a fault test's job waited for
// ever at its end on two units a stuck worker held). A unit the rank's client waits for alone (it has consumed every
// batch it received, and the first it lacks is in the unit) goes back on another rank's evidence instead.
TEST_F(OverdueTest, AUnitItsClientWaitsForAloneGoesBackOnAnotherRanksEvidence) {
  TwoRanksTwoWorkers("w-stuck", "w-good");
  std::vector<LeaseGrant> stuck = Lease("w-stuck", 0, 1);
  ASSERT_EQ(stuck.size(), 1u);
  ASSERT_EQ(stuck[0].first_batch, 0u);  // rank 0's client waits for it: it has nothing yet
  clock_.Advance(Millis(1));
  std::vector<LeaseGrant> elsewhere = Lease("w-good", 1, 1);
  ASSERT_EQ(elsewhere.size(), 1u);
  ASSERT_TRUE(Sent("w-good", elsewhere[0]).ok());
  ASSERT_TRUE(Ack("c-b", 1, 1, 1).ok());
  ASSERT_EQ(impl_->Stats().units_committed, 1u);
  for (const Duration step : {Duration(options_.lease_ttl - Millis(20)), Duration(Millis(40))}) {  // 19 ms short, then over
    clock_.Advance(step);
    ASSERT_NO_FATAL_FAILURE(Beat("w-stuck", stuck));
    ASSERT_NO_FATAL_FAILURE(Beat("w-good"));
    ASSERT_TRUE(Ack("c-a", 0, 0, 0).ok());
    ASSERT_TRUE(Ack("c-b", 1, 1, 1).ok());
    impl_->Tick();
    EXPECT_EQ(impl_->Stats().releases.overdue, step == Duration(Millis(40)) ? 1u : 0u);
  }
  EXPECT_EQ(impl_->Stats().workers_benched, 0u);
  std::vector<LeaseGrant> redone = Lease("w-good", 0, 1);
  ASSERT_EQ(redone.size(), 1u);
  EXPECT_EQ(redone[0].first_batch, 0u) << "the other worker makes what the stuck one held";
}

}  // namespace
}  // namespace stoker::coordinator
