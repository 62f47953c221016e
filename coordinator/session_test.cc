// A rank's session is bound to the secret its client drew (auth/data_tickets.h SessionCheck), not only to the key
// it was taken with: another process holding the same client key knows the client id (/state lists it) but not the
// secret, so it can neither ack for the session, nor continue it, nor end it. Issue 29: a forged ack from the same
// key ended another trainer's job (96 samples lost).
#include "auth/data_tickets.h"
#include "coordinator/impl_test_fixture.h"

namespace stoker::coordinator {
namespace {

class SessionTest : public CoordinatorImplTest {
 protected:
  StatusOr<RegisterClientResponse> Claim(const std::string& secret, uint32_t window = 4) {
    RegisterClientRequest request{"c-a", "job", 0, spec_, window};
    request.session = secret;
    return impl_->RegisterClient(request, Caller{"client:team"});
  }
  Status Heartbeat(const std::string& secret, uint64_t consumed = 0) {
    ClientHeartbeatRequest hb{"c-a", "job", 0, consumed, consumed, {}, 0};
    hb.session = secret;
    return impl_->ClientHeartbeat(hb, Caller{"client:team"}).status();
  }
  const std::string mine_ = NewSessionSecret(), theirs_ = NewSessionSecret();
};

TEST_F(SessionTest, OnlyTheSessionsSecretAcksContinuesOrEndsIt) {
  ASSERT_TRUE(Claim(mine_).ok());
  EXPECT_TRUE(Heartbeat(mine_).ok());
  EXPECT_EQ(Heartbeat(theirs_, 10).code(), StatusCode::kAborted) << "a forged ack from the same key";
  EXPECT_EQ(Heartbeat("", 10).code(), StatusCode::kAborted);
  EXPECT_EQ(impl_->Stats().job_stats.at(0).units_committed, 0u);
  EXPECT_EQ(Claim(theirs_).status().code(), StatusCode::kAlreadyExists) << "the same id and window, not the secret";
  EXPECT_TRUE(Claim(mine_).ok()) << "a retry of the client's own registration continues its session";
  EXPECT_EQ(impl_->Deregister({"c-a", "job", 0, theirs_}, Caller{"client:team"}).code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(Heartbeat(mine_).ok()) << "still the client's";
  EXPECT_TRUE(impl_->Deregister({"c-a", "job", 0, mine_}, Caller{"client:team"}).ok());
  // Released: another process may take the rank, and the first one's secret is then worth nothing.
  ASSERT_TRUE(Claim(theirs_).ok());
  EXPECT_EQ(Heartbeat(mine_).code(), StatusCode::kAborted);
  EXPECT_TRUE(Heartbeat(theirs_).ok());
}

TEST_F(SessionTest, ASessionIsBoundAcrossARestartAndAnOlderJournalsIsNot) {
  const std::string path = dir_.Join("journal");
  {
    std::unique_ptr<Journal> journal = RestartFrom(path);  // a fresh one: nothing to replay
    ASSERT_NE(journal, nullptr);
    ASSERT_TRUE(Claim(mine_).ok());
    ASSERT_TRUE(journal->Sync().ok());
    impl_.reset();
  }
  std::unique_ptr<Journal> journal = RestartFrom(path);
  ASSERT_NE(journal, nullptr);
  EXPECT_EQ(Heartbeat(theirs_).code(), StatusCode::kAborted) << "the journal keeps the secret's check";
  EXPECT_TRUE(Heartbeat(mine_).ok());

  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);  // a record of a version before sessions
  impl_->Restore(JobCreated{spec_, 100});
  impl_->Restore(RankSessionStarted{"job", 0, "c-a", 0, 4, "client:team"});
  impl_->FinishRestore();
  EXPECT_TRUE(Heartbeat(theirs_).ok()) << "not bound: as before";
}

}  // namespace
}  // namespace stoker::coordinator
