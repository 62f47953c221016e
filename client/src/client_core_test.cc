// ClientCore on a fake clock, with no sockets: the test inserts batches as the I/O thread would and takes them as
// the application does. Waits, steps and stalls are measured on the clock the test moves, so they are exact.
#include "client/src/client_core.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/support/specs.h"

namespace stoker::client {
namespace {

class ClientCoreTest : public ::testing::Test {
 protected:
  ClientCoreTest() : clock_(std::make_shared<FakeClock>()), core_(std::make_shared<ClientCore>(clock_, "c-1")) {
    auto plan = Plan::Make(spec_, 6);  // 3 steps per epoch
    EXPECT_TRUE(plan.ok());
    core_->Start(ClientCore::Session{spec_, *plan, 3, /*window_size=*/4, /*start_batch=*/0});
    // The coordinator lists every unit under attempt 1 (as the reply to the first heartbeat would).
    std::vector<LeaseRef> leases;
    for (uint64_t u = 0; u < plan->total_units(); ++u) leases.push_back({"j", 0, u, 1});
    core_->NoteLeases(leases, HeartbeatSent(*core_));
  }

  // A heartbeat leaves, acknowledging what the window holds: its number.
  static uint64_t HeartbeatSent(ClientCore& core) {
    ClientHeartbeatRequest heartbeat;
    return core.TakeAck(heartbeat);
  }

  // `quarantined`: flags and reasons per slot (empty reason: flagged without one, as an older worker sends).
  PrefetchWindow::Outcome Arrive(uint64_t g, uint64_t attempt = 1,  // NOLINT: a test helper
                                 std::vector<std::optional<std::string>> quarantined = {}) {
    BatchHeader h;
    h.epoch = static_cast<uint32_t>(g / 3);
    h.index = g % 3;
    h.unit = g;
    h.attempt = attempt;
    h.count = 2;
    h.labels = {0, 1};
    h.sample_ids = {2 * g, 2 * g + 1};
    h.flags = {0, 0};
    for (size_t slot = 0; slot < quarantined.size(); ++slot) {
      if (!quarantined[slot]) continue;
      h.flags[slot] = kSampleFlagQuarantined;
      if (!quarantined[slot]->empty()) h.quarantine_reasons.push_back(*quarantined[slot]);
    }
    h.payload_bytes = spec_.BatchBytes();
    std::vector<zmq::message_t> payload;
    payload.emplace_back(spec_.BatchBytes());
    return core_->Accept(MakeReceivedBatch(std::move(h), 3, std::move(payload), true));
  }

  std::unique_ptr<ReceivedBatch> TakeBatch() {
    auto taken = core_->Next(std::chrono::seconds(5));
    EXPECT_TRUE(taken.ok()) << taken.status().ToString();
    if (!taken.ok()) return nullptr;
    EXPECT_EQ(taken->kind, DeliveryKind::kBatch);
    return std::move(taken->batch);
  }

  JobSpec spec_ = testing::TinyJobSpec();
  std::shared_ptr<FakeClock> clock_;
  std::shared_ptr<ClientCore> core_;
};

TEST_F(ClientCoreTest, StepsAreMeasuredOnTheClientsClock) {
  for (uint64_t g = 0; g < 3; ++g) ASSERT_EQ(Arrive(g), PrefetchWindow::Outcome::kAccepted);
  auto b0 = TakeBatch();
  clock_->Advance(Millis(40));  // the training step
  auto b1 = TakeBatch();
  clock_->Advance(Millis(60));
  auto b2 = TakeBatch();
  ClientStats s = core_->Stats();
  EXPECT_DOUBLE_EQ(s.step_seconds, 0.1);
  EXPECT_DOUBLE_EQ(s.wait_seconds, 0.0);  // every batch was there already: no wait, no stall
  EXPECT_DOUBLE_EQ(s.stall_seconds, 0.0);
  EXPECT_EQ(s.batches_delivered, 3u);
  EXPECT_EQ(s.samples_delivered, 6u);
  EXPECT_EQ(s.position, 3u);
}

// What the client's threads spent taking batches in goes with its heartbeats, cumulative, to the coordinator's stage
// counters (stoker_coordinator_job_stage_seconds_total); Shares.ThreeJobs... sees a sealed client's there.
TEST_F(ClientCoreTest, TheTimeTakingBatchesInGoesWithEachHeartbeat) {
  core_->CountReceiveSeconds(0.25);
  ClientHeartbeatRequest heartbeat;
  core_->TakeAck(heartbeat);
  EXPECT_DOUBLE_EQ(heartbeat.receive_seconds, 0.25);
  core_->CountReceiveSeconds(0.5);
  core_->TakeAck(heartbeat);
  EXPECT_DOUBLE_EQ(heartbeat.receive_seconds, 0.75);
  EXPECT_DOUBLE_EQ(heartbeat.h2d_seconds, 0) << "the host path copies nothing to a device";
  EXPECT_DOUBLE_EQ(core_->Stats().receive_seconds, 0.75);
}

TEST_F(ClientCoreTest, EpochsEndBetweenTheirBatchesAndTheJobAfterTheLast) {
  std::vector<std::string> seen;
  for (uint64_t g = 0; g < 6; ++g) {
    ASSERT_EQ(Arrive(g), PrefetchWindow::Outcome::kAccepted);
    while (true) {
      auto taken = core_->Next(std::chrono::milliseconds(1));
      if (!taken.ok()) break;  // batch g+1 has not arrived: DeadlineExceeded
      if (taken->kind == DeliveryKind::kBatch) {
        seen.push_back(std::to_string(taken->batch->global));
        core_->Release(taken->batch->global);
      } else {
        seen.push_back(taken->kind == DeliveryKind::kEndOfEpoch ? "end" + std::to_string(taken->epoch) : "job");
        if (taken->kind == DeliveryKind::kEndOfJob) break;
      }
    }
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"0", "1", "2", "end0", "3", "4", "5", "end1", "job"}));
  EXPECT_TRUE(core_->Stats().end_of_job);
}

TEST_F(ClientCoreTest, ATimeoutIsRetryableAndSkipsNothing) {
  auto late = core_->Next(std::chrono::milliseconds(1));
  EXPECT_EQ(late.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(late.status().message().find("no batch 0 of epoch 0"), std::string::npos) << late.status().message();
  ASSERT_EQ(Arrive(0), PrefetchWindow::Outcome::kAccepted);
  auto b0 = TakeBatch();
  ASSERT_NE(b0, nullptr);
  EXPECT_EQ(b0->global, 0u);
}

TEST_F(ClientCoreTest, AWaitForABatchIsAStallOnTheHostPath) {
  ASSERT_EQ(Arrive(0), PrefetchWindow::Outcome::kAccepted);
  auto b0 = TakeBatch();
  // The application waits for batch 1; the I/O thread delivers it once 25 ms have passed on the client's clock.
  std::thread io([&] {
    clock_->Advance(Millis(25));
    Arrive(1);
  });
  auto b1 = TakeBatch();
  io.join();
  ClientStats s = core_->Stats();
  // Whether Next() was already waiting when the batch came or not, the client's clock says how long it was.
  EXPECT_DOUBLE_EQ(s.step_seconds, 0.025);
  EXPECT_LE(s.stall_seconds, 0.025);
  EXPECT_DOUBLE_EQ(s.stall_seconds, s.wait_seconds - s.startup_seconds);
}

TEST_F(ClientCoreTest, RefusedBatchesAreCountedByReasonAndNeverHandedOut) {
  ASSERT_EQ(Arrive(0), PrefetchWindow::Outcome::kAccepted);
  EXPECT_EQ(Arrive(0), PrefetchWindow::Outcome::kDuplicate);
  EXPECT_EQ(Arrive(4), PrefetchWindow::Outcome::kOutOfWindow);
  EXPECT_EQ(Arrive(1, /*attempt=*/7), PrefetchWindow::Outcome::kUnconfirmed);  // an attempt nobody listed
  core_->CountBadFrame();
  EXPECT_FALSE(core_->CountWrongSamples(1, 7)) << "not an attempt the coordinator lists";
  core_->NoteLeases({{"j", 0, 1, 1}}, HeartbeatSent(*core_));  // the coordinator says unit 1 is attempt 1
  ClientStats s = core_->Stats();
  EXPECT_EQ(s.batches_received, 1u);
  EXPECT_EQ(s.dropped_duplicate, 1u);
  EXPECT_EQ(s.dropped_out_of_window, 1u);
  EXPECT_EQ(s.dropped_stale_attempt, 1u);
  EXPECT_EQ(s.dropped_bad_frame, 1u);
  EXPECT_EQ(s.dropped_wrong_samples, 1u);
  EXPECT_EQ(s.prefetched, 1u);
  auto late = core_->Next(std::chrono::milliseconds(1));
  ASSERT_TRUE(late.ok());
  late = core_->Next(std::chrono::milliseconds(1));  // batch 1's only copy was dropped: nothing to hand out
  EXPECT_EQ(late.status().code(), StatusCode::kDeadlineExceeded);
}

TEST_F(ClientCoreTest, ABatchWaitsForItsAttemptToBeListedBeforeItIsHandedOut) {
  EXPECT_EQ(Arrive(0, /*attempt=*/2), PrefetchWindow::Outcome::kUnconfirmed);  // re-leased after the last reply
  EXPECT_EQ(core_->Next(std::chrono::milliseconds(1)).status().code(), StatusCode::kDeadlineExceeded);
  core_->NoteLeases({{"j", 0, 0, 2}}, HeartbeatSent(*core_));
  auto b0 = TakeBatch();
  ASSERT_NE(b0, nullptr);
  EXPECT_EQ(b0->attempt, 2u);
  EXPECT_EQ(core_->Stats().batches_received, 1u);
}

TEST_F(ClientCoreTest, APutBackBatchComesAgainAndSoDoesItsEndOfEpoch) {
  for (uint64_t g = 0; g < 3; ++g) ASSERT_EQ(Arrive(g), PrefetchWindow::Outcome::kAccepted);
  auto b0 = TakeBatch();
  auto b1 = TakeBatch();
  auto b2 = TakeBatch();
  ASSERT_TRUE(core_->PutBack(b2).ok());
  EXPECT_EQ(core_->Stats().batches_delivered, 2u);
  EXPECT_EQ(core_->PutBack(b0).code(), StatusCode::kFailedPrecondition);
  auto again = TakeBatch();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->global, 2u);
  auto end = core_->Next(std::chrono::milliseconds(1));
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->kind, DeliveryKind::kEndOfEpoch);
}

TEST_F(ClientCoreTest, QuarantinedSamplesAreCountedByReasonWhenHandedOutAndUncountedWhenPutBack) {
  ASSERT_EQ(Arrive(0, 1, {std::string("unsupported_format"), std::string("decode_error")}),
            PrefetchWindow::Outcome::kAccepted);
  ASSERT_EQ(Arrive(1, 1, {std::nullopt, std::string()}), PrefetchWindow::Outcome::kAccepted);  // no reason given
  EXPECT_EQ(core_->Stats().samples_quarantined, 0u);  // received is not delivered
  auto b0 = TakeBatch();
  auto b1 = TakeBatch();
  ClientStats s = core_->Stats();
  EXPECT_EQ(s.samples_quarantined, 3u);
  const std::map<std::string, uint64_t> counted = {{"decode_error", 1}, {"unreported", 1}, {"unsupported_format", 1}};
  EXPECT_EQ(s.quarantined_by_reason, counted);
  ASSERT_TRUE(core_->PutBack(b1).ok());
  s = core_->Stats();
  EXPECT_EQ(s.samples_quarantined, 2u);
  EXPECT_EQ(s.quarantined_by_reason, (std::map<std::string, uint64_t>{{"decode_error", 1}, {"unsupported_format", 1}}));
}

TEST(ClientCoreReasons, AWorkerCannotGrowTheReasonsWithoutBound) {
  // One batch of 40 samples, each quarantined under a word of its own: more words than are kept.
  auto clock = std::make_shared<FakeClock>();
  auto core = std::make_shared<ClientCore>(clock, "c-1");
  JobSpec spec;
  spec.name = "j";
  spec.manifest_path = "/m.stoker";
  spec.batch_size = 40;
  spec.pipeline.output_height = spec.pipeline.output_width = 1;
  auto plan = Plan::Make(spec, 40);
  ASSERT_TRUE(plan.ok());
  core->Start(ClientCore::Session{spec, *plan, 1, /*window_size=*/1, /*start_batch=*/0});
  ClientHeartbeatRequest heartbeat;
  core->NoteLeases({{"j", 0, 0, 1}}, core->TakeAck(heartbeat));
  BatchHeader h;
  h.count = 40;
  h.attempt = 1;
  for (uint64_t i = 0; i < 40; ++i) {
    h.labels.push_back(-1);
    h.sample_ids.push_back(plan->Sample(0, 0, 0, static_cast<uint32_t>(i)).sample_id);
    h.flags.push_back(kSampleFlagQuarantined);
    h.quarantine_reasons.push_back("reason_" + std::to_string(i));
  }
  h.payload_bytes = spec.BatchBytes();
  std::vector<zmq::message_t> payload;
  payload.emplace_back(spec.BatchBytes());
  ASSERT_EQ(core->Accept(MakeReceivedBatch(std::move(h), 1, std::move(payload), true)),
            PrefetchWindow::Outcome::kAccepted);
  auto taken = core->Next(std::chrono::seconds(5));
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  ClientStats s = core->Stats();
  EXPECT_EQ(s.samples_quarantined, 40u);
  EXPECT_EQ(s.quarantined_by_reason.size(), ClientStats::kMaxQuarantineReasons + 1);
  EXPECT_EQ(s.quarantined_by_reason["other"], 40 - ClientStats::kMaxQuarantineReasons);
}

TEST_F(ClientCoreTest, AFatalErrorEndsTheStreamForTheApplication) {
  core_->Fail(AbortedError("this client lost its rank"));
  ASSERT_EQ(Arrive(0), PrefetchWindow::Outcome::kAccepted);
  auto taken = core_->Next(std::chrono::seconds(5));
  EXPECT_EQ(taken.status().code(), StatusCode::kAborted);
  EXPECT_EQ(core_->Ready().code(), StatusCode::kAborted);
}

TEST_F(ClientCoreTest, ReadinessFollowsTheCoordinatorsLastReplyOnTheClientsClock) {
  EXPECT_TRUE(core_->Ready().ok());
  clock_->Advance(Millis(2000));  // 4 heartbeats of 250 ms, or 2 s: the larger
  EXPECT_TRUE(core_->Ready().ok());
  clock_->Advance(Millis(1));
  Status silent = core_->Ready();
  EXPECT_EQ(silent.code(), StatusCode::kUnavailable);
  EXPECT_NE(silent.message().find("no reply from the coordinator for 2001 ms"), std::string::npos) << silent.message();
  core_->MarkIoTurn();
  EXPECT_TRUE(core_->Live().ok());
  clock_->Advance(Millis(10001));
  EXPECT_EQ(core_->Live().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace stoker::client
