// ClientImpl on a fake clock, with no sockets and no threads: the test plays the coordinator (answering the requests
// the Impl asks its adapter to send) and the workers (batches and errors), and reads what the Impl decided from its
// Outbox and from the ClientCore it works over, as the application would.
#include "client/src/client_impl.h"

#include <gtest/gtest.h>

#include "auth/data_tickets.h"
#include "client/src/rank_claim.h"
#include "tests/support/outbox_requests.h"
#include "tests/support/specs.h"

namespace stoker::client {
namespace {

class ClientImplTest : public ::testing::Test {
 protected:
  ClientImplTest() : clock_(std::make_shared<FakeClock>()), core_(std::make_shared<ClientCore>(clock_, "c-1")) {
    options_.coordinator = "tcp://coordinator:7400";
    options_.job = "j";
    options_.spec = spec_;
    options_.prefetch = 4;
    options_.credits_per_worker = 2;
    options_.connect_timeout = Millis(10000);
  }

  // Made at first use, so that a test may change the options before.
  ClientImpl& impl() {
    if (!impl_) impl_ = std::make_unique<ClientImpl>(options_, *core_, curve_);
    return *impl_;
  }

  static WorkerInfo Worker(int i, const std::string& endpoint = "") {
    return WorkerInfo{"w-" + std::to_string(i),
                      endpoint.empty() ? "tcp://10.0.0." + std::to_string(i) + ":7401" : endpoint, "", ""};
  }

  RegisterClientResponse Registered(std::vector<WorkerInfo> workers) {
    RegisterClientResponse r;
    r.spec = spec_;
    r.steps_per_epoch = 3;
    r.samples_per_epoch = 6;
    r.heartbeat_interval_ms = 250;
    r.workers = std::move(workers);
    r.membership_version = 1;
    return r;
  }

  // Claims the rank, starts the core as Connect does, and starts the session with `workers` listed.
  void Start(std::vector<WorkerInfo> workers, std::optional<ResumePoint> resume = std::nullopt) {
    impl().Register(resume);
    claimed_ = Take<RegisterClientRequest>();
    Reply(claimed_, Registered(std::move(workers)));
    ASSERT_TRUE(impl().claim().has_value() && impl().claim()->ok());
    auto plan = Plan::Make(spec_, 6);  // 3 steps per epoch
    ASSERT_TRUE(plan.ok());
    plan_.emplace(*plan);
    core_->Start(ClientCore::Session{spec_, *plan, 3, options_.prefetch, 0});
    impl().Start(**impl().claim());
    Collect();
  }

  // Time passes, and the Impl looks at it.
  void Pass(Duration d) {
    clock_->Advance(d);
    impl().Tick();
  }

  void Collect() {
    ClientImpl::Outbox out = impl().TakeOutbox();
    for (auto& r : out.requests) outbox_.requests.push_back(std::move(r));
    for (auto& o : out.opens) outbox_.opens.push_back(std::move(o));
    for (auto& c : out.credits) outbox_.credits.push_back(std::move(c));
    for (auto& c : out.closes) outbox_.closes.push_back(std::move(c));
  }

  void Clear() {
    Collect();
    outbox_ = {};
  }

  // The latest request of type T the Impl asked to send (requests of other types are kept for later), and how many
  // of that type are waiting.
  template <typename T>
  RequestTracker::Pending Take() {
    Collect();
    std::optional<RequestTracker::Pending> latest = testing::TakeLatest<T>(outbox_.requests);
    if (!latest) ADD_FAILURE() << "no request of the expected kind was sent";
    return latest.value_or(RequestTracker::Pending{});
  }
  template <typename T>
  size_t Count() {
    Collect();
    return testing::CountOf<T>(outbox_.requests);
  }

  void Reply(const RequestTracker::Pending& request, ReplyBody body, Status status = Status::Ok()) {
    impl().HandleReply(DecodedReply{request.id, std::move(status), std::move(body)});
    Collect();
  }

  // Answers the latest heartbeat, listing every unit under `attempt`.
  void AnswerHeartbeat(uint64_t attempt = 1) {
    ClientHeartbeatResponse r;
    r.membership_version = 1;
    for (uint64_t u = 0; u < plan_->total_units(); ++u) r.leases.push_back({"j", 0, u, attempt});
    Reply(Take<ClientHeartbeatRequest>(), r);
  }

  // Batch g as an honest worker makes it: the plan's samples at their places.
  BatchHeader Header(uint64_t g, uint64_t attempt = 1) {
    BatchHeader h;
    h.job = "j";
    h.epoch = static_cast<uint32_t>(g / 3);
    h.index = g % 3;
    h.unit = g;
    h.attempt = attempt;
    h.count = h.height = h.width = 2;
    h.channels = 3;
    std::vector<PlannedSample> planned(2);
    plan_->BatchSamples(h.epoch, 0, h.index, planned);
    for (const PlannedSample& p : planned) {
      h.labels.push_back(0);
      h.sample_ids.push_back(p.sample_id);
      h.flags.push_back(p.padding ? kSampleFlagPadding : 0);
    }
    h.payload_bytes = spec_.BatchBytes();
    return h;
  }

  // What a worker sent, as the adapter decoded it: a batch, an error the worker reports, or frames it refused.
  void Arrive(StatusOr<WorkerMessage> message) {
    std::vector<zmq::message_t> payload;
    payload.emplace_back(spec_.BatchBytes());
    impl().HandleWorkerMessage(arriving_from_, std::move(message), std::move(payload));
  }
  void Arrive(BatchHeader header) { Arrive(WorkerMessage(std::move(header))); }
  void Arrive(const DataError& error) { Arrive(WorkerMessage(error)); }

  // The worker ids given `credits`, and the connections opened ("id endpoint"), since the outbox was cleared.
  std::vector<std::string> Credited(uint32_t credits) {
    Collect();
    std::vector<std::string> ids;
    for (const auto& [id, credit] : outbox_.credits) {
      if (credit.credits == credits) ids.push_back(id);
    }
    return ids;
  }
  std::vector<std::string> Opened() {
    Collect();
    std::vector<std::string> ids;
    for (const WorkerInfo& w : outbox_.opens) ids.push_back(w.worker_id + " " + w.data_endpoint);
    return ids;
  }

  JobSpec spec_ = testing::TinyJobSpec();
  ClientOptions options_;
  bool curve_ = false;
  std::shared_ptr<FakeClock> clock_;
  std::shared_ptr<ClientCore> core_;
  std::unique_ptr<ClientImpl> impl_;
  std::optional<Plan> plan_;
  RequestTracker::Pending claimed_;  // the registration Start answered
  std::string arriving_from_ = "w-1";  // the connection Arrive's messages come on
  ClientImpl::Outbox outbox_;
};

using Strings = std::vector<std::string>;

// ---- claiming the rank -----------------------------------------------------------------------------------------

TEST_F(ClientImplTest, AnUnansweredClaimIsSentAgainEveryTwoSecondsUntilTheConnectTimeout) {
  options_.connect_timeout = Millis(5000);
  impl().Register(std::nullopt);
  EXPECT_EQ(std::get<RegisterClientRequest>(Take<RegisterClientRequest>().body).window, 4u);
  Pass(Millis(1999));
  EXPECT_EQ(Count<RegisterClientRequest>(), 0u);
  Pass(Millis(1));
  EXPECT_EQ(Count<RegisterClientRequest>(), 1u);
  Take<RegisterClientRequest>();
  Pass(Millis(2000));
  Take<RegisterClientRequest>();
  EXPECT_FALSE(impl().claim().has_value());
  Pass(Millis(1000));  // the connect timeout: no answer at all
  ASSERT_TRUE(impl().claim().has_value());
  EXPECT_EQ(impl().claim()->status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(impl().claim()->status().message().find("tcp://coordinator:7400 within 5000 ms"), std::string::npos)
      << impl().claim()->status().message();
  EXPECT_EQ(Count<RegisterClientRequest>(), 0u);
}

TEST_F(ClientImplTest, AnAnswerToAnyAskDecidesTheClaim) {
  impl().Register(std::nullopt);
  RequestTracker::Pending first = Take<RegisterClientRequest>();
  Pass(Millis(2000));
  RequestTracker::Pending second = Take<RegisterClientRequest>();
  Reply(first, Registered({}));  // late, but the coordinator's word
  ASSERT_TRUE(impl().claim().has_value());
  EXPECT_TRUE(impl().claim()->ok());
  Reply(second, std::monostate{}, NotFoundError("no such job"));  // decided already
  EXPECT_TRUE(impl().claim()->ok());
}

TEST_F(ClientImplTest, ARefusalOrAMalformedAnswerEndsTheClaim) {
  impl().Register(std::nullopt);
  Reply(Take<RegisterClientRequest>(), std::monostate{}, NotFoundError("no job j and no spec"));
  ASSERT_TRUE(impl().claim().has_value());
  EXPECT_EQ(impl().claim()->status().code(), StatusCode::kNotFound);
  impl().Register(std::nullopt);
  Reply(Take<RegisterClientRequest>(), std::monostate{});
  EXPECT_EQ(impl().claim()->status().code(), StatusCode::kInternal);
  impl().Register(std::nullopt);  // claim_timeout 0: a held rank is refused at once
  Reply(Take<RegisterClientRequest>(), std::monostate{}, AlreadyExistsError("rank 0 is held by c-9"));
  EXPECT_EQ(impl().claim()->status().code(), StatusCode::kAlreadyExists);
}

TEST_F(ClientImplTest, AnUnavailableCoordinatorIsAskedAgainAtOnce) {
  impl().Register(std::nullopt);
  Reply(Take<RegisterClientRequest>(), std::monostate{}, UnavailableError("journal full"));
  RequestTracker::Pending second = Take<RegisterClientRequest>();
  Pass(Millis(2000));
  RequestTracker::Pending third = Take<RegisterClientRequest>();
  Reply(second, std::monostate{}, UnavailableError("journal full"));  // an earlier ask: the third is in flight
  EXPECT_EQ(Count<RegisterClientRequest>(), 0u);
  EXPECT_FALSE(impl().claim().has_value());
  Reply(third, Registered({}));
  EXPECT_TRUE(impl().claim()->ok());
}

TEST_F(ClientImplTest, AHeldRankIsAskedForAgainUntilTheClaimTimeout) {
  options_.claim_timeout = Millis(1000);
  impl().Register(std::nullopt);
  Reply(Take<RegisterClientRequest>(), std::monostate{}, AlreadyExistsError("rank 0 is held by c-9"));
  EXPECT_FALSE(impl().claim().has_value());
  Pass(Millis(249));
  EXPECT_EQ(Count<RegisterClientRequest>(), 0u);
  Pass(Millis(1));
  RequestTracker::Pending again = Take<RegisterClientRequest>();
  clock_->Advance(Millis(800));  // past the claim timeout: the next refusal is the answer
  Reply(again, std::monostate{}, AlreadyExistsError("rank 0 is held by c-9"));
  ASSERT_TRUE(impl().claim().has_value());
  EXPECT_EQ(impl().claim()->status().code(), StatusCode::kAlreadyExists);
}

TEST_F(ClientImplTest, AClaimNoSessionTookOverGivesTheRankBackOnce) {
  int given_back = 0;
  { RankClaim claim(Registered({}), [&] { ++given_back; }); }
  EXPECT_EQ(given_back, 1);
  {
    RankClaim claim(Registered({}), [&] { ++given_back; });
    RankClaim moved(std::move(claim));  // given back once, by the claim that holds it
  }
  EXPECT_EQ(given_back, 2);
  {
    RankClaim claim(Registered({Worker(1)}), [&] { ++given_back; });
    RegisterClientResponse registered = claim.Commit();
    EXPECT_EQ(registered.workers.size(), 1u);
    EXPECT_FALSE(claim.held());
  }
  EXPECT_EQ(given_back, 2);  // committed: the session gives it back
}

// ---- workers and credits ---------------------------------------------------------------------------------------

TEST_F(ClientImplTest, StartConnectsToTheListedWorkersAndCreditsAWholeUnit) {
  spec_.batches_per_unit = 3;  // more than credits_per_worker: a worker must be able to hold a unit
  options_.payload_frame_bytes = 64 << 10;
  Start({Worker(1), Worker(2)});
  EXPECT_EQ(Opened(), (Strings{"w-1 tcp://10.0.0.1:7401", "w-2 tcp://10.0.0.2:7401"}));
  ASSERT_EQ(outbox_.credits.size(), 2u);
  // The credit carries the check of the secret the registration sent, and never the secret.
  const std::string& secret = std::get<RegisterClientRequest>(claimed_.body).session;
  ASSERT_EQ(secret.size(), kSessionSecretBytes);
  EXPECT_EQ(outbox_.credits[0].second, (Credit{"j", 0, "c-1", 3, 64 << 10, SessionCheck(secret)}));
  EXPECT_EQ(Credited(3), (Strings{"w-1", "w-2"}));
  EXPECT_EQ(core_->Stats().connected_workers, 2u);
  EXPECT_EQ(impl().expectation().max_frame_bytes, uint64_t{64 << 10});
  EXPECT_EQ(impl().expectation().steps_per_epoch, 3u);
}

TEST_F(ClientImplTest, CreditsAreRefreshedEverySecond) {
  Start({Worker(1), Worker(2)});
  Clear();
  Pass(Millis(999));
  EXPECT_TRUE(Credited(2).empty());
  Pass(Millis(1));
  EXPECT_EQ(Credited(2), (Strings{"w-1", "w-2"}));
}

TEST_F(ClientImplTest, AtMostMaxWorkersAreConnectedAndBadListingsAreRefused) {
  options_.max_workers = 2;
  curve_ = true;
  // A secure client needs a ticket and a seal key for a worker's data port: a CURVE key alone (a data port of an
  // older version), a ticket without a seal key, or a seal key of the wrong size will not do.
  const std::string key(40, 'k'), ticket(64, 't'), seal(32, 's');
  Start({WorkerInfo{"w-0", "tcp://10.0.0.0:7401", "", ticket, seal}, WorkerInfo{"w-1", "udp://10.0.0.1:7401", "", ticket, seal},
         WorkerInfo{"w-2", "tcp://10.0.0.2:7401", key, "", ""}, WorkerInfo{"w-3", "tcp://10.0.0.3:7401", "", ticket, ""},
         WorkerInfo{"w-4", "tcp://10.0.0.4:7401", "", ticket, std::string(31, 's')},
         WorkerInfo{"w-5", "tcp://10.0.0.5:7401", "", ticket, seal}, WorkerInfo{"w-6", "tcp://10.0.0.6:7401", "", ticket, seal}});
  EXPECT_EQ(Opened(), (Strings{"w-0 tcp://10.0.0.0:7401", "w-5 tcp://10.0.0.5:7401"}));
  EXPECT_EQ(impl().connections(), 2u);
  EXPECT_EQ(core_->Stats().connected_workers, 2u);
}

TEST_F(ClientImplTest, IpcWorkersAreConnectedOnlyThroughAnIpcCoordinator) {
  // From a tcp:// coordinator an ipc:// listing would point this client at a socket on its own host: refused.
  Start({WorkerInfo{"w-0", "ipc:///tmp/w-0.sock"}, WorkerInfo{"w-1", "tcp://10.0.0.1:7401"}});
  EXPECT_EQ(Opened(), (Strings{"w-1 tcp://10.0.0.1:7401"}));
}

TEST_F(ClientImplTest, AnIpcCoordinatorsIpcWorkersAreConnected) {
  options_.coordinator = "ipc:///tmp/stoker-local-x/coordinator.sock";  // local mode
  Start({WorkerInfo{"w-0", "ipc:///tmp/stoker-local-x/w-0.sock"}, WorkerInfo{"w-1", "ipc://relative.sock"}});
  EXPECT_EQ(Opened(), (Strings{"w-0 ipc:///tmp/stoker-local-x/w-0.sock"}));
}

TEST_F(ClientImplTest, MembershipFollowsTheHeartbeatReplies) {
  Start({Worker(1), Worker(2)});
  Clear();
  impl().Tick();
  ClientHeartbeatResponse unchanged;
  unchanged.workers = {Worker(7)};  // not marked changed: ignored
  Reply(Take<ClientHeartbeatRequest>(), unchanged);
  EXPECT_TRUE(Opened().empty());
  Pass(Millis(250));
  ClientHeartbeatResponse changed;
  changed.membership_version = 2;
  changed.workers_changed = true;
  changed.workers = {Worker(1, "tcp://10.0.1.1:7401"), Worker(3)};
  Reply(Take<ClientHeartbeatRequest>(), changed);
  EXPECT_EQ(Opened(), (Strings{"w-1 tcp://10.0.1.1:7401", "w-3 tcp://10.0.0.3:7401"}));
  EXPECT_EQ(Credited(2), (Strings{"w-1", "w-3"}));
  EXPECT_EQ(outbox_.closes, (Strings{"w-2"}));
  Pass(Millis(250));
  EXPECT_EQ(std::get<ClientHeartbeatRequest>(Take<ClientHeartbeatRequest>().body).membership_version, 2u);
}

TEST_F(ClientImplTest, AConnectionThatCouldNotOpenIsNotCounted) {
  Start({Worker(1), Worker(2)});
  impl().OpenFailed("w-2", UnavailableError("cannot connect to worker w-2: Too many open files"));
  EXPECT_EQ(impl().connections(), 1u);
  EXPECT_EQ(core_->Stats().connected_workers, 1u);
  Clear();
  Pass(Millis(1000));
  EXPECT_EQ(Credited(2), (Strings{"w-1"}));
}

// ---- heartbeats and acks ---------------------------------------------------------------------------------------

TEST_F(ClientImplTest, HeartbeatsGoEveryIntervalAndAcksPromptlyButCoalesced) {
  Start({Worker(1)});
  impl().Tick();  // the first heartbeat at once
  AnswerHeartbeat();
  Pass(Millis(249));
  EXPECT_EQ(Count<ClientHeartbeatRequest>(), 0u);
  Pass(Millis(1));
  EXPECT_EQ(Count<ClientHeartbeatRequest>(), 1u);
  Take<ClientHeartbeatRequest>();
  Arrive(Header(0));  // something to acknowledge, just after the last heartbeat
  Pass(Millis(1));
  EXPECT_EQ(Count<ClientHeartbeatRequest>(), 0u) << "acks are coalesced to one per 2 ms";
  Pass(Millis(1));
  ClientHeartbeatRequest ack = std::get<ClientHeartbeatRequest>(Take<ClientHeartbeatRequest>().body);
  EXPECT_EQ(ack.received_watermark, 1u);
  EXPECT_EQ(ack.consumed, 0u);
  Pass(Millis(2));
  EXPECT_EQ(Count<ClientHeartbeatRequest>(), 0u) << "nothing new: the next one at the interval";
}

TEST_F(ClientImplTest, ABatchIsConfirmedByTheReplyToAHeartbeatThatLeftAfterIt) {
  Start({Worker(1)});
  impl().Tick();
  RequestTracker::Pending before = Take<ClientHeartbeatRequest>();
  Arrive(Header(0, /*attempt=*/4));  // leased after the last reply: waits, unconfirmed
  ClientHeartbeatResponse listed;
  listed.leases = {{"j", 0, 0, 4}};
  Reply(before, listed);  // this heartbeat left before the batch came: it cannot speak for it
  EXPECT_EQ(core_->Stats().batches_received, 0u);
  Pass(Millis(2));
  Reply(Take<ClientHeartbeatRequest>(), listed);
  EXPECT_EQ(core_->Stats().batches_received, 1u);
  auto taken = core_->Next(Millis(1));
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(taken->batch->attempt, 4u);
}

TEST_F(ClientImplTest, RepliesKeepTheClientReady) {
  Start({});
  clock_->Advance(Millis(2001));
  EXPECT_EQ(core_->Ready().code(), StatusCode::kUnavailable);
  impl().Tick();
  Reply(Take<ClientHeartbeatRequest>(), ClientHeartbeatResponse{});
  EXPECT_TRUE(core_->Ready().ok());
}

// ---- what workers send -----------------------------------------------------------------------------------------

TEST_F(ClientImplTest, BatchesThatAreNotThePlansAreDropped) {
  Start({Worker(1)});
  impl().Tick();
  AnswerHeartbeat();
  BatchHeader other = Header(0);
  other.sample_ids[1] = other.sample_ids[0];  // another sample at slot 1
  Arrive(std::move(other));
  BatchHeader padded = Header(0);
  padded.flags[0] ^= kSampleFlagPadding;  // claims a real sample is padding
  Arrive(std::move(padded));
  Arrive(InvalidArgumentError("payload of 3 bytes, 24 announced"));
  ClientStats s = core_->Stats();
  EXPECT_EQ(s.dropped_wrong_samples, 2u);
  EXPECT_EQ(s.dropped_bad_frame, 1u);
  EXPECT_EQ(s.batches_received, 0u);
  Arrive(Header(0));
  EXPECT_EQ(core_->Stats().batches_received, 1u);
}

// Issue 29: a lying worker's bad batches each cost a unit's ack timeout, and its units kept coming back to it. Now
// its first batch that is not the plan's disconnects it for good, and every heartbeat reports it.
TEST_F(ClientImplTest, AWorkerWhoseBatchIsNotThePlansIsDisconnectedForGoodAndReported) {
  Start({Worker(1), Worker(2)});
  impl().Tick();
  AnswerHeartbeat();
  Clear();
  BatchHeader other = Header(0);
  other.sample_ids[1] = other.sample_ids[0];
  Arrive(std::move(other));
  EXPECT_EQ(Credited(0), (Strings{"w-1"}));
  EXPECT_EQ(outbox_.closes, (Strings{"w-1"}));
  EXPECT_EQ(impl().connections(), 1u);
  Pass(Millis(250));
  EXPECT_EQ(std::get<ClientHeartbeatRequest>(Take<ClientHeartbeatRequest>().body).rejected_workers,
            (Strings{"w-1"}));

  ClientHeartbeatResponse listed;  // listed again, as a coordinator that restarted would
  listed.membership_version = 2;
  listed.workers_changed = true;
  listed.workers = {Worker(1), Worker(2), Worker(3)};
  Clear();
  Pass(Millis(250));
  Reply(Take<ClientHeartbeatRequest>(), listed);
  EXPECT_EQ(Opened(), (Strings{"w-3 tcp://10.0.0.3:7401"}));
  Pass(Millis(250));
  EXPECT_EQ(std::get<ClientHeartbeatRequest>(Take<ClientHeartbeatRequest>().body).rejected_workers,
            (Strings{"w-1"}));
}

// Issue 29: 512 made-up workers listed ahead of the real ones held every place a client had. With the list longer
// than max_workers, while no batch comes for 10 s, connections open that long make room for the next listed
// workers, and those passed over get their turn again once every listed worker has had one.
TEST_F(ClientImplTest, WhileStarvedConnectionsMakeRoomForTheRestOfALongList) {
  options_.max_workers = 2;
  Start({Worker(1), Worker(2), Worker(3), Worker(4)});
  EXPECT_EQ(Opened(), (Strings{"w-1 tcp://10.0.0.1:7401", "w-2 tcp://10.0.0.2:7401"}));
  Clear();
  Pass(Millis(9999));
  EXPECT_TRUE(Opened().empty()) << "a session's workers have 10 s to deliver";
  Pass(Millis(1001));
  EXPECT_EQ(Opened(), (Strings{"w-3 tcp://10.0.0.3:7401", "w-4 tcp://10.0.0.4:7401"}));
  EXPECT_EQ(outbox_.closes, (Strings{"w-1", "w-2"}));
  EXPECT_EQ(Credited(0), (Strings{"w-1", "w-2"}));
  Clear();
  Pass(Millis(9000));
  EXPECT_TRUE(Opened().empty());
  Pass(Millis(1000));
  EXPECT_EQ(Opened(), (Strings{"w-1 tcp://10.0.0.1:7401", "w-2 tcp://10.0.0.2:7401"})) << "every one had a turn";
  EXPECT_EQ(outbox_.closes, (Strings{"w-3", "w-4"}));
  EXPECT_EQ(impl().connections(), 2u);
}

// A client that is fed keeps its connections, however long the list (a pool larger than max_workers).
TEST_F(ClientImplTest, AFedClientKeepsItsConnections) {
  options_.max_workers = 2;
  Start({Worker(1), Worker(2), Worker(3)});
  impl().Tick();
  AnswerHeartbeat();
  Clear();
  for (uint64_t g = 0; g < 6; ++g) {
    Pass(Millis(5000));
    Arrive(Header(g));
  }
  EXPECT_TRUE(Opened().empty());
  EXPECT_TRUE(outbox_.closes.empty());
}

// A worker whose connection could not be opened (out of descriptors) is tried again, no sooner than 10 s later.
TEST_F(ClientImplTest, AWorkerThatCouldNotBeOpenedIsTriedAgainLater) {
  Start({Worker(1), Worker(2)});
  impl().OpenFailed("w-2", UnavailableError("cannot connect to worker w-2: Too many open files"));
  Clear();
  Pass(Millis(9999));
  EXPECT_TRUE(Opened().empty());
  Pass(Millis(1001));
  EXPECT_EQ(Opened(), (Strings{"w-2 tcp://10.0.0.2:7401"}));
}

TEST_F(ClientImplTest, AtMost64NewConnectionsAreOpenedASecond) {
  std::vector<WorkerInfo> many;
  for (int i = 0; i < 100; ++i) many.push_back(Worker(i, "tcp://10.0.1." + std::to_string(i) + ":7401"));
  Start(many);
  EXPECT_EQ(Opened().size(), 64u);
  Clear();
  Pass(Millis(1));
  EXPECT_TRUE(Opened().empty());
  Pass(Millis(999));
  EXPECT_EQ(Opened().size(), 36u);
  EXPECT_EQ(impl().connections(), 100u);
}

TEST_F(ClientImplTest, WorkersThatCannotServeEndTheStreamAfterTheGrace) {
  Start({Worker(1)});
  impl().Tick();
  AnswerHeartbeat();
  const DataError cannot{"j", 0, NotFoundError("manifest /m.stoker not found")};
  Arrive(cannot);
  clock_->Advance(Millis(10000));
  Arrive(Header(0));  // a batch came after all: the grace starts again at the next error
  Arrive(cannot);
  clock_->Advance(Millis(15000));
  Arrive(cannot);
  EXPECT_EQ(core_->Next(Millis(1)).status().code(), StatusCode::kOk);  // batch 0
  EXPECT_EQ(core_->Next(Millis(1)).status().code(), StatusCode::kDeadlineExceeded);
  clock_->Advance(Millis(1));
  Arrive(cannot);
  EXPECT_EQ(core_->Stats().worker_errors, 4u);
  Status ended = core_->Next(Millis(1)).status();
  EXPECT_EQ(ended.code(), StatusCode::kNotFound);
  EXPECT_NE(ended.message().find("no worker can serve this job (for 15 s)"), std::string::npos) << ended.message();
}

// ---- the session -----------------------------------------------------------------------------------------------

TEST_F(ClientImplTest, ALostSessionIsClaimedAgainWithoutTheResumePoint) {
  Start({Worker(1)}, ResumePoint{3, 42});
  ASSERT_TRUE(std::get<RegisterClientRequest>(claimed_.body).resume.has_value());
  impl().Tick();
  Reply(Take<ClientHeartbeatRequest>(), std::monostate{}, AbortedError("not the holder"));
  RequestTracker::Pending again = Take<RegisterClientRequest>();
  EXPECT_FALSE(std::get<RegisterClientRequest>(again.body).resume.has_value());
  Pass(Millis(250));
  Reply(Take<ClientHeartbeatRequest>(), std::monostate{}, NotFoundError("no such client"));
  EXPECT_EQ(Count<RegisterClientRequest>(), 0u) << "one re-registration at a time";
  Clear();
  Reply(again, Registered({Worker(2)}));  // a new coordinator session, with its own workers
  EXPECT_EQ(Opened(), (Strings{"w-2 tcp://10.0.0.2:7401"}));
  EXPECT_EQ(outbox_.closes, (Strings{"w-1"}));
  EXPECT_FALSE(impl().session_lost());
}

TEST_F(ClientImplTest, AReRegistrationGivenUpOnMaySendAnother) {
  Start({Worker(1)});
  impl().Tick();
  Reply(Take<ClientHeartbeatRequest>(), std::monostate{}, AbortedError("not the holder"));
  Take<RegisterClientRequest>();
  Pass(Millis(5000));  // unanswered past its deadline
  Reply(Take<ClientHeartbeatRequest>(), std::monostate{}, AbortedError("not the holder"));
  EXPECT_EQ(Count<RegisterClientRequest>(), 1u);
  Reply(Take<RegisterClientRequest>(), std::monostate{}, UnavailableError("journal full"));
  EXPECT_FALSE(impl().session_lost()) << "the coordinator could not act: not an answer";
  EXPECT_TRUE(core_->Ready().ok());
}

TEST_F(ClientImplTest, ARankTakenOverEndsTheSession) {
  Start({Worker(1), Worker(2)});
  impl().Tick();
  Reply(Take<ClientHeartbeatRequest>(), std::monostate{}, AbortedError("rank 0 is held by c-9"));
  RequestTracker::Pending again = Take<RegisterClientRequest>();
  Clear();
  Reply(again, std::monostate{}, AlreadyExistsError("rank 0 is held by c-9"));
  EXPECT_EQ(Credited(0), (Strings{"w-1", "w-2"}));  // the workers stop making batches for us
  EXPECT_EQ(outbox_.closes, (Strings{"w-1", "w-2"}));
  EXPECT_TRUE(impl().session_lost());
  Status lost = core_->Next(Millis(1)).status();
  EXPECT_EQ(lost.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(lost.message().find("this client lost its rank"), std::string::npos) << lost.message();
  Clear();
  Pass(Millis(1000));
  EXPECT_EQ(Count<ClientHeartbeatRequest>(), 0u) << "no more acks";
  EXPECT_TRUE(outbox_.credits.empty()) << "no more credits";
}

TEST_F(ClientImplTest, AJobReplannedWhileTheSessionWasLostEndsItAndGivesTheRankBack) {
  Start({Worker(1)});
  impl().Tick();
  Reply(Take<ClientHeartbeatRequest>(), std::monostate{}, AbortedError("rank 0 has another session"));
  RequestTracker::Pending again = Take<RegisterClientRequest>();
  Clear();
  RegisterClientResponse replanned = Registered({Worker(1)});
  replanned.spec.world_size = 3;  // a live shape change by the job's other ranks
  replanned.spec.origin_offset = 2;
  Reply(again, replanned);
  EXPECT_TRUE(impl().session_lost());
  Status lost = core_->Next(Millis(1)).status();
  EXPECT_EQ(lost.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(lost.message().find("changed shape to 3 ranks"), std::string::npos) << lost.message();
  EXPECT_EQ(Count<DeregisterRequest>(), 1u) << "the rank claimed in the new plan is given back";
}

TEST_F(ClientImplTest, LeavingWithdrawsEveryCreditAndDeregisters) {
  Start({Worker(1), Worker(2)});
  Clear();
  const uint64_t id = impl().Leave();
  EXPECT_EQ(Credited(0), (Strings{"w-1", "w-2"}));
  RequestTracker::Pending deregister = Take<DeregisterRequest>();
  EXPECT_EQ(deregister.id, id);
  EXPECT_EQ(std::get<DeregisterRequest>(deregister.body).sender_id, "c-1");
  EXPECT_TRUE(impl().IsPending(id));
  Reply(deregister, std::monostate{});
  EXPECT_FALSE(impl().IsPending(id));
}

}  // namespace
}  // namespace stoker::client
