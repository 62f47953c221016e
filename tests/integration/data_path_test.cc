// The data path end to end, as separate processes over TCP on loopback: a coordinator, several workers and
// several `stoker consume` clients. Every test judges what the clients consumed with the checker.
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "base/env.h"
#include "base/subprocess.h"
#include "tests/support/checker.h"
#include "tests/support/http_client.h"
#include "tests/support/cluster_test.h"
#include "tests/support/fixtures.h"
#include "tests/support/test_cluster.h"
#include "tests/support/temp_dir.h"

namespace stoker::testing {
namespace {

class DataPath : public ClusterTest {};


JobSpec Spec(const std::string& name, const TestDataset& data, uint32_t ranks, uint32_t batch, uint32_t epochs,
             Remainder remainder) {
  JobSpec spec = SpecOver(name, data, ranks, batch, epochs);
  spec.remainder = remainder;
  spec.seed = 99;
  return spec;
}

// Runs one consumer per rank to the end of the job and returns the verdict on their logs.
RunVerdict RunJob(tools::LocalCluster& cluster, const JobSpec& spec, const TestDataset& data, const std::string& tag) {
  auto verdict = RunJobToEnd(cluster, spec, data.samples, tag, kRunTimeout);
  EXPECT_TRUE(verdict.ok()) << verdict.status().ToString();
  return verdict.ok() ? *verdict : RunVerdict{};
}

TEST_F(DataPath, ThreeWorkersTwoClientsDeliverEveryPlannedSampleExactlyOnce) {
  ASSERT_NO_FATAL_FAILURE(Start(150, 40, /*workers=*/3));
  // 150 samples, 2 ranks x 8: 9 steps per epoch, 144 samples delivered, 6 dropped (a different 6 each epoch).
  JobSpec spec = Spec("exact", data_, 2, 8, 2, Remainder::kDrop);
  RunVerdict v = RunJob(*cluster_, spec, data_, "exact");
  ASSERT_TRUE(v.ok()) << v.Describe();
  ASSERT_EQ(v.steps_per_epoch, 9u);
  for (const tools::EpochVerdict& e : v.epochs) {
    EXPECT_EQ(e.delivered, 144u);
    EXPECT_EQ(e.batches_per_rank, (std::vector<uint64_t>{9, 9}));
    EXPECT_EQ(e.quarantined, 0u);
  }
  // Fault-free, nothing is ever sent twice.
  for (size_t i = 0; i < 2; ++i) {
    std::string summary = ReadFile(cluster_->ConsumerSummary(i));
    EXPECT_NE(summary.find("\"duplicate\": 0, \"stale_attempt\": 0, \"bad_frame\": 0"), std::string::npos) << summary;
  }
  // More than one worker did the work.
  std::set<std::string> makers;
  for (const auto& b : v.batches) makers.insert(b.worker_id);
  EXPECT_GE(makers.size(), 2u);
  // Workers drain on SIGTERM and exit 0.
  for (size_t i = 0; i < 3; ++i) cluster_->worker(i).Signal(SIGTERM);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(cluster_->worker(i).Wait(std::chrono::seconds(20)), 0)
        << cluster_->ReadLog("worker-" + std::to_string(i));
  }
  cluster_->coordinator().Signal(SIGTERM);
  EXPECT_EQ(cluster_->coordinator().Wait(std::chrono::seconds(10)), 0);
}

// The shape of a DDP node (tests/scheduling/lockstep_test.cc simulates its timing): four ranks fed by eight
// single-thread workers, each worker holding at most its queue of two batches. Exactness only: every sample once,
// equal steps per rank, and the work spread over the pool.
TEST_F(DataPath, FourRanksFromEightWorkersDeliverEverySampleExactlyOnce) {
  ASSERT_NO_FATAL_FAILURE(Start(192, 48, /*workers=*/8));
  JobSpec spec = Spec("ddp", data_, 4, 8, 2, Remainder::kDrop);  // 6 steps per epoch
  RunVerdict v = RunJob(*cluster_, spec, data_, "ddp");
  ASSERT_TRUE(v.ok()) << v.Describe();
  for (const tools::EpochVerdict& e : v.epochs) {
    EXPECT_EQ(e.delivered, 192u);
    EXPECT_EQ(e.batches_per_rank, (std::vector<uint64_t>{6, 6, 6, 6}));
  }
  std::set<std::string> makers;
  for (const auto& b : v.batches) makers.insert(b.worker_id);
  EXPECT_GE(makers.size(), 4u) << "a worker's queue is two batches: the 48 batches cannot come from few workers";
}

TEST_F(DataPath, PaddedRemainderGivesThreeRanksTheSameNumberOfSteps) {
  ASSERT_NO_FATAL_FAILURE(Start(100, 30, /*workers=*/2));
  // 100 samples, 3 ranks x 7 = 21 per step: 5 steps, 105 positions, the last 5 padding.
  JobSpec spec = Spec("padded", data_, 3, 7, 1, Remainder::kPad);
  spec.batches_per_unit = 2;
  RunVerdict v = RunJob(*cluster_, spec, data_, "pad");
  ASSERT_TRUE(v.ok()) << v.Describe();
  EXPECT_EQ(v.epochs[0].delivered, 100u);
  EXPECT_EQ(v.epochs[0].planned_padding, 5u);
  EXPECT_EQ(v.epochs[0].delivered_padding, 5u);
  EXPECT_EQ(v.epochs[0].batches_per_rank, (std::vector<uint64_t>{5, 5, 5}));
}

TEST_F(DataPath, SameSeedGivesIdenticalBatchBytesWhicheverWorkersMakeThem) {
  ASSERT_NO_FATAL_FAILURE(Start(64, 32));
  ASSERT_TRUE(cluster_->StartWorker(1).ok());
  JobSpec first = Spec("seed-a", data_, 2, 4, 2, Remainder::kDrop);
  RunVerdict a = RunJob(*cluster_, first, data_, "a");
  ASSERT_TRUE(a.ok()) << a.Describe();
  // Same spec and seed under another name, now with three workers of different thread counts.
  ASSERT_TRUE(cluster_->StartWorker(2).ok());
  ASSERT_TRUE(cluster_->StartWorker(3).ok());
  JobSpec second = first;
  second.name = "seed-b";
  RunVerdict b = RunJob(*cluster_, second, data_, "b");
  ASSERT_TRUE(b.ok()) << b.Describe();
  ASSERT_EQ(a.pixel_hashes.size(), 2u * 2u * 8u);
  EXPECT_EQ(a.pixel_hashes, b.pixel_hashes);
  // And a different seed changes them.
  JobSpec third = first;
  third.name = "seed-c";
  third.seed = 100;
  RunVerdict c = RunJob(*cluster_, third, data_, "c");
  ASSERT_TRUE(c.ok()) << c.Describe();
  EXPECT_NE(a.pixel_hashes, c.pixel_hashes);
}

// Two teams' jobs at once on one pool, each team's trainers with its own client key (client:local, and
// client:team-b made here and trusted): both exact, and the coordinator counts each job's share under the team its
// key names, with the weight --team-weights gives it. (How the pool is shared is simulated on a fake clock in
// tests/scheduling/pool_test.cc; two cores cannot time it.)
TEST_F(DataPath, TwoTeamsJobsShareOnePoolEachExactlyOnce) {
  auto data = MakeJpegDataset(dir_.path(), "jpegs", 96, 32);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  data_ = std::move(*data);
  auto team_b = AddClientKey(dir_, "team-b");
  ASSERT_TRUE(team_b.ok()) << team_b.status().ToString();
  cluster_ = std::make_unique<tools::LocalCluster>(ClusterIn(dir_, {"--team-weights", "team-b=3"}));
  ASSERT_TRUE(cluster_->StartCoordinator().ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(cluster_->StartWorker().ok());
  const JobSpec a = Spec("a", data_, 2, 8, 2, Remainder::kDrop);  // 6 steps per epoch
  const JobSpec b = Spec("b", data_, 1, 8, 2, Remainder::kDrop);  // 12
  for (uint32_t rank = 0; rank < 2; ++rank) ASSERT_TRUE(cluster_->StartConsumer("a-" + std::to_string(rank), a, rank).ok());
  ASSERT_TRUE(cluster_->StartConsumer("b-0", b, 0, {"--key-file", *team_b}).ok());
  auto codes = cluster_->WaitForConsumers(kRunTimeout);
  ASSERT_TRUE(codes.ok()) << codes.status().ToString();
  for (size_t i = 0; i < codes->size(); ++i) EXPECT_EQ((*codes)[i], 0) << cluster_->ConsumerOutput(i);
  auto va = CheckLogs(a, data_.samples, {cluster_->ConsumerLog(0), cluster_->ConsumerLog(1)});
  auto vb = CheckLogs(b, data_.samples, {cluster_->ConsumerLog(2)});
  ASSERT_TRUE(va.ok() && vb.ok());
  EXPECT_TRUE(va->ok()) << va->Describe();
  EXPECT_TRUE(vb->ok()) << vb->Describe();
  // Each job was leased at least its 2 epochs x 96 samples (more if a lease ran out on a loaded machine).
  auto leased_after = [](const std::string& text, const std::string& prefix) -> uint64_t {
    const size_t at = text.find(prefix);
    return at == std::string::npos ? 0 : std::strtoull(text.c_str() + at + prefix.size(), nullptr, 10);
  };
  auto state = HttpGet(cluster_->coordinator_metrics(), "/state");
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_GE(leased_after(state->body, R"("share": {"team": "local", "team_weight": 1, "samples_leased": )"), 192u)
      << state->body;
  EXPECT_GE(leased_after(state->body, R"("share": {"team": "team-b", "team_weight": 3, "samples_leased": )"), 192u)
      << state->body;
  auto leased = ScrapeMetric(cluster_->coordinator_metrics(),
                             R"(stoker_coordinator_job_samples_leased_total{pipeline="b",team="team-b"})");
  ASSERT_TRUE(leased.ok()) << leased.status().ToString();
  EXPECT_GE(*leased, 192.0);
  // The real workers said what each job's samples cost them: the fair share charges by it.
  for (const char* job : {"a", "b"}) {
    auto cost = ScrapeMetric(cluster_->coordinator_metrics(),
                             std::string(R"(stoker_coordinator_job_sample_cost_seconds{pipeline=")") + job + "\",team=\"" +
                                 (job == std::string("a") ? "local" : "team-b") + "\"}");
    ASSERT_TRUE(cost.ok()) << job << ": " << cost.status().ToString();
    EXPECT_GT(*cost, 0.0) << job;
    EXPECT_LT(*cost, 1.0) << job << ": a 32-pixel JPEG takes far less than a second";
  }

  // stoker top reads the same from the coordinator's /metrics: a row per pipeline, under its team.
  const std::string top_out = dir_.Join("top.out");
  auto top = Subprocess::Start({JoinPath(BinaryDirectory(), "stoker"), "top", "--coordinator-metrics",
                                cluster_->coordinator_metrics(), "--once", "--interval", "0.5"},
                               top_out);
  ASSERT_TRUE(top.ok()) << top.status().ToString();
  EXPECT_EQ(top->Wait(std::chrono::milliseconds(30000)), std::optional<int>(0));
  std::ifstream in(top_out);
  const std::string table((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(table.find("pool: 2 workers"), std::string::npos) << table;
  // The rows' first three cells, whatever the column widths: pipeline, team, and (after the epoch) ranks of all.
  std::map<std::string, std::vector<std::string>> rows;
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream cells(line);
    std::vector<std::string> row{std::istream_iterator<std::string>(cells), std::istream_iterator<std::string>()};
    if (row.size() >= 5) rows[row[0]] = row;
  }
  ASSERT_EQ(rows.count("a"), 1u) << table;
  ASSERT_EQ(rows.count("b"), 1u) << table;
  EXPECT_EQ(rows["a"][1], "local");
  EXPECT_EQ(rows["b"][1], "team-b");
  EXPECT_TRUE(rows["a"][4].ends_with("/2")) << table;  // ranks held of all
  EXPECT_TRUE(rows["b"][4].ends_with("/1")) << table;
  EXPECT_NE(rows["a"][6], "-") << table;  // milliseconds a sample costs the workers
  EXPECT_NE(rows["b"][6], "-") << table;
}

}  // namespace
}  // namespace stoker::testing
