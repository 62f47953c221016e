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
  Status forged = Heartbeat(theirs_, 10);
  EXPECT_EQ(forged.code(), StatusCode::kAborted) << "a forged ack from the same key";
  EXPECT_NE(forged.message().find("another session"), std::string::npos) << forged.ToString();
  EXPECT_EQ(Heartbeat("", 10).code(), StatusCode::kAborted);
  EXPECT_EQ(impl_->StateJson().find("\"consumed\": 10"), std::string::npos) << "the forged ack moved the rank";
  EXPECT_EQ(Claim(theirs_).status().code(), StatusCode::kAlreadyExists) << "the same id and window, not the secret";
  EXPECT_EQ(Claim(std::string(31, 'x')).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(Heartbeat(mine_, 2).ok());
  auto again = Claim(mine_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->start_batch, 0u) << "a retry of the client's own registration continues its session";
  EXPECT_EQ(impl_->Deregister({"c-a", "job", 0, theirs_}, Caller{"client:team"}).code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(Heartbeat(mine_, 2).ok()) << "still the client's";
  EXPECT_TRUE(impl_->Deregister({"c-a", "job", 0, mine_}, Caller{"client:team"}).ok());
  // Released: another process may take the rank at once, and the first one's secret is then worth nothing.
  auto taken = Claim(theirs_);
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(taken->start_batch, 2u) << "a new session, where the last one consumed to";
  EXPECT_EQ(Heartbeat(mine_, 2).code(), StatusCode::kAborted);
  EXPECT_TRUE(Heartbeat(theirs_, 2).ok());
}

// Workers send a lease's batches only to credits carrying its session's check (worker/impl.h): a lease carries the
// check, never the secret, and a session without a secret none.
TEST_F(SessionTest, ALeaseCarriesItsSessionsCheckNotItsSecret) {
  ASSERT_TRUE(Claim(mine_).ok());
  AddWorker("w-1");
  std::vector<LeaseGrant> grants = Lease("w-1", 0, 1);
  ASSERT_EQ(grants.size(), 1u);
  EXPECT_EQ(grants[0].session_check, SessionCheck(mine_));
  EXPECT_EQ(grants[0].client_identity, "client:team");
  EXPECT_EQ(impl_->StateJson().find(grants[0].session_check), std::string::npos) << "/state shows the check";
}

TEST_F(SessionTest, AClientWithoutASecretIsBoundToItsKeyOnlyAndCounted) {
  ASSERT_TRUE(Claim("").ok());
  AddWorker("w-1");
  std::vector<LeaseGrant> grants = Lease("w-1", 0, 1);
  ASSERT_EQ(grants.size(), 1u);
  EXPECT_TRUE(grants[0].session_check.empty());
  EXPECT_EQ(impl_->Stats().sessions_unbound, 1u);
  EXPECT_TRUE(Heartbeat(theirs_).ok()) << "unbound: any process of its key, as before sessions";
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
  EXPECT_EQ(Claim(theirs_).status().code(), StatusCode::kAlreadyExists)
      << "replayed, not heard yet: for a client timeout only its secret claims it";
  EXPECT_EQ(Heartbeat(theirs_).code(), StatusCode::kAborted) << "the journal keeps the secret's check";
  EXPECT_TRUE(Heartbeat(mine_).ok());
  ASSERT_TRUE(journal->Sync().ok());
  impl_.reset();
  journal = RestartFrom(path);
  ASSERT_NE(journal, nullptr);
  clock_.Advance(options_.client_timeout + Millis(1));
  EXPECT_TRUE(Claim(theirs_).ok()) << "its client silent for the client timeout: the rank is free";
  impl_.reset();
  journal.reset();

  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);  // a record of a version before sessions
  impl_->Restore(JobCreated{spec_, 100});
  impl_->Restore(RankSessionStarted{"job", 0, "c-a", 0, 4, "client:team"});
  impl_->FinishRestore();
  EXPECT_TRUE(Heartbeat(theirs_).ok()) << "not bound: as before";
}

}  // namespace
}  // namespace stoker::coordinator
