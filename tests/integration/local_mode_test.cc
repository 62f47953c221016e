// Local mode from C++: a Client whose coordinator is "local" starts its own coordinator and workers as child
// processes (client/src/local_servers.h), delivers every planned sample exactly once (the checker), and leaves
// neither a process nor its private directory behind when it is destroyed. The Python package's tests
// (python/tests/local_test.py) add a dataset folder indexed once, resume in a new process and SIGKILL of the trainer.
#include <gtest/gtest.h>

#include <sched.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

#include "client/src/local_servers.h"
#include "stoker/client.h"
#include "tests/support/checker.h"
#include "tests/support/client_batches.h"
#include "tests/support/fixtures.h"
#include "tests/support/local_processes.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_cluster.h"

namespace stoker::testing {
namespace {

TEST(LocalMode, AClientStartsItsOwnServersDeliversEverySampleOnceAndLeavesNothingBehind) {
  TempDir dir;
  auto data = MakeJpegDataset(dir.path(), "data", 48, 16);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  ClientOptions options;
  options.coordinator = kLocalCoordinator;
  options.local_workers = 2;
  options.local_bin_dir = BinaryDirectory();
  options.job = "local";
  options.spec = SpecOver("local", *data, /*ranks=*/1, /*batch=*/8, /*epochs=*/2);
  ASSERT_TRUE(ServerChildren().empty());
  // The servers' private directory is made in TMPDIR (XDG_RUNTIME_DIR would come first): here, where nothing else
  // makes one.
  ScopedEnv runtime("XDG_RUNTIME_DIR", nullptr), tmp("TMPDIR", dir.path().c_str());
  std::vector<tools::LoggedBatch> delivered;
  {
    auto client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    std::map<int, std::string> servers = ServerChildren();
    ASSERT_EQ(servers.size(), 3u);
    Status taken = TakeAll(**client, &delivered);
    ASSERT_TRUE(taken.ok()) << taken.ToString();
  }  // the Client goes, and its servers with it
  EXPECT_TRUE(ServerChildren().empty());
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_NE(entry.path().filename().string().rfind("stoker-local-", 0), 0u) << entry.path() << " was left behind";
  }
  auto verdict = CheckBatches(*options.spec, data->samples, delivered);
  ASSERT_TRUE(verdict.ok()) << verdict.status().ToString();
  ASSERT_TRUE(verdict->ok()) << verdict->Describe();
  EXPECT_EQ(verdict->epochs.size(), 2u);
}

TEST(LocalMode, ServersExitOnTheirLifelineNotByAKill) {
  TempDir dir;
  ScopedEnv runtime("XDG_RUNTIME_DIR", nullptr), tmp("TMPDIR", dir.path().c_str());
  auto servers = client::LocalServers::Start({.workers = 2, .bin_dir = BinaryDirectory()});
  ASSERT_TRUE(servers.ok()) << servers.status().ToString();
  EXPECT_TRUE(std::filesystem::exists((*servers)->dir() + "/owner"));
  EXPECT_EQ((*servers)->Stop(), (std::vector<int>{0, 0, 0})) << "exit code 137: killed after the grace";
}

TEST(LocalMode, ADirectoryLeftByAKilledOwnerIsSweptAndALiveOnesIsNot) {
  TempDir dir;
  ScopedEnv runtime("XDG_RUNTIME_DIR", nullptr), tmp("TMPDIR", dir.path().c_str());
  const std::string abandoned = dir.Join("stoker-local-abandoned");
  std::filesystem::create_directory(abandoned);
  std::ofstream(abandoned + "/owner") << "12345\n";  // no process holds its lock
  auto live = client::LocalServers::Start({.workers = 1, .bin_dir = BinaryDirectory()});
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(abandoned));
  auto second = client::LocalServers::Start({.workers = 1, .bin_dir = BinaryDirectory()});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(std::filesystem::exists((*live)->dir())) << "a live owner's directory was swept";
}

TEST(LocalMode, AutoWorkersAreTheCoresLessTwoOfThisProcesssShareUnderTorchrun) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  const int cores = CPU_COUNT(&set);
  {
    ScopedEnv alone("LOCAL_WORLD_SIZE", nullptr);
    EXPECT_EQ(client::LocalWorkersAuto(), cores > 3 ? static_cast<uint32_t>(cores - 2) : 1u);
  }
  ScopedEnv crowded("LOCAL_WORLD_SIZE", "100000");  // more processes than cores: still one worker each
  EXPECT_EQ(client::LocalWorkersAuto(), 1u);
}

}  // namespace
}  // namespace stoker::testing
