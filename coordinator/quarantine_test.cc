// Quarantine reports (UnitDone): kept only from the worker holding the unit's current lease, only on the unit's
// samples, once per (epoch, sample), and at most CoordinatorOptions::max_quarantine_reports over all jobs.
#include <algorithm>

#include "coordinator/impl_test_fixture.h"

namespace stoker::coordinator {
namespace {

// Client c-a on rank 0, workers w-1 and w-2, and unit 0 leased to w-1.
class QuarantineTest : public CoordinatorImplTest {
 protected:
  void LeaseUnitZero() {
    Register("c-a", 0, 4);
    AddWorker("w-1");
    AddWorker("w-2");
    std::vector<LeaseGrant> g = Lease("w-1", 0, 1);
    ASSERT_EQ(g.size(), 1u);
    grant_ = g[0];
    // The samples unit 0 of rank 0 holds, as the plan lists them (what its worker reads and may report on).
    auto plan = Plan::Make(spec_, 100);
    ASSERT_TRUE(plan.ok());
    const Plan::UnitRange range = plan->Unit(grant_.unit);
    std::vector<PlannedSample> slots(spec_.batch_size);
    for (uint64_t b = range.first_batch; b < range.first_batch + range.count; ++b) {
      plan->BatchSamples(range.epoch, 0, b, slots);
      for (const PlannedSample& p : slots) in_unit_.push_back(p.sample_id);
    }
    ASSERT_GE(in_unit_.size(), 4u);
    for (uint64_t id = 0; id < 100 && outside_ == 100; ++id) {
      if (std::find(in_unit_.begin(), in_unit_.end(), id) == in_unit_.end()) outside_ = id;
    }
  }
  // The sorted ids of `ids`.
  static std::vector<uint64_t> Sorted(std::vector<uint64_t> ids) {
    std::sort(ids.begin(), ids.end());
    return ids;
  }
  Status Report(const std::string& worker, uint64_t attempt, std::vector<QuarantineReport> reports) {
    return impl_->UnitDone({worker, "job", 0, grant_.unit, attempt, UnitOutcome::kSent, 1, std::move(reports)});
  }
  Status Report(const std::string& worker, uint64_t sample) {
    return Report(worker, grant_.attempt, {{sample, "decode_error", "bad huffman"}});
  }

  LeaseGrant grant_;
  std::vector<uint64_t> in_unit_;  // the unit's samples, in plan order
  uint64_t outside_ = 100;         // a sample of the dataset the unit does not hold
};

// Regression: reports from an unregistered worker id were stored although the reply was ABORTED (a
// worker key grew the coordinator by 280 MB in 6 s). Only the holder of the unit's current lease is heard.
TEST_F(QuarantineTest, ReportsCountOnlyFromTheLeaseHolderOncePerSample) {
  ASSERT_NO_FATAL_FAILURE(LeaseUnitZero());
  const uint64_t a = in_unit_[0];
  EXPECT_EQ(Report("w-1", grant_.attempt + 99, {{a, "r", "d"}}).code(), StatusCode::kAborted);  // a stale attempt
  EXPECT_EQ(Report("w-2", a).code(), StatusCode::kAborted);                                     // not the holder
  EXPECT_EQ(Report("ghost", a).code(), StatusCode::kAborted);                                   // not registered
  EXPECT_TRUE(impl_->QuarantinedSamples("job", 0).empty());
  EXPECT_EQ(impl_->Stats().quarantine_refused_not_holder, 3u);
  EXPECT_TRUE(Report("w-1", a).ok());
  EXPECT_TRUE(Report("w-1", a).ok());  // a retry: the same sample is kept once
  EXPECT_EQ(impl_->QuarantinedSamples("job", 0), (std::vector<uint64_t>{a}));
  EXPECT_EQ(impl_->Stats().quarantined_samples, 1u);
}

// The holder reports on its unit's samples only: any other sample of the dataset (or past it) is counted, not
// kept, so one lease cannot spend the cap on samples other workers read.
TEST_F(QuarantineTest, AHolderIsHeardOnlyOnItsUnitsSamples) {
  ASSERT_NO_FATAL_FAILURE(LeaseUnitZero());
  ASSERT_LT(outside_, 100u);
  EXPECT_TRUE(Report("w-1", grant_.attempt,
                     {{outside_, "r", "d"}, {1000, "r", "d"}, {in_unit_[1], "r", "d"}}).ok());
  EXPECT_EQ(impl_->QuarantinedSamples("job", 0), (std::vector<uint64_t>{in_unit_[1]}));
  EXPECT_EQ(impl_->Stats().quarantine_refused_not_in_unit, 2u);
}

// More reports than the unit has samples are refused whole, before any is looked up: each lookup walks the unit
// under the coordinator's lock. One report past the unit's samples is enough to refuse the request.
TEST_F(QuarantineTest, MoreReportsThanTheUnitHasSamplesAreRefusedWhole) {
  ASSERT_NO_FATAL_FAILURE(LeaseUnitZero());
  std::vector<QuarantineReport> reports;
  for (uint64_t sample : in_unit_) reports.push_back({sample, "r", "d"});
  while (reports.size() <= in_unit_.size()) reports.push_back({in_unit_[0], "r", "d"});
  EXPECT_TRUE(Report("w-1", grant_.attempt, reports).ok());
  EXPECT_TRUE(impl_->QuarantinedSamples("job", 0).empty());
  EXPECT_EQ(impl_->Stats().quarantine_refused_not_in_unit, reports.size());
}

// The client's ack may commit a unit before its worker's UnitDone arrives: the holder's report still counts.
TEST_F(QuarantineTest, AReportAfterTheUnitCommittedCountsFromItsHolderOnly) {
  ASSERT_NO_FATAL_FAILURE(LeaseUnitZero());
  ASSERT_TRUE(Ack("c-a", 0, 0, 1).ok());  // batch 0 received: unit 0 commits
  EXPECT_EQ(Report("w-2", in_unit_[0]).code(), StatusCode::kAborted);
  // The lease is gone, but the report is its holder's ...
  EXPECT_EQ(Report("w-1", in_unit_[1]).code(), StatusCode::kAborted);
  EXPECT_EQ(Report("w-1", in_unit_[2]).code(), StatusCode::kAborted);  // ... once: the commit's record is spent
  EXPECT_EQ(impl_->QuarantinedSamples("job", 0), (std::vector<uint64_t>{in_unit_[1]}));
}

TEST_F(QuarantineTest, ReportsPastTheCapAreCountedNotKept) {
  options_.max_quarantine_reports = 2;
  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  ASSERT_NO_FATAL_FAILURE(LeaseUnitZero());
  EXPECT_TRUE(Report("w-1", grant_.attempt,
                     {{in_unit_[0], "r", std::string(10000, 'd')},
                      {in_unit_[1], "r", "d"},
                      {in_unit_[2], "r", "d"},
                      {in_unit_[3], "r", "d"}})
                  .ok());
  EXPECT_EQ(impl_->QuarantinedSamples("job", 0), Sorted({in_unit_[0], in_unit_[1]}));
  EXPECT_EQ(impl_->Stats().quarantine_refused_over_cap, 2u);
  const auto kept = impl_->QuarantineReports("job", 0);
  ASSERT_EQ(kept.count(in_unit_[0]), 1u);
  EXPECT_EQ(kept.at(in_unit_[0]).detail, std::string(CoordinatorImpl::kMaxQuarantineDetailBytes, 'd'));  // of 10,000
  EXPECT_EQ(kept.at(in_unit_[0]).reason, "r");
}

// Regression: the fields quarantine added to the job's runtime once shifted its positional initialisation, and
// leases carried fingerprint 0: every worker took its job for changed and reloaded it forever.
TEST_F(QuarantineTest, LeasesStillCarryTheJobsSpecFingerprint) {
  ASSERT_NO_FATAL_FAILURE(LeaseUnitZero());
  auto spec = impl_->GetJob("job");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(grant_.spec_fingerprint, SpecFingerprint(*spec));
}

// Issue 29: a lying worker's units came back to it after each ack timeout (69 of 74 batches took 90 s). A client
// of the job reports it in its heartbeats: its leases of the job go back at once, sent or not, its parked request
// is answered empty, and the job leases it nothing more. A made-up id costs nothing.
TEST_F(QuarantineTest, AWorkerAClientReportsGetsNothingMoreOfItsJob) {
  LeaseUnitZero();
  ASSERT_TRUE(Sent("w-1", grant_).ok());
  const LeaseGrant sent = grant_;
  const size_t more = Lease("w-1", 0, 100).size();  // whatever else the window allows
  auto parked = impl_->RequestLease(9, {"w-1", "job", 0, 5, 60000});
  ASSERT_TRUE(parked.ok() && !parked->has_value()) << "the window is full: the request waits";

  ClientHeartbeatRequest hb{"c-a", "job", 0, 0, 0, {}, 0};
  hb.rejected_workers = {"w-1", "w-made-up"};
  ASSERT_TRUE(impl_->ClientHeartbeat(hb).ok());
  ASSERT_TRUE(impl_->ClientHeartbeat(hb).ok()) << "reported again in every heartbeat: counted once";
  CoordinatorStats stats = impl_->Stats();
  EXPECT_EQ(stats.workers_reported, 1u);
  EXPECT_EQ(stats.releases.reported, 1 + more);
  std::vector<DeferredLeaseReply> answered = impl_->TakeDeferredReplies();
  ASSERT_EQ(answered.size(), 1u);
  EXPECT_EQ(answered[0].handle, 9u);
  EXPECT_TRUE(answered[0].response.leases.empty());

  auto refused = impl_->RequestLease(1, {"w-1", "job", 1, 1, 0});
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << "for any rank of the job";
  std::vector<LeaseGrant> redo = Lease("w-2", 0, 1);
  ASSERT_EQ(redo.size(), 1u);
  EXPECT_EQ(redo[0].unit, sent.unit) << "the reported worker's sent unit is made again first";
  EXPECT_GT(redo[0].attempt, sent.attempt);
  EXPECT_NE(impl_->StateJson().find("\"reported_workers\": [\"w-1\"]"), std::string::npos) << impl_->StateJson();

  hb.rejected_workers.assign(kMaxRejectedWorkers + 1, "w-2");
  EXPECT_EQ(impl_->ClientHeartbeat(hb).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(impl_->Stats().workers_reported, 1u);
}

}  // namespace
}  // namespace stoker::coordinator
