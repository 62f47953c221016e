// Resuming a checkpoint on another shape (impl_reshape.cc), on the fake clock: the job is re-planned from the
// checkpoint's point for the new ranks and batch size, the old shape's clients and leases are fenced, a busy job
// is not taken over, what decides the data must match (named when it does not), every rank must resume from the
// same point, and the change survives a restart from the journal. And live changes: a job re-planned at the point
// its ranks agreed on while the old shape trains, ending only its own team's sessions.
#include <gtest/gtest.h>

#include "coordinator/impl_test_fixture.h"
#include "coordinator/journal.h"
#include "dataset/checkpoint.h"

namespace stoker::coordinator {
namespace {

class ReshapeTest : public CoordinatorImplTest {
 protected:
  // The fixture's job (100 samples, 2 ranks x 10, 2 epochs: 5 steps an epoch) with both ranks at batch `position`,
  // then gone (silent past the client timeout); returns rank 0's token there.
  std::string TrainTwoRanksTo(uint64_t position, std::vector<LeaseGrant>* lease = nullptr) {
    Register("c-a", 0);
    Register("c-b", 1);
    if (lease != nullptr) *lease = Lease("w-1", 0, 1);
    EXPECT_TRUE(Ack("c-a", 0, position, position).ok());
    EXPECT_TRUE(Ack("c-b", 1, position, position).ok());
    const JobSpec job = *impl_->GetJob("job");
    auto plan = Plan::Make(job, 100);
    const std::string token = EncodeCheckpointToken(MakeCheckpointToken(job, *plan, 0, position));
    clock_.Advance(Millis(10001));
    impl_->Tick();
    return token;
  }
  JobSpec Shaped(uint32_t ranks, uint32_t batch) const {
    JobSpec spec = spec_;
    spec.world_size = ranks;
    spec.batch_size = batch;
    return spec;
  }
  StatusOr<RegisterClientResponse> Resume(const std::string& client, uint32_t rank, const JobSpec& spec,
                                          const std::string& token) {
    return impl_->RegisterClient({client, "job", rank, spec, 4, ResumePoint{0, 0, token}});
  }
};

TEST_F(ReshapeTest, ACheckpointResumesTheJobOnAnotherShapeFromItsPoint) {
  AddWorker("w-1");
  std::vector<LeaseGrant> old_lease;
  const std::string token = TrainTwoRanksTo(2, &old_lease);  // 40 samples of epoch 0 trained on
  ASSERT_EQ(old_lease.size(), 1u);
  // 3 ranks x 5: 6 steps an epoch; the 60 samples left are 4 steps, numbered 2..5 so the epoch still ends at 6.
  for (uint32_t rank = 0; rank < 3; ++rank) {
    auto r = Resume("n-" + std::to_string(rank), rank, Shaped(3, 5), token);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->start_batch, 2u);
    EXPECT_EQ(r->steps_per_epoch, 6u);
    EXPECT_EQ(r->spec.world_size, 3u);
    EXPECT_EQ(r->spec.origin_epoch, 0u);
    EXPECT_EQ(r->spec.origin_offset, 40u);
  }
  EXPECT_EQ(impl_->Stats().shape_changes, 1u);
  // The old shape's clients are told to go; rank 1's old client cannot ack into rank 1 of the new shape.
  EXPECT_EQ(Ack("c-a", 0, 3, 3).code(), StatusCode::kAborted);
  EXPECT_EQ(Ack("c-b", 1, 3, 3).code(), StatusCode::kAborted);
  // New leases start at the new plan's first batch, with attempts above every old one.
  AddWorker("w-1");  // (it timed out while the old clients did)
  const std::vector<LeaseGrant> g = Lease("w-1", 2, 1);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].epoch, 0u);
  EXPECT_EQ(g[0].first_batch, 2u);
  EXPECT_GT(g[0].attempt, old_lease[0].attempt);
  EXPECT_EQ(g[0].client_id, "n-2");
  EXPECT_EQ(g[0].spec_fingerprint, SpecFingerprint(*impl_->GetJob("job")));
  // /state shows the shape.
  const std::string state = impl_->StateJson();
  EXPECT_NE(state.find(R"("shape": {"ranks": 3, "batch_size": 5, "origin_epoch": 0, "origin_offset": 40, "changes": 1})"),
            std::string::npos)
      << state;
}

// A request parked on a rank the new shape lacks: the index of where workers wait still names it until it is
// pruned, and a sweep before then must pass it by. Regression: the sweep read past the end of the job's ranks
// (AddressSanitizer: heap-buffer-overflow in ServeParkedLocked).
TEST_F(ReshapeTest, ARequestParkedOnARankTheNewShapeLacksIsPassedBy) {
  AddWorker("w-1");
  const std::string token = TrainTwoRanksTo(2);
  AddWorker("w-2");  // (w-1 timed out while the old clients did)
  AddWorker("w-3");
  auto parked = impl_->RequestLease(7, {"w-2", "job", 1, 1, 1000});  // rank 1 has no client: it waits
  ASSERT_TRUE(parked.ok()) << parked.status().ToString();
  ASSERT_FALSE(parked->has_value());
  auto r = Resume("n-0", 0, Shaped(1, 10), token);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(impl_->Deregister({"w-3", "", 0}).ok());  // a worker leaving sweeps every job at once
  EXPECT_FALSE(Lease("w-2", 0, 1).empty()) << "the new shape's one rank is served";
}

TEST_F(ReshapeTest, ATokenOfTheSameShapeAtAStepOfThePlanResumesWithoutReplanning) {
  const std::string token = TrainTwoRanksTo(3);
  auto r = Resume("n-0", 0, spec_, token);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->start_batch, 3u);
  EXPECT_EQ(r->spec.origin_offset, 0u);
  EXPECT_EQ(impl_->Stats().shape_changes, 0u);
}

TEST_F(ReshapeTest, AJobWhoseClientsAreTrainingIsNotTakenOver) {
  Register("c-a", 0);
  Register("c-b", 1);
  ASSERT_TRUE(Ack("c-a", 0, 2, 2).ok());
  auto plan = Plan::Make(*impl_->GetJob("job"), 100);
  const std::string token = EncodeCheckpointToken(MakeCheckpointToken(*impl_->GetJob("job"), *plan, 0, 1));
  auto r = Resume("n-0", 0, Shaped(4, 5), token);
  EXPECT_EQ(r.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(r.status().message().find("rank 0 (c-a) are training"), std::string::npos) << r.status().ToString();
  EXPECT_TRUE(Ack("c-a", 0, 3, 3).ok());  // untouched
  EXPECT_EQ(impl_->GetJob("job")->world_size, 2u);
}

TEST_F(ReshapeTest, AnotherShapeWithoutACheckpointIsRefusedWithAHint) {
  Register("c-a", 0);
  auto r = impl_->RegisterClient({"n-0", "job", 0, Shaped(3, 5), 4});
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("world_size"), std::string::npos);
  EXPECT_NE(r.status().message().find("resumes from a checkpoint"), std::string::npos) << r.status().ToString();
}

TEST_F(ReshapeTest, WhatDecidesTheDataMustMatchAndIsNamed) {
  const std::string token = TrainTwoRanksTo(2);
  auto decoded = DecodeCheckpointToken(token);
  ASSERT_TRUE(decoded.ok());
  CheckpointToken other = *decoded;
  other.seed = 9;
  auto seed = Resume("n-0", 0, Shaped(3, 5), EncodeCheckpointToken(other));
  EXPECT_EQ(seed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(seed.status().message().find("seed: 9 in the checkpoint, 0 in the job"), std::string::npos)
      << seed.status().ToString();
  other = *decoded;
  other.manifest_fingerprint ^= 1;
  auto dataset = Resume("n-0", 0, Shaped(3, 5), EncodeCheckpointToken(other));
  EXPECT_NE(dataset.status().message().find("dataset (manifest fingerprint)"), std::string::npos);
  other = *decoded;
  other.point.offset = 100;  // past the data
  EXPECT_EQ(Resume("n-0", 0, Shaped(3, 5), EncodeCheckpointToken(other)).status().code(),
            StatusCode::kInvalidArgument);
  JobSpec augmented = Shaped(3, 5);  // a registration of another augmentation is refused by the spec itself
  augmented.pipeline.flip_probability = 0;
  EXPECT_NE(Resume("n-0", 0, augmented, token).status().message().find("flip_probability"), std::string::npos);
  EXPECT_EQ(impl_->Stats().shape_changes, 0u);
}

TEST_F(ReshapeTest, EveryRankOfTheNewShapeResumesFromTheSamePoint) {
  const std::string token = TrainTwoRanksTo(2);
  ASSERT_TRUE(Resume("n-0", 0, Shaped(3, 5), token).ok());
  auto later = DecodeCheckpointToken(token);
  later->point.offset += 15;  // a step of the new plan, but not the one rank 0 resumed from
  auto r = Resume("n-1", 1, Shaped(3, 5), EncodeCheckpointToken(*later));
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("resume every rank from the same checkpoint"), std::string::npos)
      << r.status().ToString();
  EXPECT_TRUE(Resume("n-1", 1, Shaped(3, 5), token).ok());
}

TEST_F(ReshapeTest, TheResumeInTheLastStepOfAnEpochStartsTheNextEpoch) {
  const std::string token = TrainTwoRanksTo(4);  // 80 of 100 trained on: 20 left, less than 3 x 8 = 24
  auto r = Resume("n-0", 0, Shaped(3, 8), token);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->spec.origin_epoch, 1u);
  EXPECT_EQ(r->spec.origin_offset, 0u);
  EXPECT_EQ(r->start_batch, r->steps_per_epoch);  // epoch 1, batch 0
}

TEST_F(ReshapeTest, TheNewShapeSurvivesARestartFromTheJournal) {
  const std::string token = TrainTwoRanksTo(2);
  ASSERT_TRUE(Resume("n-0", 0, Shaped(3, 5), token).ok());
  const std::vector<Update> snapshot = impl_->Snapshot();
  CoordinatorImpl restarted(options_, clock_, env_);
  for (const Update& u : snapshot) restarted.Restore(u);
  restarted.FinishRestore();
  const JobSpec job = *restarted.GetJob("job");
  EXPECT_EQ(job.world_size, 3u);
  EXPECT_EQ(job.origin_offset, 40u);
  // A rank that had not joined before the restart joins at the same start.
  auto r = restarted.RegisterClient({"n-2", "job", 2, Shaped(3, 5), 4, ResumePoint{0, 0, token}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->start_batch, 2u);
  // Without a token too: a rank that never had a session starts where the plan does, not at batch 0.
  auto plain = restarted.RegisterClient({"n-1", "job", 1, Shaped(3, 5), 4});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->start_batch, 2u);
  EXPECT_EQ(restarted.Stats().job_stats[0].shape_changes, 1u);
}

// ---- live changes (ResumePoint::live): the ranks agreed on a point while the old shape was training ----

class LiveReshapeTest : public ReshapeTest {
 protected:
  // Both ranks of the fixture's job trained to `position`, still live; rank 0's token there.
  std::string TrainingAt(uint64_t position, const Caller& caller = {}) {
    for (uint32_t rank = 0; rank < 2; ++rank) {
      const std::string client = rank == 0 ? "c-a" : "c-b";
      EXPECT_TRUE(impl_->RegisterClient({client, "job", rank, spec_, 4}, caller).ok());
      EXPECT_TRUE(impl_->ClientHeartbeat({client, "job", rank, position, position, {}, 0}, caller).ok());
    }
    const JobSpec job = *impl_->GetJob("job");
    return EncodeCheckpointToken(MakeCheckpointToken(job, *Plan::Make(job, 100), 0, position));
  }
  StatusOr<RegisterClientResponse> Live(const std::string& client, uint32_t rank, const JobSpec& spec,
                                        const std::string& token, const Caller& caller = {}) {
    return impl_->RegisterClient({client, "job", rank, spec, 4, ResumePoint{0, 0, token, true}}, caller);
  }
};

TEST_F(LiveReshapeTest, TheJobIsReplannedAtOnceAndTheOldShapesSessionsEnd) {
  const std::string token = TrainingAt(2);
  ASSERT_EQ(Resume("n-0", 0, Shaped(3, 5), token).status().code(), StatusCode::kAlreadyExists)
      << "without live, the training ranks keep the job";
  auto r = Live("n-0", 0, Shaped(3, 5), token);  // rank 1 of the old shape died; rank 0 carries on as 3 x 5
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->start_batch, 2u);
  EXPECT_EQ(r->spec.origin_offset, 40u);
  EXPECT_EQ(Ack("c-b", 1, 3, 3).code(), StatusCode::kAborted) << "the departed rank's session ended";
  // Its client, registering again on the old shape, is refused: it cannot take a rank of the new plan.
  EXPECT_EQ(impl_->RegisterClient({"c-b", "job", 1, spec_, 4}).status().code(), StatusCode::kFailedPrecondition);
  // The others join from the same point, live or not.
  ASSERT_TRUE(Live("n-1", 1, Shaped(3, 5), token).ok());
  auto joined = Resume("n-2", 2, Shaped(3, 5), token);
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  EXPECT_EQ(joined->start_batch, 2u);
  const CoordinatorStats stats = impl_->Stats();
  EXPECT_EQ(stats.shape_changes, 1u);
  EXPECT_EQ(stats.live_shape_changes, 1u);
}

TEST_F(LiveReshapeTest, OnlyTheCallersTeamsSessionsAreEnded) {
  const std::string token = TrainingAt(2, Caller{"client:vision"});
  auto other = Live("n-0", 0, Shaped(3, 5), token, Caller{"client:speech"});
  EXPECT_EQ(other.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other.status().message().find("caller's team"), std::string::npos) << other.status().ToString();
  EXPECT_EQ(impl_->GetJob("job")->world_size, 2u);
  EXPECT_TRUE(impl_->ClientHeartbeat({"c-b", "job", 1, 3, 3, {}, 0}, Caller{"client:vision"}).ok()) << "untouched";
  EXPECT_TRUE(Live("n-0", 0, Shaped(3, 5), token, Caller{"client2:vision"}).ok()) << "another key of the team";
}

TEST_F(LiveReshapeTest, AChangeNotEveryRankJoinedIsNotReplannedFromAnotherPoint) {
  const std::string token = TrainingAt(2);
  ASSERT_TRUE(Live("n-0", 0, Shaped(3, 5), token).ok());
  auto later = DecodeCheckpointToken(token);
  later->point.offset += 5;
  auto r = Live("n-1", 1, Shaped(4, 5), EncodeCheckpointToken(*later));
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("resume every rank from the same checkpoint"), std::string::npos)
      << r.status().ToString();
  // From the same point, the ranks may agree on yet another shape (one more left before all had joined).
  auto again = Live("n-1", 1, Shaped(2, 5), token);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->spec.world_size, 2u);
  EXPECT_EQ(again->start_batch, 4u);  // 40 of 100 at 10 a step: steps 4..9 of the 2 x 5 plan's 10
  EXPECT_EQ(Ack("n-0", 0, 3, 3).code(), StatusCode::kAborted) << "the 3 x 5 shape's session ended too";
}

TEST_F(LiveReshapeTest, AStaleTokenCannotTakeTheJobBackBehindItsLastChange) {
  const std::string stale = TrainingAt(1);  // sample 20
  ASSERT_TRUE(Ack("c-a", 0, 2, 2).ok());
  ASSERT_TRUE(Ack("c-b", 1, 2, 2).ok());
  const JobSpec job = *impl_->GetJob("job");
  const std::string token = EncodeCheckpointToken(MakeCheckpointToken(job, *Plan::Make(job, 100), 0, 2));
  ASSERT_TRUE(Live("n-0", 0, Shaped(3, 5), token).ok());  // from sample 40
  auto back = Live("n-1", 1, Shaped(2, 5), stale);          // from sample 20: what 3 x 5 trained since, again?
  EXPECT_EQ(back.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(back.status().message().find("behind job 'job''s last shape change"), std::string::npos)
      << back.status().ToString();
  EXPECT_EQ(Live("n-1", 1, Shaped(3, 5), stale).status().code(), StatusCode::kFailedPrecondition)
      << "nor one rank of the same shape";
  EXPECT_EQ(impl_->GetJob("job")->origin_offset, 40u);
}

TEST_F(LiveReshapeTest, ALiveChangeNeedsAVersion2TokenAndTheShape) {
  const std::string token = TrainingAt(2);
  auto bare = impl_->RegisterClient({"n-1", "job", 1, std::nullopt, 4, ResumePoint{0, 0, token, true}});
  EXPECT_EQ(bare.status().code(), StatusCode::kInvalidArgument) << "without the spec: which shape?";
  const uint64_t fingerprint = SpecFingerprint(*impl_->GetJob("job"));
  auto v1 = impl_->RegisterClient({"n-1", "job", 1, spec_, 4, ResumePoint{2, fingerprint, "", true}});
  EXPECT_EQ(v1.status().code(), StatusCode::kInvalidArgument) << v1.status().ToString();
  EXPECT_TRUE(Ack("c-b", 1, 3, 3).ok()) << "rank 1 still its holder's";
}

TEST_F(LiveReshapeTest, AnotherTeamsSessionsAreNotEndedIdleOrAfterARestart) {
  // Registered, not trained on yet: still another team's.
  ASSERT_TRUE(impl_->RegisterClient({"c-a", "job", 0, spec_, 4}, Caller{"client:vision"}).ok());
  JobSpec job = *impl_->GetJob("job");
  const std::string token = EncodeCheckpointToken(MakeCheckpointToken(job, *Plan::Make(job, 100), 0, 0));
  EXPECT_EQ(Live("n-0", 0, Shaped(3, 5), token, Caller{"client:speech"}).status().code(),
            StatusCode::kPermissionDenied);
  // Trained on, and the coordinator restarted: the session is replayed and held until the client timeout.
  ASSERT_TRUE(impl_->ClientHeartbeat({"c-a", "job", 0, 2, 2, {}, 0}, Caller{"client:vision"}).ok());
  const std::vector<Update> snapshot = impl_->Snapshot();
  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  for (const Update& u : snapshot) impl_->Restore(u);
  impl_->FinishRestore();
  job = *impl_->GetJob("job");
  const std::string later = EncodeCheckpointToken(MakeCheckpointToken(job, *Plan::Make(job, 100), 0, 2));
  EXPECT_EQ(Live("n-0", 1, Shaped(3, 5), later, Caller{"client:speech"}).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(impl_->GetJob("job")->world_size, 2u);
}

TEST_F(LiveReshapeTest, TheChangesOwnPointIsStaleOnceEveryRankJoinedAndTrained) {
  const std::string token = TrainingAt(2);
  for (uint32_t rank = 0; rank < 3; ++rank) {
    ASSERT_TRUE(Live("n-" + std::to_string(rank), rank, Shaped(3, 5), token).ok());
  }
  for (uint32_t rank = 0; rank < 3; ++rank) ASSERT_TRUE(Ack("n-" + std::to_string(rank), rank, 4, 4).ok());
  // A replacement handed the change's state, or a retried change, after two steps were trained: refused.
  auto again = Live("x-0", 0, Shaped(2, 5), token);
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("have trained since"), std::string::npos) << again.status().ToString();
  EXPECT_EQ(Live("x-1", 1, Shaped(3, 5), token).status().code(), StatusCode::kFailedPrecondition);
  // A replacement more than a step behind the others: refused; one step behind (a step that failed): taken over.
  const JobSpec job = *impl_->GetJob("job");
  auto at = [&](uint64_t batch) {
    return EncodeCheckpointToken(MakeCheckpointToken(job, *Plan::Make(job, 100), 0, batch));
  };
  for (uint32_t rank = 0; rank < 3; ++rank) ASSERT_TRUE(Ack("n-" + std::to_string(rank), rank, 5, 5).ok());
  auto behind = Live("x-1", 1, Shaped(3, 5), at(3));
  EXPECT_EQ(behind.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(behind.status().message().find("has consumed to batch 5"), std::string::npos) << behind.status().ToString();
  auto taken = Live("x-1", 1, Shaped(3, 5), at(4));
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(taken->start_batch, 4u);
}

TEST_F(LiveReshapeTest, ARankOfTheSameShapeIsTakenOverFromItsTeam) {
  const std::string token = TrainingAt(2);
  // Rank 1's process died; its session lives until the client timeout. Its replacement resumes at the agreed point.
  EXPECT_EQ(Resume("n-1", 1, spec_, token).status().code(), StatusCode::kAlreadyExists);
  auto r = Live("n-1", 1, spec_, token);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->start_batch, 2u);
  EXPECT_EQ(Ack("c-b", 1, 3, 3).code(), StatusCode::kAborted);
  EXPECT_TRUE(Ack("c-a", 0, 3, 3).ok()) << "the surviving rank goes on in its session";
  EXPECT_EQ(impl_->Stats().shape_changes, 0u);
}

// What a framework's len() asks before it gives the checkpoint back: the job as another shape would have it, with
// nothing claimed, created or changed.
TEST_F(ReshapeTest, AProbeDescribesTheJobForItsShapeAndClaimsNothing) {
  RegisterClientRequest probe{"p-0", "job", 0, Shaped(3, 5), 4};
  probe.probe = true;
  EXPECT_EQ(impl_->RegisterClient(probe).status().code(), StatusCode::kNotFound);  // creates nothing
  EXPECT_FALSE(impl_->GetJob("job").ok());
  Register("c-a", 0);
  auto described = impl_->RegisterClient(probe);
  ASSERT_TRUE(described.ok()) << described.status().ToString();
  EXPECT_EQ(described->steps_per_epoch, 6u);  // 100 samples, 15 a step
  EXPECT_EQ(described->spec.world_size, 3u);
  EXPECT_EQ(impl_->GetJob("job")->world_size, 2u);  // unchanged
  EXPECT_TRUE(Ack("c-a", 0, 1, 1).ok());            // rank 0 still c-a's
  auto rank1 = Register("c-b", 1);                   // rank 0 of the probe claimed nothing either
  EXPECT_EQ(rank1.steps_per_epoch, 5u);
  probe.spec->seed = 3;
  EXPECT_EQ(impl_->RegisterClient(probe).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace stoker::coordinator
