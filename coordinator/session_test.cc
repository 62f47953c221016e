// A rank's session is bound to the secret its client drew (auth/data_tickets.h SessionCheck), not only to the key
// it was taken with: another process holding the same client key knows the client id (/state lists it) but not the
// secret, so it can neither ack for the session, nor continue it, nor end it. Issue 29: a forged ack from the same
// key ended another trainer's job (96 samples lost). A worker id is bound the same way to the secret its worker
// process drew: every worker pod holds the same key, and /state lists the ids.
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

// Worker sessions: each request names its worker id and carries the secret the worker's registration did.
class WorkerSessionTest : public SessionTest {
 protected:
  void SetUp() override {
    SessionTest::SetUp();
    options_.data_ticket_master = std::string(32, 'm');
    impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  }
  StatusOr<RegisterWorkerResponse> Join(const std::string& secret) {
    return impl_->RegisterWorker({"w-1", "tcp://w-1:1", 2, "t", "", true, "", secret}, kPool);
  }
  Status WorkerBeat(const std::string& secret, std::vector<LeaseRef> leases = {}) {
    WorkerHeartbeatRequest hb{"w-1", std::move(leases)};
    hb.session = secret;
    return impl_->WorkerHeartbeat(hb, kPool).status();
  }
  std::string TicketKeyOf(const std::string& secret) {
    return WorkerTicketKey(options_.data_ticket_master, "w-1", secret.empty() ? "" : SessionCheck(secret));
  }
  const Caller kPool{"worker:pool"};
};

// Issue 29: with the one worker key every pod holds, a process re-registered the real workers' ids (from /state)
// and got their ticket keys, and could have kept their leases alive, handed them back or ended them. Now only the
// process that registered an id acts for it, until the id is lost; the next registrant gets another ticket key.
TEST_F(WorkerSessionTest, OnlyTheProcessThatRegisteredAWorkerIdActsForIt) {
  auto joined = Join(mine_);
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  EXPECT_EQ(joined->data_ticket_key, TicketKeyOf(mine_));
  EXPECT_NE(joined->data_ticket_key, TicketKeyOf("")) << "an unbound id's key";
  EXPECT_EQ(Join(theirs_).status().code(), StatusCode::kAlreadyExists) << "same key, same port, another process";
  EXPECT_EQ(Join("").status().code(), StatusCode::kAlreadyExists) << "and without a secret";
  EXPECT_EQ(Join(std::string(31, 'x')).status().code(), StatusCode::kInvalidArgument);
  auto again = Join(mine_);
  ASSERT_TRUE(again.ok()) << "its own retry";
  EXPECT_EQ(again->data_ticket_key, joined->data_ticket_key);

  ASSERT_TRUE(Claim(mine_).ok());
  EXPECT_EQ(impl_->RequestLease(1, {"w-1", "job", 0, 1, 0, theirs_}, kPool).status().code(),
            StatusCode::kPermissionDenied);
  auto leased = impl_->RequestLease(2, {"w-1", "job", 0, 1, 0, mine_}, kPool);
  ASSERT_TRUE(leased.ok() && leased->has_value() && (*leased)->leases.size() == 1u) << leased.status().ToString();
  const LeaseGrant g = (*leased)->leases[0];
  const LeaseRef held{"job", 0, g.unit, g.attempt};
  EXPECT_EQ(WorkerBeat(theirs_).code(), StatusCode::kPermissionDenied) << "a heartbeat keeping the id alive";
  UnitDoneRequest back{"w-1", "job", 0, g.unit, g.attempt, UnitOutcome::kAbandoned, 0, {}};
  back.session = theirs_;
  EXPECT_EQ(impl_->UnitDone(back, kPool).code(), StatusCode::kPermissionDenied) << "its lease handed back";
  back.outcome = UnitOutcome::kSent;
  back.batches_sent = g.batch_count;
  EXPECT_EQ(impl_->UnitDone(back, kPool).code(), StatusCode::kPermissionDenied) << "its lease reported sent";
  EXPECT_EQ(impl_->Deregister({"w-1", "", 0, theirs_}, kPool).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(impl_->Stats().worker_session_refused, 5u);
  EXPECT_EQ(impl_->Stats().workers, 1u);
  EXPECT_EQ(impl_->Stats().units_leased, 1u) << "the lease stayed the worker's, leased and unsent";
  ASSERT_TRUE(WorkerBeat(mine_, {held}).ok());
  const std::string state = impl_->StateJson();
  EXPECT_EQ(state.find(SessionCheck(mine_)), std::string::npos) << "/state shows the worker's check";
  EXPECT_EQ(state.find(mine_), std::string::npos);
  back.session = mine_;
  ASSERT_TRUE(impl_->UnitDone(back, kPool).ok()) << "its own report";

  // Silent for the lease TTL: lost. Then the id is anyone's of the key, under a new ticket key, and the unit the
  // first process sent waits for its ack held by no worker: the next process of the id reports nothing on it.
  clock_.Advance(options_.lease_ttl + Millis(1));
  impl_->Tick();
  EXPECT_EQ(impl_->Stats().workers, 0u);
  back.outcome = UnitOutcome::kAbandoned;
  EXPECT_EQ(impl_->UnitDone(back, kPool).code(), StatusCode::kAborted) << "a report from an id not registered";
  auto next = Join(theirs_);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_NE(next->data_ticket_key, joined->data_ticket_key) << "a ticket key handed out twice";
  EXPECT_EQ(WorkerBeat(mine_).code(), StatusCode::kPermissionDenied) << "the first process's secret is worth nothing";
  back.session = theirs_;
  EXPECT_EQ(impl_->UnitDone(back, kPool).code(), StatusCode::kAborted) << "the first process's unit";
  EXPECT_EQ(impl_->Stats().units_sent, 1u);
}

// An id restored from a journal older than worker sessions (or registered by an older worker) stays bound to its
// key only while it lives, as before: a registration carrying a secret is another process and must not take it
// over. Once lost, the id is registered afresh, bound.
TEST_F(WorkerSessionTest, AWorkersSessionIsBoundAcrossARestartAndAnOlderJournalsIsNeverTakenOver) {
  const std::string path = dir_.Join("journal");
  {
    std::unique_ptr<Journal> journal = RestartFrom(path);
    ASSERT_NE(journal, nullptr);
    ASSERT_TRUE(Join(mine_).ok());
    ASSERT_TRUE(journal->Sync().ok());
    impl_.reset();
  }
  std::unique_ptr<Journal> journal = RestartFrom(path);
  ASSERT_NE(journal, nullptr);
  EXPECT_EQ(WorkerBeat(theirs_).code(), StatusCode::kPermissionDenied) << "the journal keeps the check";
  EXPECT_TRUE(WorkerBeat(mine_).ok());
  auto again = Join(mine_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data_ticket_key, TicketKeyOf(mine_)) << "the same key after a restart";
  impl_.reset();
  journal.reset();

  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);  // a record of a version before worker sessions
  impl_->Restore(WorkerJoined{"w-1", "tcp://w-1:1", 2, "", "worker:pool", true});
  impl_->FinishRestore();
  EXPECT_TRUE(WorkerBeat(theirs_).ok()) << "not bound: as before";
  EXPECT_EQ(Join(mine_).status().code(), StatusCode::kAlreadyExists) << "a process with a secret took it over";
  auto old = Join("");
  ASSERT_TRUE(old.ok()) << "the older worker's own retry";
  EXPECT_EQ(old->data_ticket_key, TicketKeyOf(""));
  clock_.Advance(options_.lease_ttl + Millis(1));
  impl_->Tick();
  ASSERT_TRUE(Join(mine_).ok()) << "lost: registered afresh";
  EXPECT_EQ(WorkerBeat(theirs_).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(WorkerBeat(mine_).ok());
}

}  // namespace
}  // namespace stoker::coordinator
