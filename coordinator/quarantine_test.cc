// Quarantine reports (UnitDone): kept only from the worker holding the unit's current lease, once per (epoch,
// sample), and at most CoordinatorOptions::max_quarantine_reports over all jobs.
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
  }
  Status Report(const std::string& worker, uint64_t attempt, std::vector<QuarantineReport> reports) {
    return impl_->UnitDone({worker, "job", 0, grant_.unit, attempt, UnitOutcome::kSent, 1, std::move(reports)});
  }
  Status Report(const std::string& worker, uint64_t sample) {
    return Report(worker, grant_.attempt, {{sample, "decode_error", "bad huffman"}});
  }

  LeaseGrant grant_;
};

// Regression (issue 29): reports from an unregistered worker id were stored although the reply was ABORTED (a
// worker key grew the coordinator by 280 MB in 6 s). Only the holder of the unit's current lease is heard.
TEST_F(QuarantineTest, ReportsCountOnlyFromTheLeaseHolderOncePerSample) {
  ASSERT_NO_FATAL_FAILURE(LeaseUnitZero());
  EXPECT_EQ(Report("w-1", grant_.attempt + 99, {{17, "r", "d"}}).code(), StatusCode::kAborted);  // a stale attempt
  EXPECT_EQ(Report("w-2", 18).code(), StatusCode::kAborted);                                      // not the holder
  EXPECT_EQ(Report("ghost", 19).code(), StatusCode::kAborted);                                    // not registered
  EXPECT_TRUE(impl_->QuarantinedSamples("job", 0).empty());
  EXPECT_EQ(impl_->Stats().quarantine_refused_not_holder, 3u);
  EXPECT_TRUE(Report("w-1", 17).ok());
  EXPECT_TRUE(Report("w-1", 17).ok());  // a retry: the same sample is kept once
  EXPECT_EQ(impl_->QuarantinedSamples("job", 0), (std::vector<uint64_t>{17}));
  EXPECT_EQ(impl_->Stats().quarantined_samples, 1u);
}

// The client's ack may commit a unit before its worker's UnitDone arrives: the holder's report still counts.
TEST_F(QuarantineTest, AReportAfterTheUnitCommittedCountsFromItsHolderOnly) {
  ASSERT_NO_FATAL_FAILURE(LeaseUnitZero());
  ASSERT_TRUE(Ack("c-a", 0, 0, 1).ok());  // batch 0 received: unit 0 commits
  EXPECT_EQ(Report("w-2", 18).code(), StatusCode::kAborted);
  EXPECT_EQ(Report("w-1", 17).code(), StatusCode::kAborted);  // the lease is gone, but the report is its holder's
  EXPECT_EQ(Report("w-1", 16).code(), StatusCode::kAborted);  // ... once: the commit's record is spent
  EXPECT_EQ(impl_->QuarantinedSamples("job", 0), (std::vector<uint64_t>{17}));
}

TEST_F(QuarantineTest, ReportsPastTheCapAreCountedNotKept) {
  options_.max_quarantine_reports = 2;
  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  ASSERT_NO_FATAL_FAILURE(LeaseUnitZero());
  EXPECT_TRUE(Report("w-1", grant_.attempt,
                     {{1, "r", std::string(10000, 'd')}, {2, "r", "d"}, {3, "r", "d"}, {4, "r", "d"}})
                  .ok());
  EXPECT_EQ(impl_->QuarantinedSamples("job", 0), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(impl_->Stats().quarantine_refused_over_cap, 2u);
}

// Regression: the fields quarantine added to the job's runtime once shifted its positional initialisation, and
// leases carried fingerprint 0: every worker took its job for changed and reloaded it forever.
TEST_F(QuarantineTest, LeasesStillCarryTheJobsSpecFingerprint) {
  ASSERT_NO_FATAL_FAILURE(LeaseUnitZero());
  auto spec = impl_->GetJob("job");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(grant_.spec_fingerprint, SpecFingerprint(*spec));
}

}  // namespace
}  // namespace stoker::coordinator
