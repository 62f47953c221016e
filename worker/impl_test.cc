// WorkerImpl on a fake clock, with no sockets and no pipeline threads: the test plays the coordinator (answering
// the requests the Impl asks its adapter to send) and the client (credits), and finishes batches itself.
#include "worker/impl.h"

#include <gtest/gtest.h>

#include "dataset/checkpoint.h"

namespace stoker::worker {
namespace {

class WorkerImplTest : public ::testing::Test {
 protected:
  WorkerImplTest() {
    spec_.name = "job";
    spec_.manifest_path = "/nowhere/m.stoker";
    spec_.batch_size = 2;
    spec_.epochs = 1;
    spec_.shuffle = false;
    spec_.pipeline.output_height = spec_.pipeline.output_width = 4;
    options_.credit_ttl = Millis(3000);
    options_.drain_grace = Millis(10000);
    options_.request_timeout = Millis(3000);
    impl_ = std::make_unique<WorkerImpl>(options_, "w-test", 2, clock_, counters_);
  }

  std::shared_ptr<const JobContext> Job(const JobSpec& spec) {
    auto plan = Plan::Make(spec, 40);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    return std::make_shared<JobContext>(JobContext{spec, SpecFingerprint(spec), *plan, nullptr, nullptr});
  }

  // Registers, gives the client's credit and loads the job: the worker is then ready to lease for rank 0.
  void Ready(uint32_t credits) {
    impl_->Register("tcp://w:1");
    Reply(Take<RegisterWorkerRequest>(), RegisterWorkerResponse{250, 1500});
    impl_->HandleCredit("peer-c", "", Credit{"job", 0, "c-1", credits, 0});
    Reply(Take<GetJobRequest>(), spec_);
    Collect();
    ASSERT_EQ(outbox_.loads.size(), 1u);
    impl_->JobLoaded("job", Job(spec_));
  }

  // Ready with `credits`, and unit 0 leased under `attempt`: the batch it asks to have made (null if not one).
  std::shared_ptr<BatchBuild> LeaseUnitZero(uint32_t credits, uint64_t attempt) {
    Ready(credits);
    impl_->Tick();
    Lease({Grant(0, attempt, spec_)});
    EXPECT_EQ(outbox_.builds.size(), 1u);
    return outbox_.builds.size() == 1 ? outbox_.builds[0] : nullptr;
  }

  // The latest request of type T the Impl asked to send; earlier ones of that type stay unanswered, requests of
  // other types are kept for later.
  template <typename T>
  RequestTracker::Pending Take() {
    Collect();
    std::optional<RequestTracker::Pending> latest;
    for (auto it = outbox_.requests.begin(); it != outbox_.requests.end();) {
      if (std::holds_alternative<T>(it->body)) {
        latest = *it;
        it = outbox_.requests.erase(it);
      } else {
        ++it;
      }
    }
    if (!latest) ADD_FAILURE() << "no request of the expected kind was sent";
    return latest.value_or(RequestTracker::Pending{});
  }
  template <typename T>
  size_t Count() {
    Collect();
    size_t n = 0;
    for (const auto& r : outbox_.requests) n += std::holds_alternative<T>(r.body);
    return n;
  }

  void Collect() {
    WorkerImpl::Outbox out = impl_->TakeOutbox();
    for (auto& r : out.requests) outbox_.requests.push_back(std::move(r));
    for (auto& e : out.errors) outbox_.errors.push_back(std::move(e));
    for (auto& b : out.builds) outbox_.builds.push_back(std::move(b));
    for (auto& l : out.loads) outbox_.loads.push_back(std::move(l));
  }

  void Reply(const RequestTracker::Pending& request, ReplyBody body, Status status = Status::Ok()) {
    impl_->HandleReply(DecodedReply{request.id, std::move(status), std::move(body)});
  }

  LeaseGrant Grant(uint64_t unit, uint64_t attempt, const JobSpec& spec) {
    LeaseGrant g;
    g.job = "job";
    g.rank = 0;
    g.unit = unit;
    g.epoch = 0;
    g.first_batch = unit;  // one batch per unit
    g.batch_count = 1;
    g.attempt = attempt;
    g.ttl_ms = 1500;
    g.client_id = "c-1";
    g.spec_fingerprint = SpecFingerprint(spec);
    return g;
  }

  // Answers the pending lease request with `grants`.
  void Lease(std::vector<LeaseGrant> grants) {
    LeaseResponse response;
    response.leases = std::move(grants);
    Reply(Take<LeaseRequest>(), response);
    Collect();
  }

  std::vector<UnitDoneRequest> UnitsDone() {
    Collect();
    std::vector<UnitDoneRequest> done;
    for (auto it = outbox_.requests.begin(); it != outbox_.requests.end();) {
      if (auto* d = std::get_if<UnitDoneRequest>(&it->body)) {
        done.push_back(*d);
        it = outbox_.requests.erase(it);
      } else {
        ++it;
      }
    }
    return done;
  }

  WorkerOptions options_;
  JobSpec spec_;
  FakeClock clock_;
  BuildCounters counters_;
  std::unique_ptr<WorkerImpl> impl_;
  WorkerImpl::Outbox outbox_;
};

// Regression: a worker whose registration was refused for now (its fixed id still registered at its old data port
// until the coordinator counts that one lost) never asked again and sat idle for good. Now it asks every second
// until it is registered; a refusal that will not pass (a key of another role) is not repeated.
TEST_F(WorkerImplTest, ARegistrationRefusedForNowIsAskedAgainEverySecond) {
  impl_->Register("tcp://w:2");
  Reply(Take<RegisterWorkerRequest>(), std::monostate{}, AlreadyExistsError("registered at another data port"));
  clock_.Advance(Millis(900));
  impl_->Tick();
  EXPECT_EQ(Count<RegisterWorkerRequest>(), 0u);
  clock_.Advance(Millis(200));
  impl_->Tick();
  ASSERT_EQ(Count<RegisterWorkerRequest>(), 1u);
  clock_.Advance(Millis(1500));
  impl_->Tick();
  EXPECT_EQ(Count<RegisterWorkerRequest>(), 1u) << "one registration at a time: the one sent is not answered yet";
  Reply(Take<RegisterWorkerRequest>(), std::monostate{}, AlreadyExistsError("registered at another data port"));
  clock_.Advance(Millis(1100));
  impl_->Tick();
  ASSERT_EQ(Count<RegisterWorkerRequest>(), 1u) << "asked again while the refusal lasts";
  Reply(Take<RegisterWorkerRequest>(), RegisterWorkerResponse{250, 1500});
  clock_.Advance(Millis(300));
  impl_->Tick();
  EXPECT_EQ(Count<RegisterWorkerRequest>(), 0u) << "registered: no more registrations";
  EXPECT_EQ(Count<WorkerHeartbeatRequest>(), 1u);

  auto other = std::make_unique<WorkerImpl>(options_, "w-other", 2, clock_, counters_);
  other->Register("tcp://w:3");
  WorkerImpl::Outbox out = other->TakeOutbox();
  ASSERT_EQ(out.requests.size(), 1u);
  other->HandleReply(DecodedReply{out.requests[0].id, PermissionDeniedError("a client key"), std::monostate{}});
  clock_.Advance(Millis(5000));
  other->Tick();
  EXPECT_TRUE(other->TakeOutbox().requests.empty()) << "a refusal that will not pass is not repeated";
}

// A unit of several batches reports what all of them took, in all and by stage, not the last one's.
TEST_F(WorkerImplTest, AUnitsReportSumsItsBatchesBusyTime) {
  Ready(/*credits=*/2);
  impl_->Tick();
  RequestTracker::Pending ask = Take<LeaseRequest>();
  LeaseGrant two = Grant(0, 1, spec_);
  two.batch_count = 2;
  LeaseResponse response;
  response.leases = {two};
  Reply(ask, response);
  Collect();
  ASSERT_EQ(outbox_.builds.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    auto build = outbox_.builds[i];
    ASSERT_TRUE(impl_->RouteBatch(*build).has_value());
    build->busy_ns = static_cast<int64_t>(i + 1) * 100'000'000;
    build->read_ns = static_cast<int64_t>(i + 1) * 10'000'000;
    build->decode_ns = static_cast<int64_t>(i + 1) * 40'000'000;
    build->augment_ns = static_cast<int64_t>(i + 1) * 30'000'000;
    build->seal_ns = static_cast<int64_t>(i + 1) * 20'000'000;
    impl_->BatchSent(*build, /*delivered=*/true);
  }
  std::vector<UnitDoneRequest> done = UnitsDone();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].batches_sent, 2u);
  EXPECT_NEAR(done[0].busy_seconds, 0.3, 1e-12);
  EXPECT_NEAR(done[0].read_seconds, 0.03, 1e-12) << "and by stage";
  EXPECT_NEAR(done[0].decode_seconds, 0.12, 1e-12);
  EXPECT_NEAR(done[0].augment_seconds, 0.09, 1e-12);
  EXPECT_NEAR(done[0].seal_seconds, 0.06, 1e-12);
}

TEST_F(WorkerImplTest, CreditCapsLeases) {
  Ready(/*credits=*/2);
  impl_->Tick();
  RequestTracker::Pending ask = Take<LeaseRequest>();
  EXPECT_EQ(std::get<LeaseRequest>(ask.body).max_batches, 2u);
  LeaseResponse response;
  response.leases = {Grant(0, 1, spec_), Grant(1, 1, spec_)};
  Reply(ask, response);
  Collect();
  ASSERT_EQ(outbox_.builds.size(), 2u);
  EXPECT_EQ(outbox_.builds[0]->index, 0u);
  EXPECT_EQ(outbox_.builds[1]->index, 1u);

  impl_->Tick();  // both credits are spent on batches in hand: nothing more is asked for
  EXPECT_EQ(Count<LeaseRequest>(), 0u);

  auto first = outbox_.builds[0];
  std::optional<BatchRoute> route = impl_->RouteBatch(*first);
  ASSERT_TRUE(route.has_value());
  EXPECT_EQ(route->peer, "peer-c");
  first->busy_ns = 250'000'000;  // what its samples took the pipeline threads
  impl_->BatchSent(*first, /*delivered=*/true);
  std::vector<UnitDoneRequest> done = UnitsDone();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, UnitOutcome::kSent);
  EXPECT_EQ(done[0].unit, 0u);
  EXPECT_DOUBLE_EQ(done[0].busy_seconds, 0.25) << "the report says what the unit cost (the fair share's input)";

  impl_->Tick();  // one batch left the worker: one credit is free again
  RequestTracker::Pending again = Take<LeaseRequest>();
  EXPECT_EQ(std::get<LeaseRequest>(again.body).max_batches, 1u);
  EXPECT_EQ(impl_->unit_counts().done, 1u);
}

// Another process of the same key can read the victim's client id in /state, but not its session check: its credit
// for the victim's rank makes a stream of its own, which no lease is for, and withdrawing that credit drops nothing
// of the victim's.
TEST_F(WorkerImplTest, ALeaseBoundToASessionGoesOnlyToCreditsCarryingItsCheck) {
  const std::string check(32, 'v');
  impl_->Register("tcp://w:1");
  Reply(Take<RegisterWorkerRequest>(), RegisterWorkerResponse{250, 1500});
  impl_->HandleCredit("peer-victim", "client:a", Credit{"job", 0, "c-1", 2, 0, check});
  impl_->HandleCredit("peer-thief", "client:a", Credit{"job", 0, "c-1", 2, 0});
  impl_->HandleCredit("peer-guess", "client:a", Credit{"job", 0, "c-1", 2, 0, std::string(32, 'g')});
  Reply(Take<GetJobRequest>(), spec_);
  impl_->JobLoaded("job", Job(spec_));
  impl_->Tick();
  LeaseGrant grant = Grant(0, 1, spec_);
  grant.client_identity = "client:a";
  grant.session_check = check;
  Lease({grant});
  ASSERT_EQ(outbox_.builds.size(), 1u);
  impl_->HandleCredit("peer-thief", "client:a", Credit{"job", 0, "c-1", 64, 0});  // credited last
  std::optional<BatchRoute> first = impl_->RouteBatch(*outbox_.builds[0]);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->peer, "peer-victim");
  impl_->HandleCredit("peer-thief", "client:a", Credit{"job", 0, "c-1", 0, 0});  // withdrawn: not the victim's stream
  impl_->HandleCredit("peer-guess", "client:a", Credit{"job", 0, "c-1", 0, 0, std::string(32, 'g')});
  std::optional<BatchRoute> route = impl_->RouteBatch(*outbox_.builds[0]);
  ASSERT_TRUE(route.has_value());
  EXPECT_EQ(route->peer, "peer-victim");
  EXPECT_TRUE(UnitsDone().empty());  // nothing handed back as undeliverable

  impl_->HandleCredit("peer-odd", "client:a", Credit{"job", 0, "c-1", 2, 0, "short"});
  Collect();
  ASSERT_EQ(outbox_.errors.size(), 1u);
  EXPECT_EQ(outbox_.errors[0].second.status.code(), StatusCode::kInvalidArgument);
}

// A rank restored from a journal older than sessions has no check, while its client's credits carry one: its
// leases still reach the client's stream (of its client id and identity, credited last), and no other's.
TEST_F(WorkerImplTest, ALeaseOfASessionWithoutACheckGoesToItsClientsStream) {
  impl_->Register("tcp://w:1");
  Reply(Take<RegisterWorkerRequest>(), RegisterWorkerResponse{250, 1500});
  impl_->HandleCredit("peer-old", "client:a", Credit{"job", 0, "c-1", 2, 0, std::string(32, 'o')});
  clock_.Advance(Millis(10));
  impl_->HandleCredit("peer-c", "client:a", Credit{"job", 0, "c-1", 2, 0, std::string(32, 'v')});
  impl_->HandleCredit("peer-b", "client:b", Credit{"job", 0, "c-1", 2, 0});
  impl_->HandleCredit("peer-other", "client:a", Credit{"job", 0, "c-2", 2, 0});
  Reply(Take<GetJobRequest>(), spec_);
  impl_->JobLoaded("job", Job(spec_));
  impl_->Tick();
  LeaseGrant grant = Grant(0, 1, spec_);
  grant.client_identity = "client:a";
  LeaseGrant nobodys = Grant(1, 1, spec_);
  nobodys.client_id = "c-0";  // sorts before every stream: none is its client's
  nobodys.client_identity = "client:a";
  Lease({grant, nobodys});
  ASSERT_EQ(outbox_.builds.size(), 1u);
  std::optional<BatchRoute> route = impl_->RouteBatch(*outbox_.builds[0]);
  ASSERT_TRUE(route.has_value());
  EXPECT_EQ(route->peer, "peer-c");
  std::vector<UnitDoneRequest> done = UnitsDone();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].unit, 1u);
  EXPECT_EQ(done[0].outcome, UnitOutcome::kUndeliverable);
}

TEST_F(WorkerImplTest, ARevokeCancelsTheUnitsBatches) {
  auto build = LeaseUnitZero(2, 7);
  ASSERT_NE(build, nullptr);

  clock_.Advance(Millis(300));
  impl_->Tick();  // a heartbeat naming the lease
  RequestTracker::Pending hb = Take<WorkerHeartbeatRequest>();
  ASSERT_EQ(std::get<WorkerHeartbeatRequest>(hb.body).leases.size(), 1u);
  WorkerHeartbeatResponse revoke;
  revoke.revoked = {LeaseRef{"job", 0, 0, 7}};
  Reply(hb, revoke);

  EXPECT_TRUE(build->cancelled->load());  // the pipeline threads skip its samples
  EXPECT_FALSE(impl_->RouteBatch(*build).has_value());
  EXPECT_EQ(impl_->unit_counts().revoked, 1u);
  EXPECT_EQ(impl_->units_held(), 0u);
  EXPECT_TRUE(UnitsDone().empty());  // the coordinator revoked it: nothing to report
}

TEST_F(WorkerImplTest, ARevokeOfAnOlderAttemptChangesNothing) {
  ASSERT_NE(LeaseUnitZero(2, 7), nullptr);
  clock_.Advance(Millis(300));
  impl_->Tick();
  WorkerHeartbeatResponse revoke;
  revoke.revoked = {LeaseRef{"job", 0, 0, 6}};
  Reply(Take<WorkerHeartbeatRequest>(), revoke);
  EXPECT_FALSE(outbox_.builds[0]->cancelled->load());
  EXPECT_TRUE(impl_->RouteBatch(*outbox_.builds[0]).has_value());
}

TEST_F(WorkerImplTest, AnUnrenewedLeaseFences) {
  Ready(2);
  impl_->Tick();
  Lease({Grant(0, 1, spec_)});
  auto build = outbox_.builds[0];
  // Heartbeats go unanswered (the coordinator is cut off): past three quarters of the TTL from the grant, the
  // worker stops sending the unit, before the coordinator could lease it elsewhere.
  clock_.Advance(Millis(1100));
  impl_->Tick();
  EXPECT_EQ(impl_->units_held(), 1u);
  clock_.Advance(Millis(100));  // 1200 ms > 1500 - 1500/4
  impl_->Tick();
  EXPECT_TRUE(build->cancelled->load());
  EXPECT_FALSE(impl_->RouteBatch(*build).has_value());
  EXPECT_EQ(impl_->unit_counts().fenced, 1u);
}

TEST_F(WorkerImplTest, ARenewalCountsFromWhenTheHeartbeatLeft) {
  ASSERT_NE(LeaseUnitZero(2, 1), nullptr);
  clock_.Advance(Millis(1000));
  impl_->Tick();
  RequestTracker::Pending hb = Take<WorkerHeartbeatRequest>();  // leaves at t = 1000
  clock_.Advance(Millis(400));
  Reply(hb, WorkerHeartbeatResponse{});  // renewed until 1000 + 1500
  clock_.Advance(Millis(1000));          // t = 2400: past the grant's local expiry, before the renewal's
  impl_->Tick();
  EXPECT_EQ(impl_->units_held(), 1u);
  clock_.Advance(Millis(200));  // t = 2600
  impl_->Tick();
  EXPECT_EQ(impl_->unit_counts().fenced, 1u);
}

TEST_F(WorkerImplTest, AVanishedClientMakesItsUnitsUndeliverable) {
  Ready(2);
  impl_->Tick();
  Lease({Grant(0, 1, spec_), Grant(1, 1, spec_)});
  // The client stops refreshing its credit: after the TTL its stream is dropped and its units go back at once.
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(Millis(900));
    impl_->Tick();
    Reply(Take<WorkerHeartbeatRequest>(), WorkerHeartbeatResponse{});  // leases renewed: only the client is gone
  }
  std::vector<UnitDoneRequest> done = UnitsDone();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].outcome, UnitOutcome::kUndeliverable);
  EXPECT_EQ(done[1].outcome, UnitOutcome::kUndeliverable);
  EXPECT_EQ(impl_->unit_counts().undeliverable, 2u);
  EXPECT_FALSE(impl_->RouteBatch(*outbox_.builds[0]).has_value());
  EXPECT_EQ(impl_->streams(), 0u);
}

TEST_F(WorkerImplTest, AFailedSendHandsTheUnitBack) {
  Ready(2);
  impl_->Tick();
  Lease({Grant(0, 1, spec_)});
  auto build = outbox_.builds[0];
  ASSERT_TRUE(impl_->RouteBatch(*build).has_value());
  impl_->BatchSent(*build, /*delivered=*/false);  // EHOSTUNREACH: the connection is gone
  std::vector<UnitDoneRequest> done = UnitsDone();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, UnitOutcome::kUndeliverable);
  EXPECT_TRUE(build->cancelled->load());
}

// Object storage could not serve a read (403, 404, a changed shard, retries exhausted): the batch is not sent, the
// unit goes back whole (never dropped, never sent with a hole) and the stream leases nothing for a moment.
TEST_F(WorkerImplTest, AStorageFailureHandsTheUnitBackAndPausesItsStream) {
  auto build = LeaseUnitZero(1, 3);
  ASSERT_NE(build, nullptr);
  build->FailStorage("sample 1 (k1): s3://b/p/a.tar (bytes 512+100): access denied (HTTP 403 AccessDenied)");
  EXPECT_FALSE(impl_->RouteBatch(*build).has_value());
  EXPECT_TRUE(build->cancelled->load());
  std::vector<UnitDoneRequest> done = UnitsDone();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, UnitOutcome::kAbandoned);
  EXPECT_EQ(done[0].batches_sent, 0u);
  EXPECT_TRUE(done[0].quarantined.empty());
  EXPECT_EQ(impl_->unit_counts().abandoned, 1u);
  impl_->Tick();
  EXPECT_EQ(Count<LeaseRequest>(), 0u);  // paused
  clock_.Advance(Millis(1100));
  impl_->Tick();
  EXPECT_EQ(Count<LeaseRequest>(), 1u);  // and asks again
  JsonWriter j;
  j.BeginObject();
  impl_->WriteState(j);
  j.EndObject();
  EXPECT_NE(j.str().find("access denied (HTTP 403 AccessDenied)"), std::string::npos);
}

TEST_F(WorkerImplTest, AChangedSpecReloadsTheJob) {
  Ready(2);
  impl_->Tick();
  JobSpec recreated = spec_;
  recreated.seed = 99;  // the coordinator lost the job and it was created again, differently
  Lease({Grant(0, 1, recreated)});
  EXPECT_TRUE(outbox_.builds.empty());  // nothing is made under the stale spec
  std::vector<UnitDoneRequest> done = UnitsDone();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, UnitOutcome::kAbandoned);
  RequestTracker::Pending get = Take<GetJobRequest>();  // and the job is fetched again
  Reply(get, recreated);
  Collect();
  ASSERT_EQ(outbox_.loads.size(), 2u);
  EXPECT_EQ(outbox_.loads[1].seed, 99u);
  impl_->JobLoaded("job", Job(recreated));
  impl_->Tick();
  Lease({Grant(0, 2, recreated)});
  ASSERT_EQ(outbox_.builds.size(), 1u);
  EXPECT_EQ(outbox_.builds[0]->job->spec.seed, 99u);
}

TEST_F(WorkerImplTest, DrainHandsBackWhatItCannotFinish) {
  Ready(2);
  impl_->Tick();
  Lease({Grant(0, 1, spec_), Grant(1, 1, spec_)});
  impl_->BatchSent(*outbox_.builds[0], true);  // unit 0 is done (its stream asks for more as it says so)
  UnitsDone();
  const size_t asked = Count<LeaseRequest>();
  impl_->StartDrain();
  RequestTracker::Pending hb = Take<WorkerHeartbeatRequest>();
  EXPECT_TRUE(std::get<WorkerHeartbeatRequest>(hb.body).draining);
  impl_->Tick();
  EXPECT_EQ(Count<LeaseRequest>(), asked);  // nothing new while draining
  EXPECT_FALSE(impl_->DrainDue());        // unit 1 may still finish within the grace
  clock_.Advance(options_.drain_grace);
  EXPECT_TRUE(impl_->DrainDue());
  impl_->AbandonAll();
  std::vector<UnitDoneRequest> done = UnitsDone();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].unit, 1u);
  EXPECT_EQ(done[0].outcome, UnitOutcome::kAbandoned);
  EXPECT_EQ(impl_->unit_counts().abandoned, 1u);
  uint64_t id = impl_->Deregister();
  RequestTracker::Pending dereg = Take<DeregisterRequest>();
  EXPECT_EQ(dereg.id, id);
  Reply(dereg, std::monostate{});
  EXPECT_TRUE(impl_->deregistered());
  EXPECT_FALSE(impl_->IsPending(id));
}

TEST_F(WorkerImplTest, ADrainWithNothingInHandIsDueAtOnce) {
  Ready(2);
  impl_->StartDrain();
  EXPECT_TRUE(impl_->DrainDue());
}

TEST_F(WorkerImplTest, AGrantArrivingWhileDrainingGoesStraightBack) {
  Ready(2);
  impl_->Tick();
  RequestTracker::Pending ask = Take<LeaseRequest>();
  impl_->StartDrain();
  LeaseResponse response;
  response.leases = {Grant(0, 1, spec_)};
  Reply(ask, response);
  std::vector<UnitDoneRequest> done = UnitsDone();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, UnitOutcome::kAbandoned);
  EXPECT_TRUE(outbox_.builds.empty());
}

TEST_F(WorkerImplTest, AJobThatCannotLoadIsRefusedToItsClientsForAWhile) {
  impl_->Register("tcp://w:1");
  Reply(Take<RegisterWorkerRequest>(), RegisterWorkerResponse{250, 1500});
  impl_->HandleCredit("peer-c", "", Credit{"job", 0, "c-1", 2, 0});
  Reply(Take<GetJobRequest>(), spec_);
  impl_->JobLoaded("job", Status(StatusCode::kNotFound, "no manifest"));
  Collect();
  ASSERT_EQ(outbox_.errors.size(), 1u);
  EXPECT_EQ(outbox_.errors[0].first, "peer-c");
  EXPECT_EQ(outbox_.errors[0].second.status.code(), StatusCode::kNotFound);
  impl_->HandleCredit("peer-c", "", Credit{"job", 0, "c-1", 2, 0});  // refused again at once, not refetched
  Collect();
  EXPECT_EQ(outbox_.errors.size(), 2u);
  EXPECT_EQ(Count<GetJobRequest>(), 0u);
  clock_.Advance(Millis(5001));  // after the back-off the job is tried again
  impl_->HandleCredit("peer-c", "", Credit{"job", 0, "c-1", 2, 0});
  EXPECT_EQ(Count<GetJobRequest>(), 1u);
}

TEST_F(WorkerImplTest, ACoordinatorThatForgotUsIsRegisteredWithAgain) {
  Ready(2);
  clock_.Advance(Millis(300));
  impl_->Tick();
  Reply(Take<WorkerHeartbeatRequest>(), std::monostate{}, FailedPreconditionError("unknown worker"));
  EXPECT_FALSE(impl_->registered());
  Reply(Take<RegisterWorkerRequest>(), RegisterWorkerResponse{250, 1500});
  EXPECT_TRUE(impl_->registered());
}

// Regression: while the coordinator could not write its journal it answered UNAVAILABLE, and a worker took that
// for an answer: a refused registration was never sent again and a refused GetJob failed the job. UNAVAILABLE now
// leaves the request pending, to be sent again when its deadline passes.
TEST_F(WorkerImplTest, UnavailableRepliesAreRetriedAtTheirDeadlineNotTakenAsAnswers) {
  impl_->Register("tcp://w:1");
  Reply(Take<RegisterWorkerRequest>(), std::monostate{}, UnavailableError("the journal cannot be written"));
  EXPECT_EQ(Count<RegisterWorkerRequest>(), 0u) << "no tight loop of retries";
  clock_.Advance(options_.request_timeout);
  impl_->Tick();
  Reply(Take<RegisterWorkerRequest>(), RegisterWorkerResponse{250, 1500});
  EXPECT_TRUE(impl_->registered());
  impl_->HandleCredit("peer-c", "", Credit{"job", 0, "c-1", 2, 0});
  Reply(Take<GetJobRequest>(), std::monostate{}, UnavailableError("the journal cannot be written"));
  Collect();
  EXPECT_TRUE(outbox_.errors.empty()) << "the job was failed for its clients";
  clock_.Advance(options_.request_timeout);
  impl_->Tick();
  Reply(Take<GetJobRequest>(), spec_);
  Collect();
  EXPECT_EQ(outbox_.loads.size(), 1u);
}

TEST_F(WorkerImplTest, AnUnansweredUnitDoneIsSentAgain) {
  Ready(2);
  impl_->Tick();
  Lease({Grant(0, 1, spec_)});
  impl_->BatchSent(*outbox_.builds[0], true);
  ASSERT_EQ(UnitsDone().size(), 1u);
  clock_.Advance(options_.request_timeout);
  impl_->Tick();
  std::vector<UnitDoneRequest> again = UnitsDone();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].unit, 0u);
}

// Regression: credits for unknown jobs cost a worker one coordinator round trip each and a failed_jobs
// entry that never expired, and job names were not checked (a client key took a worker from 74 to 478 MB).
TEST_F(WorkerImplTest, CreditsForUnknownJobsAreBoundedAndAnsweredLocallyOnceFailed) {
  impl_->Register("tcp://w:1");
  Reply(Take<RegisterWorkerRequest>(), RegisterWorkerResponse{250, 1500});
  impl_->HandleCredit("peer-c", "", Credit{"bad name!", 0, "c-1", 2, 0});
  impl_->HandleCredit("peer-c", "", Credit{std::string(65, 'j'), 0, "c-1", 2, 0});
  impl_->HandleCredit("peer-c", "", Credit{"job", 0, std::string(257, 'c'), 2, 0});
  EXPECT_EQ(impl_->credit_refusals().malformed, 3u);
  for (int i = 0; i < 20; ++i) impl_->HandleCredit("peer-c", "", Credit{"j" + std::to_string(i), 0, "c-1", 2, 0});
  Collect();
  std::vector<RequestTracker::Pending> fetches;
  for (const auto& r : outbox_.requests) {
    if (std::holds_alternative<GetJobRequest>(r.body)) fetches.push_back(r);
  }
  EXPECT_EQ(fetches.size(), WorkerImpl::kMaxJobFetches);  // the others are refused, not fetched
  EXPECT_EQ(impl_->credit_refusals().busy, 20 - WorkerImpl::kMaxJobFetches);
  EXPECT_EQ(impl_->streams(), WorkerImpl::kMaxJobFetches);
  for (const auto& fetch : fetches) Reply(fetch, std::monostate{}, NotFoundError("unknown job"));
  outbox_.requests.clear();
  EXPECT_EQ(impl_->failed_jobs(), WorkerImpl::kMaxJobFetches);
  EXPECT_EQ(impl_->streams(), 0u);
  for (int i = 0; i < 100; ++i) impl_->HandleCredit("peer-c", "", Credit{"j0", 0, "c-1", 2, 0});
  EXPECT_EQ(Count<GetJobRequest>(), 0u) << "a known-failed job costs no coordinator request";
  EXPECT_EQ(impl_->credit_refusals().failed_job, 100u);
  clock_.Advance(WorkerImpl::kFailedJobRetry);
  impl_->Tick();
  EXPECT_EQ(impl_->failed_jobs(), 0u) << "failed jobs expire";
}

TEST_F(WorkerImplTest, FailedJobsAreCappedAndARankTheJobLacksIsRefused) {
  impl_->Register("tcp://w:1");
  Reply(Take<RegisterWorkerRequest>(), RegisterWorkerResponse{250, 1500});
  for (size_t i = 0; i < WorkerImpl::kMaxFailedJobs + 50; ++i) {
    impl_->HandleCredit("peer-c", "", Credit{"j" + std::to_string(i), 0, "c-1", 2, 0});
    Reply(Take<GetJobRequest>(), std::monostate{}, NotFoundError("unknown job"));
    clock_.Advance(Millis(1));
  }
  EXPECT_EQ(impl_->failed_jobs(), WorkerImpl::kMaxFailedJobs);
  impl_->HandleCredit("peer-c", "", Credit{"job", 0, "c-1", 2, 0});
  Reply(Take<GetJobRequest>(), spec_);
  impl_->JobLoaded("job", Job(spec_));
  // No such rank: the worker asks for the job again (it may have grown), finds it unchanged, and refuses the rank.
  Collect();
  const size_t loads = outbox_.loads.size();
  impl_->HandleCredit("peer-c", "", Credit{"job", spec_.world_size, "c-1", 2, 0});
  Reply(Take<GetJobRequest>(), spec_);
  Collect();
  EXPECT_EQ(outbox_.loads.size(), loads) << "an unchanged spec is not loaded again";
  EXPECT_EQ(impl_->credit_refusals().malformed, 1u);
  EXPECT_EQ(impl_->streams(), 1u);
  ASSERT_FALSE(outbox_.errors.empty());
  EXPECT_EQ(outbox_.errors.back().second.status.code(), StatusCode::kInvalidArgument);
  // Within kShapeRecheck the same credit is refused at once, without asking the coordinator.
  for (int i = 0; i < 100; ++i) impl_->HandleCredit("peer-c", "", Credit{"job", spec_.world_size, "c-1", 2, 0});
  EXPECT_EQ(Count<GetJobRequest>(), 0u);
  EXPECT_EQ(impl_->credit_refusals().malformed, 101u);
  EXPECT_EQ(impl_->streams(), 1u);
}

TEST_F(WorkerImplTest, ACreditForARankBeyondTheHeldPlanReloadsAJobResumedOnMoreRanks) {
  Ready(/*credits=*/2);  // one rank
  impl_->Tick();
  Collect();
  outbox_.requests.clear();
  // The job was resumed on two ranks: rank 1's client arrives before any grant tells this worker the spec changed.
  impl_->HandleCredit("peer-d", "", Credit{"job", 1, "c-2", 2, 0});
  Collect();
  EXPECT_TRUE(outbox_.errors.empty()) << "refused a rank of the job's new shape";
  EXPECT_EQ(impl_->streams(), 2u);
  RequestTracker::Pending get = Take<GetJobRequest>();
  impl_->Tick();
  EXPECT_EQ(Count<LeaseRequest>(), 0u) << "no lease for rank 1 until the job's spec has it";
  JobSpec grown = spec_;
  grown.world_size = 2;
  grown.origin_epoch = 0;
  grown.origin_offset = 4;
  Reply(get, grown);
  Collect();
  ASSERT_EQ(outbox_.loads.size(), 2u);
  impl_->JobLoaded("job", Job(grown));
  impl_->Tick();
  RequestTracker::Pending ask = Take<LeaseRequest>();
  EXPECT_EQ(std::get<LeaseRequest>(ask.body).rank, 1u);
  Collect();
  EXPECT_TRUE(outbox_.errors.empty());
  EXPECT_EQ(impl_->credit_refusals().malformed, 0u);
}

// A recheck that fails (the coordinator busy) refuses the rank it was for and nothing else: the job and its other
// streams stay. Streams waiting for a recheck count against kMaxStreams like any other.
TEST_F(WorkerImplTest, AFailedRecheckKeepsTheJobAndTheStreamCapHolds) {
  Ready(/*credits=*/2);
  impl_->HandleCredit("peer-d", "", Credit{"job", 1, "c-2", 2, 0});
  Reply(Take<GetJobRequest>(), std::monostate{}, InternalError("boom"));
  Collect();
  ASSERT_EQ(outbox_.errors.size(), 1u);
  EXPECT_EQ(outbox_.errors[0].second.rank, 1u);
  EXPECT_EQ(impl_->streams(), 1u);
  EXPECT_EQ(impl_->failed_jobs(), 0u) << "a failed recheck failed a job this worker serves";
  impl_->Tick();
  EXPECT_EQ(Count<LeaseRequest>(), 1u) << "rank 0 is still served";
  // Unanswered (the coordinator busy answers UNAVAILABLE, which leaves the request to its deadline): refused then.
  clock_.Advance(Millis(1000));
  impl_->HandleCredit("peer-d", "", Credit{"job", 1, "c-2", 2, 0});
  Reply(Take<GetJobRequest>(), std::monostate{}, UnavailableError("journal full"));
  EXPECT_EQ(impl_->streams(), 2u);
  clock_.Advance(options_.request_timeout + Millis(1));
  impl_->HandleCredit("peer-c", "", Credit{"job", 0, "c-1", 2, 0});  // rank 0's client refreshes its credit
  impl_->Tick();
  Collect();
  ASSERT_EQ(outbox_.errors.size(), 2u);
  EXPECT_EQ(outbox_.errors[1].second.rank, 1u);
  EXPECT_EQ(impl_->streams(), 1u);
  EXPECT_EQ(impl_->failed_jobs(), 0u);

  for (size_t i = impl_->streams(); i < WorkerImpl::kMaxStreams; ++i) {
    impl_->HandleCredit("peer-c", "", Credit{"job", 0, "c-fill-" + std::to_string(i), 2, 0});
  }
  ASSERT_EQ(impl_->streams(), WorkerImpl::kMaxStreams);
  clock_.Advance(Millis(1000));  // a recheck would be due
  Collect();
  outbox_.requests.clear();
  impl_->HandleCredit("peer-e", "", Credit{"job", 1, "c-3", 2, 0});
  EXPECT_EQ(Count<GetJobRequest>(), 0u);
  EXPECT_EQ(impl_->streams(), WorkerImpl::kMaxStreams);
  EXPECT_GE(impl_->credit_refusals().busy, 1u);
}

// Issue 29: a worker a client reported is refused its job's leases (PERMISSION_DENIED) while the job's other
// clients still credit it; it asked again at once, in a loop of refusals and warnings. Now it waits 5 s.
TEST_F(WorkerImplTest, ARefusedLeaseIsAskedForAgainOnlyAfterAPause) {
  Ready(4);
  impl_->Tick();
  Reply(Take<LeaseRequest>(), std::monostate{}, PermissionDeniedError("worker w-1 was reported"));
  for (int i = 0; i < 5; ++i) {  // the client keeps crediting it, every second
    clock_.Advance(i < 4 ? Millis(1000) : Millis(999));
    impl_->HandleCredit("peer-c", "", Credit{"job", 0, "c-1", 4, 0});
    impl_->Tick();
  }
  EXPECT_EQ(Count<LeaseRequest>(), 0u);
  clock_.Advance(Millis(1));
  impl_->Tick();
  EXPECT_EQ(Count<LeaseRequest>(), 1u);
}

}  // namespace
}  // namespace stoker::worker
