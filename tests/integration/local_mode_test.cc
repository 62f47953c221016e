// Local mode from C++: a Client whose coordinator is "local" starts its own coordinator and workers as child
// processes (client/src/local_servers.h), delivers every planned sample exactly once (the checker), and leaves
// neither a process nor its private directory behind when it is destroyed. The Python package's tests
// (python/tests/local_test.py) add a dataset folder indexed once, resume in a new process and SIGKILL of the trainer.
#include <gtest/gtest.h>

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "client/src/local_servers.h"
#include "stoker/client.h"
#include "tests/support/checker.h"
#include "tests/support/fixtures.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_cluster.h"

namespace stoker::testing {
namespace {

// {pid: program} of this process's children that are stoker servers and still run (zombies left out).
std::map<int, std::string> ServerChildren() {
  std::map<int, std::string> found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* entry = ::readdir(proc)) {
    const std::string pid = entry->d_name;
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat("/proc/" + pid + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(line.substr(close + 1));
    std::string state;
    int parent = 0;
    fields >> state >> parent;
    std::error_code error;
    const std::string program = std::filesystem::read_symlink("/proc/" + pid + "/exe", error).filename().string();
    if (parent == ::getpid() && state != "Z" && (program == "stoker-coordinator" || program == "stoker-worker")) {
      found[std::stoi(pid)] = program;
    }
  }
  ::closedir(proc);
  return found;
}

// Sets (or, with nullptr, unsets) an environment variable for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

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
    while (true) {
      auto next = (*client)->Next(std::chrono::seconds(60));
      ASSERT_TRUE(next.ok()) << next.status().ToString();
      if (next->kind == DeliveryKind::kEndOfJob) break;
      if (next->kind != DeliveryKind::kBatch) continue;
      const Batch& b = next->batch;
      tools::LoggedBatch logged;
      logged.batch = {b.epoch(), 0, b.index(), {b.sample_ids().begin(), b.sample_ids().end()},
                      {b.flags().begin(), b.flags().end()}};
      logged.worker_id = b.worker_id();
      delivered.push_back(std::move(logged));
    }
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

TEST(LocalMode, NodeLocalWorkersBesideACoordinatorAddressAreRefusedClearly) {
  ClientOptions options;
  options.coordinator = "tcp://127.0.0.1:1";
  options.local_workers = 2;
  options.job = "local";
  auto client = Client::Connect(options);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(client.status().message().find("local mode"), std::string::npos) << client.status().ToString();
}

}  // namespace
}  // namespace stoker::testing
