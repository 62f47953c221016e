// Node-local workers beside a remote pool, as real processes: a CURVE cluster (coordinator and pool workers) and a
// Client that starts two workers of its own (ClientOptions::local_workers), which register with the coordinator as
// local to it (its client key, the group in its private directory) and send over ipc:// unsealed. Every sample
// arrives exactly once (the checker); the coordinator leases to the local workers first (its lease counters); a
// local worker killed mid-epoch and the pool scaled to zero and back lose nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <optional>
#include <filesystem>
#include <set>

#include "stoker/client.h"
#include "tests/support/checker.h"
#include "tests/support/client_batches.h"
#include "tests/support/fixtures.h"
#include "tests/support/http_client.h"
#include "tests/support/local_processes.h"
#include "tests/support/sanitizers.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_cluster.h"

namespace stoker::testing {
namespace {

class HybridTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The local workers' private directory is made in TMPDIR (XDG_RUNTIME_DIR would come first): here, where the
    // test can see it go.
    runtime_.emplace("XDG_RUNTIME_DIR", nullptr);
    tmp_.emplace("TMPDIR", dir_.path().c_str());
    auto data = MakeJpegDataset(dir_.path(), "data", 96, 16);
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    data_ = *data;
    cluster_ = std::make_unique<tools::LocalCluster>(ClusterIn(dir_));
    ASSERT_TRUE(cluster_->StartCoordinator().ok());
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(cluster_->StartWorker(1).ok());
    options_.coordinator = cluster_->coordinator_endpoint();
    cluster_->Secure(options_);
    options_.local_workers = 2;
    options_.local_bin_dir = BinaryDirectory();
    options_.job = "hybrid";
  }

  // The node-local workers: this process's stoker-worker children that are not the cluster's.
  std::set<int> LocalWorkerPids() {
    std::set<int> pool;
    for (size_t i = 0; i < cluster_->worker_count(); ++i) pool.insert(cluster_->worker(i).pid());
    std::set<int> local;
    for (const auto& [pid, program] : ServerChildren()) {
      if (program == "stoker-worker" && pool.count(pid) == 0) local.insert(pid);
    }
    return local;
  }

  void Consume(Client& client, std::chrono::milliseconds hold, const std::function<void(size_t)>& after = {}) {
    Status taken = TakeAll(client, &delivered_, hold, after);
    ASSERT_TRUE(taken.ok()) << taken.ToString();
  }

  void ExpectExact(uint32_t epochs) {
    auto verdict = CheckBatches(*options_.spec, data_.samples, delivered_);
    ASSERT_TRUE(verdict.ok()) << verdict.status().ToString();
    ASSERT_TRUE(verdict->ok()) << verdict->Describe();
    EXPECT_EQ(verdict->epochs.size(), epochs);
  }

  TempDir dir_;
  std::optional<ScopedEnv> runtime_, tmp_;
  TestDataset data_;
  std::unique_ptr<tools::LocalCluster> cluster_;
  ClientOptions options_;
  std::vector<tools::LoggedBatch> delivered_;
};

TEST_F(HybridTest, LocalWorkersAreLeasedFirstAndEverySampleArrivesOnce) {
  options_.spec = SpecOver("hybrid", data_, /*ranks=*/1, /*batch=*/8, /*epochs=*/8);  // 96 batches
  const std::string metrics = cluster_->coordinator_metrics();
  auto leases = [&](const char* series) {
    auto value = ScrapeMetric(metrics, series);
    EXPECT_TRUE(value.ok()) << value.status().ToString();
    return value.ok() ? *value : 0.0;
  };
  double local_from = 0, all_from = 0;
  {
    auto client = Client::Connect(options_);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    ASSERT_EQ(LocalWorkerPids().size(), 2u);
    // A trainer slower than its two local workers: they are idle, parked, whenever room opens, so they take every
    // unit once the first window (for which all four workers ask at once) is out; the pool, as idle, would take
    // half without the preference.
    Consume(**client, std::chrono::milliseconds(50), [&](size_t n) {
      if (n != 16) return;
      local_from = leases("stoker_coordinator_local_leases_granted_total");
      all_from = leases("stoker_coordinator_leases_granted_total");
    });
  }
  EXPECT_TRUE(LocalWorkerPids().empty()) << "the Client's local workers outlived it";
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
    EXPECT_NE(entry.path().filename().string().rfind("stoker-local-", 0), 0u) << entry.path() << " was left behind";
  }
  ExpectExact(8);
  const double local = leases("stoker_coordinator_local_leases_granted_total") - local_from;
  const double all = leases("stoker_coordinator_leases_granted_total") - all_from;
  // Under a sanitizer a worker's turn (decode, send, report, ask again) can outlast a 50 ms step on a busy machine
  // (ASan: 37 of 66), so the pool takes what both local workers are too slow to ask for: the rule is then left to
  // LocalWorkersTest.ServedBeforeThePoolWhenRoomOpens, on a fake clock.
  if (!kAddressSanitizer && !kThreadSanitizer) {
    EXPECT_GE(local, 0.8 * all) << local << " of the " << all << " leases after the 16th batch went to the local "
                                << "workers";
  }
  // The pool's batches came sealed over TCP and the local ones unsealed over ipc://: both kinds were taken.
  std::set<std::string> senders;
  for (const tools::LoggedBatch& b : delivered_) senders.insert(b.worker_id);
  EXPECT_GE(senders.size(), 2u);
}

TEST_F(HybridTest, ALocalWorkerKilledAndThePoolScaledToZeroAndBackLoseNothing) {
  options_.spec = SpecOver("hybrid", data_, /*ranks=*/1, /*batch=*/8, /*epochs=*/4);  // 48 batches
  auto client = Client::Connect(options_);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  Consume(**client, std::chrono::milliseconds(5), [&](size_t n) {
    if (n == 8) {  // a local worker dies mid-epoch: its leases go to the others
      std::set<int> local = LocalWorkerPids();
      ASSERT_EQ(local.size(), 2u);
      ASSERT_EQ(::kill(*local.begin(), SIGKILL), 0);
    } else if (n == 18) {  // the pool scaled to zero: the remaining local worker makes everything
      for (size_t i = 0; i < cluster_->worker_count(); ++i) cluster_->worker(i).Kill();
    } else if (n == 30) {  // and back
      for (int i = 0; i < 2; ++i) ASSERT_TRUE(cluster_->StartWorker(1).ok());
    }
  });
  ExpectExact(4);
  client->reset();
  EXPECT_TRUE(LocalWorkerPids().empty());
}

// The sidecar shape (helm's exampleJob.localWorkers): a stoker-worker someone else started with --local-dir and
// the client's key, and a Client that names the directory (local_dir) and starts none. Its batches come from the
// sidecar over the 0600 socket it made there, and from the pool.
TEST_F(HybridTest, ASidecarsWorkerInANamedDirectoryServesTheClientThatNamesIt) {
  const std::string shared = dir_.Join("shared");
  ASSERT_TRUE(std::filesystem::create_directory(shared));
  std::filesystem::permissions(shared, std::filesystem::perms::all);  // an emptyDir's 0777: the socket's mode holds
  ASSERT_TRUE(cluster_->StartWorker(2, {"--local-dir=" + shared, "--worker-id=sidecar-0",
                                        "--key-file=" + cluster_->keyring().client_key})
                  .ok());
  struct stat st {};
  ASSERT_EQ(::stat((shared + "/sidecar-0.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  options_.local_workers = 0;
  options_.local_dir = shared;
  options_.spec = SpecOver("hybrid", data_, /*ranks=*/1, /*batch=*/8, /*epochs=*/2);
  {
    auto client = Client::Connect(options_);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    EXPECT_TRUE(LocalWorkerPids().empty());  // it started none
    Consume(**client, std::chrono::milliseconds(20));
  }
  ExpectExact(2);
  std::set<std::string> senders;
  for (const tools::LoggedBatch& b : delivered_) senders.insert(b.worker_id);
  EXPECT_EQ(senders.count("sidecar-0"), 1u) << "the sidecar's worker sent nothing";
}

}  // namespace
}  // namespace stoker::testing
