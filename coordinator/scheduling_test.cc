// Who gets the work, on a FakeClock: a worker holds at most its queue of leased, unsent batches; room in a window
// goes to the least-loaded worker waiting for it; a worker that frees a place gets the rank furthest behind, and
// when jobs compete, the job furthest below its fair share (fair_share.h).
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
  // Regression (issue 30): a place freed on a worker went back to the job that freed it, so a job with more ranks and
  // requests kept the worker and a second job only got what it freed itself. Now each freed place goes to the job
  // owed it most. One worker with one place; a 2-rank job of team "" and a 1-rank job of team b both always waiting:
  // returns how many of `rounds` freed places each job got.
  std::map<std::string, int> CompeteForOnePlace(CoordinatorOptions options, int rounds) {
    options.worker_queue_batches = 1;
    impl_ = std::make_unique<CoordinatorImpl>(options, clock_, env_);
    JobSpec modest = spec_;
    modest.name = "modest";
    modest.world_size = 1;
    Register("g-0", 0, /*window=*/8);
    Register("g-1", 1, /*window=*/8);
    EXPECT_TRUE(impl_->RegisterClient({"m-0", "modest", 0, modest, 8}, Caller{"client:team-b"}).ok());
    AddWorker("w-1");
    RequestHandle next = 1;
    auto ask = [&](const std::string& job, uint32_t rank) {
      auto r = impl_->RequestLease(next++, {"w-1", job, rank, 1, 1000});
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      return r.ok() && r->has_value() ? (*r)->leases : std::vector<LeaseGrant>{};
    };
    std::vector<LeaseGrant> held = ask("job", 0);  // the 2-rank job takes the worker's only place...
    EXPECT_EQ(held.size(), 1u);
    EXPECT_TRUE(ask("job", 1).empty());  // ...and waits for it on both its ranks, as the 1-rank job does
    EXPECT_TRUE(ask("job", 0).empty());
    EXPECT_TRUE(ask("modest", 0).empty());
    std::map<std::string, int> got;
    if (held.empty()) return got;
    LeaseGrant current = held[0];
    for (int round = 0; round < rounds; ++round) {
      EXPECT_TRUE(impl_->UnitDone({"w-1", current.job, current.rank, current.unit, current.attempt,
                                   UnitOutcome::kSent, current.batch_count, {}}).ok());
      std::vector<DeferredLeaseReply> woken = impl_->TakeDeferredReplies();
      if (woken.size() != 1u || woken[0].response.leases.size() != 1u) {
        ADD_FAILURE() << "round " << round << ": " << woken.size() << " requests woken";
        return got;
      }
      current = woken[0].response.leases[0];
      ++got[current.job];
      EXPECT_TRUE(ask(current.job, current.rank).empty());  // the worker asks again for the stream it served
    }
    return got;
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

// What a unit cost its worker (UnitDone.busySeconds) teaches the fair share what the job's samples cost, heard only
// from the holder of the unit's current lease: another worker of the same key cannot make a job look dear.
TEST_F(SchedulingTest, AUnitsCostIsHeardOnlyFromItsLeaseHolder) {
  Register("c-a", 0, /*window=*/8);
  AddWorker("w-1");
  AddWorker("w-2");
  std::vector<LeaseGrant> g = Lease("w-1", 0, 1);
  ASSERT_EQ(g.size(), 1u);
  auto cost = [&] { return impl_->Stats().job_stats.at(0).sample_seconds; };
  UnitDoneRequest done{"w-2", "job", 0, g[0].unit, g[0].attempt, UnitOutcome::kSent, g[0].batch_count, {}, 99.0};
  EXPECT_EQ(impl_->UnitDone(done).code(), StatusCode::kAborted);
  EXPECT_EQ(cost(), 0.0);
  done.worker_id = "w-1";
  done.busy_seconds = 0.4;
  ASSERT_TRUE(impl_->UnitDone(done).ok());
  EXPECT_DOUBLE_EQ(cost(), 0.4 / (g[0].batch_count * spec_.batch_size));
  EXPECT_EQ(impl_->Stats().job_stats.at(0).cost_factor, 1.0) << "the only job is the reference";
}

// A worker resends a unit's report until it is answered, and the lease stays until the client's acks commit it: a
// replay must not count again (15 of them would set the median alone), nor may a report claim more batches than
// its lease had.
TEST_F(SchedulingTest, AUnitsCostCountsOnceAndOnlyForTheBatchesLeased) {
  Register("c-a", 0, /*window=*/8);
  AddWorker("w-1");
  std::vector<LeaseGrant> g = Lease("w-1", 0, 2);
  ASSERT_EQ(g.size(), 2u);
  auto cost = [&] { return impl_->Stats().job_stats.at(0).sample_seconds; };
  const double per_sample = 0.4 / (g[0].batch_count * spec_.batch_size);
  UnitDoneRequest done{
      "w-1", "job", 0, g[0].unit, g[0].attempt, UnitOutcome::kSent, g[0].batch_count, {}, 0.4, 0.05, 0.2, 0.1, 0.05};
  auto stages = [&] { return impl_->Stats().job_stats.at(0).stage_seconds; };
  ASSERT_TRUE(impl_->UnitDone(done).ok());
  EXPECT_DOUBLE_EQ(cost(), per_sample);
  EXPECT_EQ(stages(), (std::array<double, 6>{0.05, 0.2, 0.1, 0.05, 0, 0})) << "read, decode, augment, seal";
  done.busy_seconds = 40.0;
  done.decode_seconds = 30.0;
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(impl_->UnitDone(done).ok()) << "a replay is answered as before";
  EXPECT_DOUBLE_EQ(cost(), per_sample) << "replays of the first report count nothing";
  EXPECT_EQ(stages(), (std::array<double, 6>{0.05, 0.2, 0.1, 0.05, 0, 0})) << "nor for the stages";
  // The second unit claims 100 times its batches: counted for the batches leased, so the cost it reports is 0.4 a
  // unit, and with two reports of the same the median is that. Its stages claim 100 s of decoding: they say how its
  // time splits (all decoding), and the unit's cost at the job's median says how much (0.4 s).
  UnitDoneRequest inflated{"w-1", "job", 0, g[1].unit, g[1].attempt, UnitOutcome::kSent, 100 * g[1].batch_count,
                           {}, 0.4, 0, 100.0, 0, 0};
  ASSERT_TRUE(impl_->UnitDone(inflated).ok());
  EXPECT_DOUBLE_EQ(cost(), 0.4 / (g[1].batch_count * spec_.batch_size));
  EXPECT_DOUBLE_EQ(stages()[1], 0.6);
  EXPECT_NE(impl_->StateJson().find(R"("stage_seconds": {"read": 0.05, "decode": 0.6, "augment": 0.1, "seal": 0.05, "receive": 0, "h2d": 0})"),
            std::string::npos)
      << impl_->StateJson();
}

// A worker that leaves has its requests waiting for work answered at once, empty. Regression: the sweep looked
// only at workers with room, which a worker gone is not among, so the request waited out its deadline, and a
// worker registering again under the same id got leases on its predecessor's request.
TEST_F(SchedulingTest, ALeavingWorkersWaitingRequestsAreAnsweredAtOnce) {
  Register("c-a", 0, /*window=*/2);
  AddWorker("w-1");
  ASSERT_EQ(Lease("w-1", 0, 2).size(), 2u);  // the window is full
  AddWorker("w-2");
  auto parked = impl_->RequestLease(42, {"w-2", "job", 0, 1, 2000});
  ASSERT_TRUE(parked.ok()) << parked.status().ToString();
  ASSERT_FALSE(parked->has_value());
  ASSERT_TRUE(impl_->Deregister({"w-2", "", 0}).ok());
  std::vector<DeferredLeaseReply> woken = impl_->TakeDeferredReplies();
  ASSERT_EQ(woken.size(), 1u);
  EXPECT_EQ(woken[0].handle, 42u);
  EXPECT_TRUE(woken[0].response.leases.empty());
  AddWorker("w-2");
  ASSERT_TRUE(Ack("c-a", 0, 2, 2).ok());  // the window opens: nothing is parked for anyone now
  EXPECT_TRUE(impl_->TakeDeferredReplies().empty());
}

TEST_F(SchedulingTest, AFreedPlaceGoesToTheJobBelowItsShareNotBackToTheJobThatFreedIt) {
  auto got = CompeteForOnePlace(options_, 8);
  EXPECT_EQ(got["modest"], 4) << "half the places: the teams weigh the same, whatever their ranks";
  EXPECT_EQ(got["job"], 4);
}

// What the job's clients report of their stall reaches the fair share (FairShare::SetStalls, whose order FairShare's
// own tests hold): refreshed each second from the reports of the last 30 s, and shown in /state.
TEST_F(SchedulingTest, AJobsStallFromItsClientsReportsReachesTheFairShare) {
  Register("c-a", 0);
  AddWorker("w-1");
  ASSERT_EQ(Lease("w-1", 0, 1).size(), 1u);  // the fair share knows the job once it is charged a grant
  auto report = [&](double step, double stall, uint64_t samples) {
    ClientHeartbeatRequest hb{"c-a", "job", 0, 0, 0, {}, 0};
    hb.step_seconds = step;
    hb.stall_seconds = stall;
    hb.samples_delivered = samples;
    ASSERT_TRUE(impl_->ClientHeartbeat(hb).ok());
  };
  report(0, 0, 0);
  clock_.Advance(Millis(3000));
  report(2.0, 1.5, 20);  // waited for input three quarters of its steps
  impl_->Tick();
  EXPECT_NE(impl_->StateJson().find(R"("cost_factor": 1, "stall": 0.75, "stage_seconds")"), std::string::npos) << impl_->StateJson();
  clock_.Advance(Millis(31000));  // no reports for longer than the window: nothing known
  impl_->Tick();
  EXPECT_NE(impl_->StateJson().find(R"("cost_factor": 1, "stall": 0, "stage_seconds")"), std::string::npos) << impl_->StateJson();
}

// A client's stages (receive, h2d) reach its job as what its cumulative figures grew by: counted from its first
// heartbeat on the rank (its figures before are its process's, perhaps counted under an earlier session or before a
// restart), nothing for a figure that went back, at most 64 s a second since the rank was last heard with the rest
// counted later (a client cannot make its job's counters grow faster, however often it sends), and shown in /state
// after the workers' stages.
TEST_F(SchedulingTest, AClientsStagesCountAsWhatTheyGrewBy) {
  Register("c-a", 0);
  auto report = [&](const std::string& client, double receive, double h2d) {
    ClientHeartbeatRequest hb{client, "job", 0, 0, 0, {}, 0};
    hb.receive_seconds = receive;
    hb.h2d_seconds = h2d;
    ASSERT_TRUE(impl_->ClientHeartbeat(hb).ok());
  };
  auto counted = [&] {
    const auto s = impl_->Stats().job_stats.at(0).stage_seconds;  // a copy: Stats() is a temporary
    return std::pair{s[4], s[5]};
  };
  report("c-a", 100, 50);
  EXPECT_EQ(counted(), std::pair(0.0, 0.0)) << "the first heartbeat on the rank sets where counting starts";
  clock_.Advance(Millis(1000));
  report("c-a", 100.25, 50.5);
  EXPECT_EQ(counted(), std::pair(0.25, 0.5)) << "what it grew by";
  report("c-a", 100.25, 50.5);
  EXPECT_EQ(counted(), std::pair(0.25, 0.5)) << "a repeat counts nothing";
  report("c-a", 10, 50.5);
  EXPECT_EQ(counted(), std::pair(0.25, 0.5)) << "a figure that went back counts nothing";
  clock_.Advance(Millis(1000));
  report("c-a", 10.5, 50.5);
  EXPECT_EQ(counted(), std::pair(0.75, 0.5)) << "and grows from where it went back to";
  for (int i = 0; i < 100; ++i) report("c-a", 1000, 50.5);
  EXPECT_EQ(counted(), std::pair(0.75, 0.5)) << "no time since it was last heard: no growth, however often it sends";
  clock_.Advance(Millis(2000));
  report("c-a", 1e308, 50.5);
  EXPECT_EQ(counted(), std::pair(0.75 + 64 * 2, 0.5)) << "at most 64 s a second since it was last heard";
  clock_.Advance(Millis(1000));
  report("c-a", 1e308, 50.5);
  EXPECT_EQ(counted(), std::pair(0.75 + 64 * 3, 0.5)) << "the rest counts later";
  ASSERT_TRUE(impl_->Deregister({"c-a", "job", 0}).ok());
  Register("c-b", 0);
  report("c-b", 7, 7);
  EXPECT_EQ(counted(), std::pair(192.75, 0.5)) << "another client on the rank starts where it is";
  clock_.Advance(Millis(1000));
  report("c-b", 7.25, 7.5);
  EXPECT_EQ(counted(), std::pair(193.0, 1.0));
  EXPECT_NE(impl_->StateJson().find(R"("seal": 0, "receive": 193, "h2d": 1})"), std::string::npos)
      << impl_->StateJson();
}

TEST_F(SchedulingTest, ATeamsWeightIsItsShareOfTheFreedPlaces) {
  CoordinatorOptions options = options_;
  options.teams = {{"team-b", {.weight = 3}}};
  auto got = CompeteForOnePlace(options, 8);
  EXPECT_EQ(got["modest"], 6) << "team b weighs 3 to the other's 1";
  EXPECT_EQ(got["job"], 2);
  // /state says what each job got, under which team and weight (10 samples a batch; the first grant was "job"'s).
  const std::string state = impl_->StateJson();
  EXPECT_NE(state.find(R"("share": {"team": "team-b", "team_weight": 3, "samples_leased": 60, "team_priority": 0)"), std::string::npos)
      << state;
  EXPECT_NE(state.find(R"("share": {"team": "", "team_weight": 1, "samples_leased": 30, "team_priority": 0)"), std::string::npos)
      << state;
}

// A team's cap before the pool's rate per worker is known: at most max_workers units of the job leased and unsent
// over the pool, whichever workers ask (afterwards it is a rate: tests/scheduling/pool_test.cc).
TEST_F(SchedulingTest, ACappedTeamHoldsAtMostItsUnitsBeforeThePoolsRateIsKnown) {
  options_.worker_queue_batches = 4;
  options_.teams = {{"team-b", {.max_workers = 1}}};
  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  ASSERT_TRUE(impl_->RegisterClient({"c-a", "job", 0, spec_, 8}, Caller{"client:team-b"}).ok());
  AddWorker("w-1");
  AddWorker("w-2");
  auto first = Lease("w-1", 0, 4);
  ASSERT_EQ(first.size(), 1u) << "one unit: its one worker's worth";
  EXPECT_TRUE(Lease("w-2", 0, 4).empty()) << "not another on a second worker";
  ASSERT_TRUE(Sent("w-1", first[0]).ok());
  EXPECT_EQ(Lease("w-2", 0, 4).size(), 1u) << "once it is sent, the next";
}

// A guarantee before priorities, here before the pool's rate per worker is known (then it is a rate:
// tests/scheduling/pool_test.cc): team b, guaranteed one worker and holding less than a unit, is served before the
// higher-priority team of the 2-rank job, which without the guarantee takes every place.
TEST_F(SchedulingTest, AGuaranteedTeamIsServedBeforeAHigherPriorityOne) {
  using Places = std::map<std::string, int>;
  CoordinatorOptions options = options_;
  options.teams = {{"", {.priority = 1}}};
  EXPECT_EQ(CompeteForOnePlace(options, 8), (Places{{"job", 8}})) << "strict priority";
  options.teams["team-b"] = {.min_workers = 1};
  EXPECT_EQ(CompeteForOnePlace(options, 8), (Places{{"modest", 8}})) << "its one worker's worth, on a pool of one";
  EXPECT_NE(impl_->StateJson().find(R"("team_max_workers": 0, "team_min_workers": 1, "sample_cost_seconds")"), std::string::npos);
}

// Regression (review of issue 30): a job forgotten while a worker waited on it left that request unanswered and its
// leased, unsent batches counted against the worker (and its team) for good, so the worker's queue stayed full.
TEST_F(SchedulingTest, AForgottenJobAnswersItsParkedRequestsAndFreesTheWorkersQueue) {
  options_.worker_queue_batches = 1;
  options_.job_retention = Millis(1000);
  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  Register("c-a", 0, 8);
  AddWorker("w-1");
  ASSERT_EQ(Lease("w-1", 0, 1).size(), 1u);
  EXPECT_FALSE(Ask(7, "w-1", 0, 1).has_value()) << "the queue is full: parked";
  ASSERT_TRUE(impl_->Deregister({"c-a", "job", 0}).ok());
  impl_->Tick();  // idle from now
  clock_.Advance(Millis(1500));
  ASSERT_TRUE(impl_->WorkerHeartbeat({"w-1", {}, false, 0, 0}).ok());  // the worker is alive throughout
  impl_->Tick();  // forgotten
  std::vector<DeferredLeaseReply> answered = impl_->TakeDeferredReplies();
  ASSERT_EQ(answered.size(), 1u);
  EXPECT_EQ(answered[0].handle, 7u);
  EXPECT_TRUE(answered[0].response.leases.empty());
  JobSpec other = spec_;
  other.name = "other";
  ASSERT_TRUE(impl_->RegisterClient({"c-b", "other", 0, other, 8}).ok());
  auto r = impl_->RequestLease(8, {"w-1", "other", 0, 1, 0});
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((*r)->leases.size(), 1u) << "the forgotten job's batch no longer fills the worker's queue";
}

// One team per job (review of issue 30): ranks taken with different teams' keys are all the team of the lowest
// held rank, so the job is ordered, charged and capped as one.
TEST_F(SchedulingTest, AJobsRanksTakenWithDifferentKeysAreOneTeam) {
  ASSERT_TRUE(impl_->RegisterClient({"c-a", "job", 0, spec_, 8}, Caller{"client:team-a"}).ok());
  ASSERT_TRUE(impl_->RegisterClient({"c-b", "job", 1, spec_, 8}, Caller{"client:team-b"}).ok());
  AddWorker("w-1");
  ASSERT_EQ(Lease("w-1", 0, 1).size(), 1u);
  ASSERT_EQ(Lease("w-1", 1, 1).size(), 1u);  // rank 1's key is team b's: the job's charge stays with team a
  const std::string state = impl_->StateJson();
  EXPECT_NE(state.find(R"("share": {"team": "team-a", "team_weight": 1, "samples_leased": 20)"), std::string::npos)
      << state;
}

}  // namespace
}  // namespace stoker::coordinator
