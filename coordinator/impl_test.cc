// CoordinatorImpl under a FakeClock: leasing within the client window, parking, re-leasing on every kind of loss,
// commits, fencing, and the registration errors a user can hit.
#include "coordinator/impl.h"

#include <gtest/gtest.h>

#include "coordinator/impl_test_fixture.h"

#include "dataset/checkpoint.h"
#include "auth/data_tickets.h"
#include "dataset/manifest.h"
#include "coordinator/journal.h"
#include "tests/support/temp_dir.h"

namespace stoker::coordinator {
namespace {

TEST_F(CoordinatorImplTest, RegistrationCreatesTheJobAndRefusesConflicts) {
  RegisterClientResponse r = Register("c-a", 0);
  EXPECT_EQ(r.steps_per_epoch, 5u);  // 100 samples / (2 ranks x 10)
  EXPECT_EQ(r.start_batch, 0u);
  EXPECT_NE(r.spec.manifest_fingerprint, 0u);

  auto held = impl_->RegisterClient({"c-b", "job", 0, spec_, 4});
  EXPECT_EQ(held.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(held.status().message().find("held by a live client (c-a"), std::string::npos) << held.status().message();
  EXPECT_TRUE(impl_->RegisterClient({"c-a", "job", 0, spec_, 4}).ok());  // a retry by the holder is fine

  auto unknown = impl_->RegisterClient({"c-b", "other", 0, std::nullopt, 4});
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("unknown job 'other'"), std::string::npos);
  EXPECT_TRUE(impl_->RegisterClient({"c-b", "job", 1, std::nullopt, 4}).ok());  // attach without a spec

  JobSpec different = spec_;
  different.batch_size = 20;
  auto mismatch = impl_->RegisterClient({"c-c", "job", 1, different, 4});
  EXPECT_EQ(mismatch.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(mismatch.status().message().find("batch_size: 20 here, 10 registered"), std::string::npos);

  EXPECT_EQ(impl_->RegisterClient({"c-d", "job", 2, spec_, 4}).status().code(), StatusCode::kInvalidArgument);
  JobSpec missing = spec_;
  missing.name = "nomanifest";
  missing.manifest_path = dir_.Join("absent.stoker");
  auto no_manifest = impl_->RegisterClient({"c-e", "nomanifest", 0, missing, 4});
  EXPECT_EQ(no_manifest.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(no_manifest.status().message().find("absent.stoker"), std::string::npos);
  EXPECT_EQ(impl_->GetJob("nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(impl_->GetJob("job")->batch_size, 10u);
}

TEST_F(CoordinatorImplTest, LeasesStayInsideTheClientWindowAndParkedRequestsWakeOnAck) {
  Register("c-a", 0, /*window=*/3);
  AddWorker("w-1");
  std::vector<LeaseGrant> first = Lease("w-1", 0, 10);
  ASSERT_EQ(first.size(), 3u);  // batches 0,1,2: the window is full
  EXPECT_EQ(first[0].first_batch, 0u);
  EXPECT_EQ(first[2].first_batch, 2u);
  EXPECT_LT(first[0].attempt, first[1].attempt);
  auto parked = impl_->RequestLease(42, {"w-1", "job", 0, 10, 1000});
  ASSERT_TRUE(parked.ok());
  EXPECT_FALSE(parked->has_value());
  EXPECT_TRUE(impl_->TakeDeferredReplies().empty());

  for (const auto& g : first) ASSERT_TRUE(Sent("w-1", g).ok());
  ASSERT_TRUE(Ack("c-a", 0, /*consumed=*/0, /*received=*/3).ok());
  EXPECT_TRUE(impl_->TakeDeferredReplies().empty());  // received but not consumed: the slots are still full
  ASSERT_TRUE(Ack("c-a", 0, 2, 3).ok());
  auto woken = impl_->TakeDeferredReplies();
  ASSERT_EQ(woken.size(), 1u);
  EXPECT_EQ(woken[0].handle, 42u);
  ASSERT_EQ(woken[0].response.leases.size(), 2u);
  EXPECT_EQ(woken[0].response.leases[0].first_batch, 3u);
  EXPECT_EQ(impl_->Stats().units_committed, 3u);
}

// Regression (issue 29): a stolen worker key registered 512 workers whose ids sorted first, and clients, which connect
// to the first ClientOptions::max_workers of the list, took those and none of the real ones. The list now puts
// workers a client took batches from first, then the rest in the order they joined.
TEST_F(CoordinatorImplTest, WorkersThatDeliveredAndThenTheOldestLeadTheListClientsAreGiven) {
  AddWorker("w-real-1");
  AddWorker("w-real-2");
  Register("c-a", 0);
  auto grants = Lease("w-real-2", 0, 1);
  ASSERT_EQ(grants.size(), 1u);
  ASSERT_TRUE(Sent("w-real-2", grants[0]).ok());
  ASSERT_TRUE(Ack("c-a", 0, /*consumed=*/1, /*received=*/1).ok());  // w-real-2 delivered a unit
  for (int i = 0; i < 600; ++i) AddWorker("a-fake-" + std::to_string(1000 + i));  // ids that sort first
  auto heartbeat = impl_->ClientHeartbeat({"c-a", "job", 0, 1, 1, {}, 0});
  ASSERT_TRUE(heartbeat.ok()) << heartbeat.status().ToString();
  const std::vector<WorkerInfo>& list = heartbeat->workers;
  ASSERT_EQ(list.size(), 602u);
  EXPECT_EQ(list[0].worker_id, "w-real-2");  // delivered
  EXPECT_EQ(list[1].worker_id, "w-real-1");  // joined first
  EXPECT_EQ(list[2].worker_id, "a-fake-1000");
  EXPECT_EQ(list[601].worker_id, "a-fake-1599");
  auto second = Register("c-b", 1);  // a new client is given the same order
  ASSERT_GE(second.workers.size(), 2u);
  EXPECT_EQ(second.workers[0].worker_id, "w-real-2");
  EXPECT_EQ(second.workers[1].worker_id, "w-real-1");
}

TEST_F(CoordinatorImplTest, ParkedRequestsExpireEmpty) {
  Register("c-a", 0, 1);
  AddWorker("w-1");
  ASSERT_EQ(Lease("w-1", 0, 5).size(), 1u);
  auto parked = impl_->RequestLease(7, {"w-1", "job", 0, 5, 200});
  ASSERT_FALSE(parked->has_value());
  clock_.Advance(Millis(199));
  impl_->Tick();
  EXPECT_TRUE(impl_->TakeDeferredReplies().empty());
  clock_.Advance(Millis(2));
  impl_->Tick();
  auto replies = impl_->TakeDeferredReplies();
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_TRUE(replies[0].response.leases.empty());
}

TEST_F(CoordinatorImplTest, LostWorkerUnitsGoToAnotherWorkerUnderANewAttempt) {
  Register("c-a", 0, 4);
  AddWorker("w-1");
  AddWorker("w-2");
  std::vector<LeaseGrant> held = Lease("w-1", 0, 2);
  ASSERT_EQ(held.size(), 2u);
  ASSERT_TRUE(Sent("w-1", held[0]).ok());  // batch 0 sent, batch 1 still being made
  clock_.Advance(Millis(2000));
  ASSERT_TRUE(impl_->WorkerHeartbeat({"w-2", {}, false}).ok());
  clock_.Advance(Millis(1500));  // w-1 silent for 3.5 s > lease ttl
  impl_->Tick();
  EXPECT_EQ(impl_->Stats().releases.worker_lost, 1u);
  EXPECT_EQ(impl_->Stats().workers, 1u);
  std::vector<LeaseGrant> retry = Lease("w-2", 0, 1);
  ASSERT_EQ(retry.size(), 1u);
  EXPECT_EQ(retry[0].unit, held[1].unit);  // the unsent unit, before any new one
  EXPECT_GT(retry[0].attempt, held[1].attempt);
  // The old worker comes back: its lease is revoked, and its late UnitDone is fenced.
  EXPECT_EQ(impl_->WorkerHeartbeat({"w-1", {}, false}).status().code(), StatusCode::kFailedPrecondition);
  AddWorker("w-1");
  auto hb = impl_->WorkerHeartbeat({"w-1", {{"job", 0, held[1].unit, held[1].attempt}}, false});
  ASSERT_EQ(hb->revoked.size(), 1u);
  EXPECT_EQ(Sent("w-1", held[1]).code(), StatusCode::kAborted);
}

TEST_F(CoordinatorImplTest, UnrenewedLeaseExpiresButHeartbeatsKeepItAlive) {
  Register("c-a", 0, 4);
  AddWorker("w-1");
  std::vector<LeaseGrant> g = Lease("w-1", 0, 1);
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(Millis(1000));
    ASSERT_TRUE(impl_->WorkerHeartbeat({"w-1", {{"job", 0, g[0].unit, g[0].attempt}}, false}).ok());
    impl_->Tick();
  }
  EXPECT_EQ(impl_->Stats().units_leased, 1u);
  for (int i = 0; i < 4; ++i) {  // keeps heartbeating but stops renewing the lease
    clock_.Advance(Millis(1000));
    ASSERT_TRUE(impl_->WorkerHeartbeat({"w-1", {}, false}).ok());
    impl_->Tick();
  }
  EXPECT_EQ(impl_->Stats().releases.lease_expired, 1u);
  EXPECT_EQ(impl_->Stats().units_pending, 1u);
}

TEST_F(CoordinatorImplTest, SentButUnacknowledgedUnitsAreReleasedAfterTheAckTimeout) {
  Register("c-a", 0, 4);
  AddWorker("w-1");
  std::vector<LeaseGrant> g = Lease("w-1", 0, 2);
  ASSERT_TRUE(Sent("w-1", g[0]).ok());
  ASSERT_TRUE(Sent("w-1", g[1]).ok());
  ASSERT_TRUE(Ack("c-a", 0, 0, 1).ok());  // batch 0 arrived, batch 1 was lost in transit
  EXPECT_EQ(impl_->Stats().units_committed, 1u);
  clock_.Advance(Millis(5001));
  ASSERT_TRUE(impl_->WorkerHeartbeat({"w-1", {}, false}).ok());
  ASSERT_TRUE(Ack("c-a", 0, 0, 1).ok());
  impl_->Tick();
  EXPECT_EQ(impl_->Stats().releases.unacked, 1u);
  std::vector<LeaseGrant> again = Lease("w-1", 0, 1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].first_batch, 1u);
}

TEST_F(CoordinatorImplTest, ReleasedUnitSkipsBatchesTheClientAlreadyHas) {
  spec_.batches_per_unit = 4;
  spec_.batch_size = 5;
  spec_.world_size = 1;  // 100 / 5 = 20 steps, units of 4
  Register("c-a", 0, 8);
  AddWorker("w-1");
  std::vector<LeaseGrant> g = Lease("w-1", 0, 4);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].batch_count, 4u);
  ASSERT_TRUE(Ack("c-a", 0, 0, 0, {1, 3}).ok());  // batches 1 and 3 arrived, then the worker vanished
  ASSERT_TRUE(impl_->UnitDone({"w-1", "job", 0, g[0].unit, g[0].attempt, UnitOutcome::kUndeliverable, 2, {}}).ok());
  std::vector<LeaseGrant> redo = Lease("w-1", 0, 2);  // two batches left to make: fits a budget of 2
  ASSERT_EQ(redo.size(), 1u);
  EXPECT_EQ(redo[0].unit, g[0].unit);
  EXPECT_EQ(redo[0].skip, (std::vector<uint64_t>{1, 3}));
}

TEST_F(CoordinatorImplTest, SilentClientFreesItsRankAndTheNextOneResumesWhereItStopped) {
  Register("c-a", 0, 4);
  AddWorker("w-1");
  std::vector<LeaseGrant> g = Lease("w-1", 0, 4);
  for (const auto& l : g) ASSERT_TRUE(Sent("w-1", l).ok());
  ASSERT_TRUE(Ack("c-a", 0, 3, 4).ok());
  clock_.Advance(Millis(10001));
  impl_->Tick();
  EXPECT_EQ(impl_->Stats().live_clients, 0u);
  RegisterClientResponse r = Register("c-b", 0, 4);
  EXPECT_EQ(r.start_batch, 3u);
  // c-a comes back too late: its rank is c-b's now.
  EXPECT_EQ(impl_->ClientHeartbeat({"c-a", "job", 0, 3, 4, {}, 0}).status().code(), StatusCode::kAborted);
  AddWorker("w-1");  // it timed out too, being silent as long
  std::vector<LeaseGrant> next = Lease("w-1", 0, 1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].first_batch, 3u);  // batch 3 was received by c-a but never consumed: made again
}

TEST_F(CoordinatorImplTest, EpochsContinueAndTheRankEventuallyReportsDone) {
  Register("c-a", 0, 20);
  AddWorker("w-1");
  std::vector<LeaseGrant> all = Lease("w-1", 0, 100);
  ASSERT_EQ(all.size(), 10u);  // 5 steps x 2 epochs, all inside a window of 20
  EXPECT_EQ(all[5].epoch, 1u);
  EXPECT_EQ(all[5].first_batch, 0u);
  for (const auto& l : all) ASSERT_TRUE(Sent("w-1", l).ok());
  ASSERT_TRUE(Ack("c-a", 0, 10, 10).ok());
  auto done = impl_->RequestLease(1, {"w-1", "job", 0, 4, 100});
  ASSERT_TRUE(done.ok() && done->has_value());
  EXPECT_TRUE((*done)->job_done);
}

TEST_F(CoordinatorImplTest, DrainingWorkerGetsNothingNewAndDeregisterReleasesItsUnits) {
  Register("c-a", 0, 4);
  AddWorker("w-1");
  AddWorker("w-2");
  std::vector<LeaseGrant> g = Lease("w-1", 0, 1);
  ASSERT_TRUE(impl_->WorkerHeartbeat({"w-1", {{"job", 0, g[0].unit, g[0].attempt}}, true}).ok());
  EXPECT_TRUE(Lease("w-1", 0, 2).empty());
  ASSERT_TRUE(impl_->Deregister({"w-1", "", 0}).ok());
  EXPECT_EQ(impl_->Stats().releases.drain, 1u);
  std::vector<LeaseGrant> taken = Lease("w-2", 0, 1);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].unit, g[0].unit);
}

TEST_F(CoordinatorImplTest, AParkedRequestThatCannotBeServedDoesNotBlockOthers) {
  spec_.batches_per_unit = 2;
  spec_.world_size = 1;
  Register("c-a", 0, 8);
  AddWorker("w-1");
  AddWorker("w-2");
  // w-1 asks for 1 batch: smaller than a unit, so it is parked; w-2 asking for 2 must still be served at once.
  auto small = impl_->RequestLease(1, {"w-1", "job", 0, 1, 1000});
  ASSERT_TRUE(small.ok() && !small->has_value());
  auto big = impl_->RequestLease(2, {"w-2", "job", 0, 2, 1000});
  ASSERT_TRUE(big.ok());
  ASSERT_TRUE(big->has_value());
  EXPECT_EQ((*big)->leases.size(), 1u);
}

TEST_F(CoordinatorImplTest, CheckpointResumeStartsAtItsPositionAndRefusesAnotherSpec) {
  Register("c-a", 0, 4);
  JobSpec stored = *impl_->GetJob("job");
  uint64_t fingerprint = SpecFingerprint(stored);
  // A restarted training process resumes rank 0 from batch 7. A resume token never takes a live rank (it can be
  // computed from the spec); once c-a has been silent for the client timeout, the resume takes the rank over.
  auto early = impl_->RegisterClient({"c-new", "job", 0, spec_, 4, ResumePoint{7, fingerprint}});
  EXPECT_EQ(early.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(early.status().message().find("held by a live client (c-a"), std::string::npos);
  clock_.Advance(Millis(10001));
  impl_->Tick();
  auto resumed = impl_->RegisterClient({"c-new", "job", 0, spec_, 4, ResumePoint{7, fingerprint}});
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ(resumed->start_batch, 7u);
  EXPECT_EQ(impl_->ClientHeartbeat({"c-a", "job", 0, 0, 0, {}, 0}).status().code(), StatusCode::kAborted);
  AddWorker("w-1");
  std::vector<LeaseGrant> g = Lease("w-1", 0, 1);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].epoch, 1u);  // 5 steps per epoch: global batch 7 is epoch 1 batch 2
  EXPECT_EQ(g[0].first_batch, 2u);
  EXPECT_EQ(g[0].client_id, "c-new");
  auto wrong = impl_->RegisterClient({"c-x", "job", 1, spec_, 4, ResumePoint{3, fingerprint ^ 1}});
  EXPECT_EQ(wrong.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong.status().message().find("different job spec or dataset"), std::string::npos);
  auto past = impl_->RegisterClient({"c-y", "job", 1, spec_, 4, ResumePoint{1000, fingerprint}});
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument);
}

// Restart: everything the journal synced comes back; leases workers still hold are adopted; the rest is redone;
// clients carry on with their sessions; attempts never repeat.
TEST_F(CoordinatorImplTest, RestartReplaysTheJournalAdoptsHeldLeasesAndRedoesTheRest) {
  PosixEnv env;
  JournalReplay replay;
  std::string path = dir_.Join("journal");
  std::vector<LeaseGrant> held;
  {
    auto journal = Journal::Open(env, path, JournalOptions{}, [](const Update&) {}, &replay);
    ASSERT_TRUE(journal.ok());
    impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_, journal->get());
    Register("c-a", 0, 8);
    AddWorker("w-1");
    AddWorker("w-2");
    std::vector<LeaseGrant> other = Lease("w-2", 0, 2);  // units 0, 1: w-2 will not come back
    held = Lease("w-1", 0, 2);                           // units 2, 3
    ASSERT_EQ(other.size(), 2u);
    ASSERT_EQ(held.size(), 2u);
    ASSERT_TRUE((*journal)->Sync().ok());
  }  // the coordinator dies here
  std::unique_ptr<Journal> journal = RestartFrom(path);
  ASSERT_NE(journal, nullptr);
  EXPECT_TRUE(impl_->reconciling());
  // The known worker is accepted without registering again, and keeps its leases.
  auto hb = impl_->WorkerHeartbeat({"w-1", {{"job", 0, held[0].unit, held[0].attempt},
                                            {"job", 0, held[1].unit, held[1].attempt}}, false});
  ASSERT_TRUE(hb.ok()) << hb.status().ToString();
  EXPECT_TRUE(hb->revoked.empty());
  EXPECT_EQ(impl_->Stats().leases_adopted, 2u);
  // Nothing new is leased while reconciling: the request parks.
  auto parked = impl_->RequestLease(9, {"w-1", "job", 0, 4, 5000});
  ASSERT_TRUE(parked.ok() && !parked->has_value());
  // The client's heartbeat continues its session without registering again.
  ASSERT_TRUE(Ack("c-a", 0, 0, 0).ok());
  EXPECT_EQ(impl_->Stats().sessions_resumed, 1u);
  clock_.Advance(options_.reconcile_window + Millis(1));
  ASSERT_TRUE(impl_->WorkerHeartbeat({"w-1", {{"job", 0, held[0].unit, held[0].attempt},
                                              {"job", 0, held[1].unit, held[1].attempt}}, false}).ok());
  impl_->Tick();
  EXPECT_FALSE(impl_->reconciling());
  auto woken = impl_->TakeDeferredReplies();
  ASSERT_EQ(woken.size(), 1u);
  ASSERT_EQ(woken[0].response.leases.size(), 4u);  // budget 4: the two to redo first, then new ones
  // w-2's units 0 and 1 are redone first, under attempts above anything handed out before the restart; then
  // leasing carries on after w-1's adopted units.
  EXPECT_EQ(woken[0].response.leases[0].unit, 0u);
  EXPECT_EQ(woken[0].response.leases[1].unit, 1u);
  EXPECT_GT(woken[0].response.leases[0].attempt, held[1].attempt);
  EXPECT_EQ(woken[0].response.leases[2].unit, 4u);
  EXPECT_EQ(impl_->Stats().releases.not_adopted, 2u);
}

TEST_F(CoordinatorImplTest, ASessionLostToTimeoutIsResumedByItsOwnClient) {
  Register("c-a", 0, 4);
  clock_.Advance(Millis(10001));
  impl_->Tick();
  EXPECT_EQ(impl_->Stats().live_clients, 0u);
  ASSERT_TRUE(Ack("c-a", 0, 0, 0).ok());  // nobody took the rank meanwhile: the session goes on
  EXPECT_EQ(impl_->Stats().live_clients, 1u);
  // Registering again under the same id is a retry, not a new session.
  RegisterClientResponse again = Register("c-a", 0, 4);
  EXPECT_EQ(again.start_batch, 0u);
  EXPECT_EQ(impl_->Stats().releases.session_reset, 0u);
}

TEST_F(CoordinatorImplTest, AJobWithoutClientsIsForgottenAfterItsRetention) {
  options_.job_retention = Millis(60000);
  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  Register("c-a", 0, 4);
  ASSERT_TRUE(impl_->Deregister({"c-a", "job", 0}).ok());
  clock_.Advance(Millis(30000));
  impl_->Tick();
  clock_.Advance(Millis(30001));
  impl_->Tick();
  EXPECT_EQ(impl_->Stats().jobs, 1u);  // idle for 60 s exactly from the first tick that saw it idle
  clock_.Advance(Millis(30000));
  impl_->Tick();
  EXPECT_EQ(impl_->Stats().jobs, 0u);
  EXPECT_EQ(impl_->Stats().jobs_removed, 1u);
  EXPECT_EQ(impl_->GetJob("job").status().code(), StatusCode::kNotFound);
  bool gone = true;
  for (const Update& u : impl_->Snapshot()) gone = gone && !std::holds_alternative<JobCreated>(u);
  EXPECT_TRUE(gone);
  // The same spec creates it again (a checkpoint token's fingerprint still matches).
  EXPECT_EQ(Register("c-b", 0, 4).start_batch, 0u);
}

// Job slots per team (issue 29): one team's keys filled all 64 slots and locked the other teams out for the
// retention hour. A team holds at most --max-jobs-per-team (default half of --max-jobs); a registration refused
// after it created its job (here a rank the job lacks) leaves no job behind, so it takes no slot, with no holder.
TEST_F(CoordinatorImplTest, NoTeamTakesMoreThanItsJobSlots) {
  options_.max_jobs = 4;  // so 2 per team
  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  auto create = [&](const std::string& team, const std::string& name, uint32_t rank = 0) {
    JobSpec spec = spec_;
    spec.name = name;
    return impl_->RegisterClient({"c-" + name, name, rank, spec, 4}, Caller{"client:" + team}).status();
  };
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(create("team-a", "a0", /*rank=*/5).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(impl_->Stats().jobs, 0u) << "refused: nothing left behind";
  }
  EXPECT_TRUE(create("team-a", "a0").ok());
  EXPECT_TRUE(create("team-a", "a1").ok());
  const Status third = create("team-a", "a2");
  EXPECT_EQ(third.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(third.message().find("team 'team-a' hold 2 jobs, its limit (--max-jobs-per-team)"), std::string::npos)
      << third.ToString();
  EXPECT_TRUE(create("team-b", "b0").ok()) << "another team still has its slots";
  EXPECT_TRUE(create("team-b", "b1").ok());
  EXPECT_NE(create("team-c", "c0").message().find("(--max-jobs)"), std::string::npos) << "and the pool's cap holds";
  EXPECT_EQ(impl_->Stats().jobs, 4u);
}

// --plain-data: a plain worker gets its ticket key at registration, and each client the ticket for its own
// identity in every worker list; a CURVE worker is listed with its key and no ticket.
// With CURVE on, a worker's data port is sealed: its registration brings the key its port checks tickets with and
// derives seal keys from, and each client's worker list carries that client's own ticket and seal key. A data port
// that is not sealed (a worker of an older version, a CURVE server) is refused.
// Regression (issue 29): re-registering a live worker's id (listed in /state) at another endpoint under the same
// worker key returned OK, and clients followed the list to the attacker. A registered id keeps its data port until
// the coordinator counts it lost; the same port again (a restarted worker) is fine, and after the loss the id may
// register anywhere.
TEST_F(CoordinatorImplTest, ARegisteredWorkerIdKeepsItsDataPortUntilItIsLost) {
  AddWorker("w-1");
  auto moved = impl_->RegisterWorker({"w-1", "tcp://attacker:1", 2, "t"});
  EXPECT_EQ(moved.status().code(), StatusCode::kAlreadyExists) << moved.status().ToString();
  EXPECT_EQ(impl_->RegisterWorker({"w-1", "tcp://attacker:1", 2, "t"}).status().code(), StatusCode::kAlreadyExists);
  RegisterClientResponse r = Register("c-a", 0);
  ASSERT_EQ(r.workers.size(), 1u);
  EXPECT_EQ(r.workers[0].data_endpoint, "tcp://w-1:1") << "clients are not diverted";
  EXPECT_TRUE(impl_->RegisterWorker({"w-1", "tcp://w-1:1", 4, "t"}).ok()) << "the same port: the same worker";
  clock_.Advance(Millis(3500));  // silent past the lease TTL
  impl_->Tick();
  ASSERT_EQ(impl_->Stats().workers, 0u);
  EXPECT_TRUE(impl_->RegisterWorker({"w-1", "tcp://elsewhere:1", 2, "t"}).ok()) << "lost: a new registration";
}

TEST_F(CoordinatorImplTest, IpcDataEndpointsAreRefusedUnlessTheCoordinatorServesOneHost) {
  // Over tcp, an ipc:// endpoint would send every client of the job to a socket on its own host.
  auto refused = impl_->RegisterWorker({"w-ipc", "ipc:///tmp/any.sock", 2, "t"});
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status().ToString();
  EXPECT_EQ(impl_->RegisterWorker({"w-rel", "ipc://relative.sock", 2, "t"}).status().code(),
            StatusCode::kInvalidArgument);
  options_.ipc_data_endpoints = true;  // local mode: the coordinator listens on ipc:// itself
  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  EXPECT_TRUE(impl_->RegisterWorker({"w-ipc", "ipc:///tmp/any.sock", 2, "t"}).ok());
  EXPECT_EQ(impl_->RegisterWorker({"w-rel", "ipc://relative.sock", 2, "t"}).status().code(),
            StatusCode::kInvalidArgument) << "only absolute paths";
  EXPECT_TRUE(impl_->RegisterWorker({"w-tcp", "tcp://w:1", 2, "t"}).ok());
}

TEST_F(CoordinatorImplTest, SealedDataPortsGetTheirTicketKeyAndClientsTheirOwnTicketsAndSealKeys) {
  auto coordinator_key = GenerateKeyPair(Role::kCoordinator, "c");
  ASSERT_TRUE(coordinator_key.ok());
  options_.data_ticket_master = *DataTicketMasterKey(*coordinator_key);
  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  const Caller worker{"worker:pool"};
  auto sealed = impl_->RegisterWorker({"w-sealed", "tcp://a:1", 1, "t", "", true}, worker);
  ASSERT_TRUE(sealed.ok()) << sealed.status().ToString();
  EXPECT_EQ(sealed->data_ticket_key, WorkerTicketKey(options_.data_ticket_master, "w-sealed", ""));
  EXPECT_EQ(impl_->RegisterWorker({"w-curve", "tcp://b:1", 1, "t", std::string(40, 'k'), false}, worker)
                .status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(impl_->RegisterWorker({"w-both", "tcp://c:1", 1, "t", std::string(40, 'k'), true}, worker).status().code(),
            StatusCode::kInvalidArgument);

  auto alice = impl_->RegisterClient({"c-a", "job", 0, spec_, 4}, Caller{"client:alice"});
  auto bob = impl_->RegisterClient({"c-b", "job", 1, spec_, 4}, Caller{"client:bob"});
  ASSERT_TRUE(alice.ok() && bob.ok());
  ASSERT_EQ(alice->workers.size(), 1u);
  const WorkerInfo& a = alice->workers[0];
  const WorkerInfo& b = bob->workers[0];
  EXPECT_TRUE(VerifyDataTicket(sealed->data_ticket_key, "client:alice", a.data_ticket));
  EXPECT_TRUE(VerifyDataTicket(sealed->data_ticket_key, "client:bob", b.data_ticket));
  EXPECT_NE(a.data_ticket, b.data_ticket);
  EXPECT_EQ(a.data_seal_key, DataSealKey(sealed->data_ticket_key, "client:alice"));
  EXPECT_EQ(a.data_seal_key.size(), 32u);
  EXPECT_NE(a.data_seal_key, b.data_seal_key);
  EXPECT_EQ(a.data_seal_key.find(a.data_ticket), std::string::npos);
}

}  // namespace
}  // namespace stoker::coordinator
