// A job resumed from a checkpoint on another shape, with the real processes: 4 ranks x 4 to a checkpoint, the
// coordinator killed and restarted, 3 ranks x 6 from that checkpoint (a worker killed meanwhile) across an epoch's
// end, then 6 ranks x 3 to the job's end. Judged in the positions of each epoch's order (tools/shaped_check.h):
// every sample of every epoch exactly once, at most the last shape's remainder not delivered, equal batches per rank
// within each shape. A live change (the old shape still training, one of its ranks dead) across a coordinator
// restart, judged the same way. And the refusals: another seed or dataset, named.
#include <gtest/gtest.h>

#include <csignal>

#include "dataset/checkpoint.h"
#include "tests/support/checker.h"
#include "tests/support/fixtures.h"
#include "tests/support/test_cluster.h"
#include "tools/shaped_check.h"

namespace stoker::testing {
namespace {

class ElasticTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto data = MakeJpegDataset(dir_.path(), "jpegs", 120, 40);
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    data_ = *data;
    base_ = SpecOver("elastic", data_, 4, 4, 2);
    base_.remainder = Remainder::kDrop;
    base_.seed = 7;
  }
  JobSpec Shaped(uint32_t ranks, uint32_t batch) const {
    JobSpec spec = base_;
    spec.world_size = ranks;
    spec.batch_size = batch;
    return spec;
  }
  // One consumer per rank of `spec`, each writing its token to <tag><rank>.ckpt when it stops; `flags` added.
  std::vector<size_t> Stage(tools::LocalCluster& cluster, const JobSpec& spec, const std::string& tag,
                            std::vector<std::string> flags) {
    std::vector<size_t> ids;
    for (uint32_t r = 0; r < spec.world_size; ++r) {
      std::vector<std::string> f = {"--checkpoint-file", dir_.Join(tag + std::to_string(r) + ".ckpt"),
                                    "--claim-timeout", "30s"};
      f.insert(f.end(), flags.begin(), flags.end());
      auto c = cluster.StartConsumer(tag + std::to_string(r), spec, r, f);
      EXPECT_TRUE(c.ok()) << c.status().ToString();
      if (c.ok()) ids.push_back(*c);
    }
    return ids;
  }
  void WaitAll(tools::LocalCluster& cluster, const std::vector<size_t>& ids) {
    for (size_t id : ids) ASSERT_EQ(cluster.consumer(id).Wait(kRunTimeout), 0) << cluster.ConsumerOutput(id);
  }

  TempDir dir_;
  TestDataset data_;
  JobSpec base_;
};

TEST_F(ElasticTest, ACheckpointResumesOnFewerThenMoreRanksExactlyOnce) {
  tools::LocalCluster cluster(ClusterIn(dir_, {"--client-timeout", "2s"}));
  ASSERT_TRUE(cluster.StartCoordinator().ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(cluster.StartWorker().ok());
  std::vector<std::string> logs;

  // 4 x 4: 16 samples a step, 7 steps an epoch. Every rank stops after 3 steps (48 samples of epoch 0).
  const std::vector<size_t> first = Stage(cluster, Shaped(4, 4), "a", {"--max-batches", "3"});
  ASSERT_EQ(first.size(), 4u) << "every consumer of the stage started";
  ASSERT_NO_FATAL_FAILURE(WaitAll(cluster, first));
  for (size_t id : first) logs.push_back(cluster.ConsumerLog(id));
  auto token = DecodeCheckpointToken(ReadFile(dir_.Join("a0.ckpt")));
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  EXPECT_EQ(token->point, (Plan::Point{0, 48}));

  // The coordinator dies between the checkpoint and its resume: the job comes back from its journal.
  ASSERT_TRUE(cluster.RestartCoordinator({"--client-timeout", "2s"}).ok());

  // 3 x 6 from rank 0's token: 18 a step, the 72 samples left of epoch 0 are 4 steps; 5 steps reach into epoch 1.
  const std::vector<size_t> second =
      Stage(cluster, Shaped(3, 6), "b", {"--resume-from", dir_.Join("a0.ckpt"), "--max-batches", "5", "--hold-ms",
                                         "40"});
  ASSERT_EQ(second.size(), 3u) << "every consumer of the stage started";
  ASSERT_TRUE(tools::WaitForLines(cluster.ConsumerLog(second[0]), 3, kRunTimeout, &cluster.consumer(second[0])).ok());
  cluster.worker(0).Kill();  // a worker dies during the first steps of the new shape
  ASSERT_NO_FATAL_FAILURE(WaitAll(cluster, second));
  for (size_t id : second) logs.push_back(cluster.ConsumerLog(id));
  token = DecodeCheckpointToken(ReadFile(dir_.Join("b2.ckpt")));
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  EXPECT_EQ(token->point, (Plan::Point{1, 18}));
  EXPECT_EQ(token->ranks, 3u);

  // 6 x 3 from rank 2's token to the end: 102 samples of epoch 1 left, 5 steps, 12 dropped.
  ASSERT_TRUE(cluster.StartWorker().ok());
  const std::vector<size_t> third = Stage(cluster, Shaped(6, 3), "c", {"--resume-from", dir_.Join("b2.ckpt")});
  ASSERT_EQ(third.size(), 6u) << "every consumer of the stage started";
  ASSERT_NO_FATAL_FAILURE(WaitAll(cluster, third));
  for (size_t id : third) logs.push_back(cluster.ConsumerLog(id));

  auto batches = ReadLogs(logs);
  ASSERT_TRUE(batches.ok()) << batches.status().ToString();
  tools::ShapedChecker checker(base_, data_.samples);
  for (const auto& b : *batches) ASSERT_TRUE(checker.Record(b).ok());
  const tools::ShapedVerdict epoch0 = checker.Check(0), epoch1 = checker.Check(1);
  EXPECT_TRUE(epoch0.ok()) << epoch0.Describe();
  EXPECT_TRUE(epoch1.ok()) << epoch1.Describe();
  EXPECT_EQ(epoch0.counts.delivered, 120u) << epoch0.Describe();
  EXPECT_EQ(epoch0.remainder, 0u);
  EXPECT_EQ(epoch1.counts.delivered, 108u) << epoch1.Describe();
  EXPECT_EQ(epoch1.remainder, 12u);
  EXPECT_EQ(epoch0.shapes, "3x6@0+48 [4 4 4], 4x4 [3 3 3 3]");
  EXPECT_EQ(epoch1.shapes, "3x6@0+48 [1 1 1], 6x3@1+18 [5 5 5 5 5 5]");
  // The checker sees a resume that went wrong: the second stage's first batch taken twice is a duplicate.
  tools::ShapedChecker doubled(base_, data_.samples);
  for (const auto& b : *batches) ASSERT_TRUE(doubled.Record(b).ok());
  ASSERT_TRUE(doubled.Record((*batches)[12]).ok());
  EXPECT_FALSE(doubled.Check(0).ok());
}

// A live change (resume-live): ranks of 4 x 4 train on (each step held 250 ms) past the point they agree on; one
// of them dies (its session held: the client timeout is two minutes); rank 0 of 3 x 4 resumes live from that point
// at once, the coordinator is restarted before the other two join, and the old shape's live clients are told.
TEST_F(ElasticTest, ALiveChangeEndsTheOldShapesSessionsAndSurvivesACoordinatorRestart) {
  tools::LocalCluster cluster(ClusterIn(dir_, {"--client-timeout", "120s"}));
  ASSERT_TRUE(cluster.StartCoordinator().ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(cluster.StartWorker().ok());
  const std::vector<size_t> old = Stage(cluster, Shaped(4, 4), "a", {"--checkpoint-every", "2", "--hold-ms", "250"});
  ASSERT_EQ(old.size(), 4u) << "every consumer of the stage started";
  ASSERT_TRUE(tools::WaitForLines(cluster.ConsumerLog(old[0]), 4, kRunTimeout, &cluster.consumer(old[0])).ok());
  const std::string agreed = ReadFile(dir_.Join("a0.ckpt"));  // the point the ranks agree on (2 or more steps)
  dir_.Write("agreed.ckpt", agreed);
  auto token = DecodeCheckpointToken(agreed);
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  auto old_plan = Plan::Make(Shaped(4, 4), data_.samples);
  ASSERT_TRUE(old_plan.ok());
  const uint64_t steps = token->point.offset / (4 * 4);  // the old shape's steps before the point
  ASSERT_EQ(token->point.epoch, 0u);
  ASSERT_GE(steps, 2u);
  for (size_t id : old) {  // every rank trained to the point (as ranks that step together have), rank 0 past it
    const size_t lines = id == old[0] ? steps + 1 : steps;
    ASSERT_TRUE(tools::WaitForLines(cluster.ConsumerLog(id), lines, kRunTimeout, &cluster.consumer(id)).ok());
  }
  cluster.consumer(old[3]).Kill();  // rank 3 dies; the others go on until they are told

  const std::vector<std::string> from = {"--resume-from", dir_.Join("agreed.ckpt"), "--claim-timeout", "2s"};
  std::vector<std::string> live = from;
  live.push_back("--resume-live");
  auto first = cluster.StartConsumer("b0", Shaped(3, 4), 0, live);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(tools::WaitForLines(cluster.ConsumerLog(*first), 1, kRunTimeout, &cluster.consumer(*first)).ok())
      << cluster.ConsumerOutput(*first);
  ASSERT_TRUE(cluster.RestartCoordinator({"--client-timeout", "120s"}).ok());  // before the others have joined
  std::vector<size_t> joined = {*first};
  for (uint32_t rank = 1; rank < 3; ++rank) {
    auto c = cluster.StartConsumer("b" + std::to_string(rank), Shaped(3, 4), rank, from);
    ASSERT_TRUE(c.ok());
    joined.push_back(*c);
  }
  ASSERT_NO_FATAL_FAILURE(WaitAll(cluster, joined));
  for (int i = 0; i < 3; ++i) {  // the old shape's live clients end, naming the new shape
    EXPECT_EQ(cluster.consumer(old[i]).Wait(kRunTimeout), 1);
    EXPECT_NE(cluster.ConsumerOutput(old[i]).find("changed shape to 3 ranks x 4"), std::string::npos)
        << cluster.ConsumerOutput(old[i]);
  }

  // The old shape's batches after the agreed point were not trained on: cut, as a trainer's restart would.
  std::vector<std::string> logs;
  for (size_t id : old) logs.push_back(cluster.ConsumerLog(id));
  for (size_t id : joined) logs.push_back(cluster.ConsumerLog(id));
  auto batches = ReadLogs(logs);
  ASSERT_TRUE(batches.ok()) << batches.status().ToString();
  tools::ShapedChecker checker(base_, data_.samples);
  size_t cut = 0;
  for (const auto& b : *batches) {
    if (b.shape.ranks == 4 && b.batch.epoch * old_plan->steps_per_epoch() + b.batch.index >= steps) {
      ++cut;
      continue;
    }
    ASSERT_TRUE(checker.Record(b).ok());
  }
  EXPECT_GT(cut, 0u) << "the old shape trained past the point, so the cut proves something";
  const tools::ShapedVerdict epoch0 = checker.Check(0), epoch1 = checker.Check(1);
  EXPECT_TRUE(epoch0.ok()) << epoch0.Describe();
  EXPECT_TRUE(epoch1.ok()) << epoch1.Describe();
  const std::string point = "3x4@0+" + std::to_string(token->point.offset);
  EXPECT_NE(epoch0.shapes.find(point), std::string::npos) << epoch0.shapes;
  EXPECT_NE(epoch0.shapes.find("4x4 [" + std::to_string(steps)), std::string::npos) << epoch0.shapes;
}

TEST_F(ElasticTest, AResumeOnAnotherShapeIsRefusedForAnotherSeedOrDataset) {
  tools::LocalCluster cluster(ClusterIn(dir_, {"--client-timeout", "2s"}));
  ASSERT_TRUE(cluster.StartCoordinator().ok());
  ASSERT_TRUE(cluster.StartWorker().ok());
  const std::vector<size_t> first = Stage(cluster, Shaped(2, 4), "a", {"--max-batches", "2"});
  ASSERT_EQ(first.size(), 2u) << "every consumer of the stage started";
  ASSERT_NO_FATAL_FAILURE(WaitAll(cluster, first));
  // A job of another seed under another name, resumed with this job's token: refused before anything is served.
  auto token = DecodeCheckpointToken(ReadFile(dir_.Join("a0.ckpt")));
  ASSERT_TRUE(token.ok());
  token->job = "reseeded";
  const std::string moved = dir_.Join("moved.ckpt");
  dir_.Write("moved.ckpt", EncodeCheckpointToken(*token));
  JobSpec reseeded = Shaped(3, 4);
  reseeded.name = "reseeded";
  reseeded.seed = 8;
  auto c = cluster.StartConsumer("seed", reseeded, 0, {"--resume-from", moved});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(cluster.consumer(*c).Wait(kRunTimeout), 1);
  EXPECT_NE(cluster.ConsumerOutput(*c).find("seed: 7 in the checkpoint, 8 in the job"), std::string::npos)
      << cluster.ConsumerOutput(*c);
  auto other = MakeJpegDataset(dir_.path(), "other", 60, 30);
  ASSERT_TRUE(other.ok());
  JobSpec swapped = Shaped(3, 4);
  swapped.name = "reseeded2";
  swapped.manifest_path = other->manifest;
  token->job = "reseeded2";
  dir_.Write("moved.ckpt", EncodeCheckpointToken(*token));
  c = cluster.StartConsumer("dataset", swapped, 0, {"--resume-from", moved});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(cluster.consumer(*c).Wait(kRunTimeout), 1);
  EXPECT_NE(cluster.ConsumerOutput(*c).find("dataset (manifest fingerprint)"), std::string::npos)
      << cluster.ConsumerOutput(*c);
}

}  // namespace
}  // namespace stoker::testing
