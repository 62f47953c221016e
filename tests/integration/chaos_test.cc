// The two chaos drivers a user runs, run as a user would: `stoker demo --chaos` and a short `stoker soak`, each
// injecting kills, drains, coordinator restarts, stops and partitions at random into real processes, with the
// checker judging every epoch. The fault tests (fault_test.cc) pin each fault down alone; these prove the faults
// compose and that the commands report them truthfully.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "tests/support/test_cluster.h"
#include "tests/support/temp_dir.h"
#include "base/subprocess.h"

namespace stoker::testing {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The sum of the integer values inside the summary's "faults" object.
uint64_t FaultsInjected(const std::string& summary) {
  std::smatch m;
  if (!std::regex_search(summary, m, std::regex(R"re("faults": \{([^}]*)\})re"))) return 0;
  uint64_t total = 0;
  std::string body = m[1];
  std::regex count(R"re(": (\d+))re");
  for (auto it = std::sregex_iterator(body.begin(), body.end(), count); it != std::sregex_iterator(); ++it) {
    total += std::stoull((*it)[1]);
  }
  return total;
}

// Runs `stoker ARGS...`, output to dir/name.log; returns its exit code, or -1 if it did not finish in time.
int RunStoker(const TempDir& dir, const std::string& name, std::vector<std::string> args,
              std::chrono::seconds deadline) {
  args.insert(args.begin(), BinaryDirectory() + "/stoker");
  auto p = Subprocess::Start(args, dir.path() + "/" + name + ".log");
  if (!p.ok()) {
    ADD_FAILURE() << p.status().ToString();
    return -1;
  }
  auto code = p->Wait(deadline);
  if (!code) p->Signal(SIGKILL);
  return code.value_or(-1);
}

TEST(Chaos, DemoWithChaosDeliversEverySampleExactlyOnce) {
  TempDir dir;
  std::string summary_path = dir.path() + "/summary.json";
  int code = RunStoker(dir, "demo",
                       {"demo", "--chaos", "--data", dir.path() + "/demo", "--images", "384", "--epochs", "3",
                        "--batch-size", "8", "--summary-json", summary_path},
                       std::chrono::seconds(300));
  std::string summary = Slurp(summary_path);
  ASSERT_EQ(code, 0) << Slurp(dir.path() + "/demo.log");
  EXPECT_NE(summary.find("\"ok\": true"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"samples_planned\": 1152, \"samples_delivered\": 1152, \"duplicates\": 0, \"lost\": 0"),
            std::string::npos)
      << summary;
  EXPECT_GT(FaultsInjected(summary), 0u) << summary;
}

TEST(Chaos, ShortSoakChecksEveryEpoch) {
  TempDir dir;
  std::string summary_path = dir.path() + "/soak.json";
  int code = RunStoker(dir, "soak",
                       {"soak", "--minutes", "0.5", "--data", dir.path() + "/soak", "--images", "160",
                        "--fault-interval", "800ms", "--summary-json", summary_path},
                       std::chrono::seconds(300));
  std::string summary = Slurp(summary_path);
  ASSERT_EQ(code, 0) << Slurp(dir.path() + "/soak.log");
  EXPECT_NE(summary.find("\"ok\": true"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"epochs_failed\": 0"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"duplicates\": 0, \"lost\": 0"), std::string::npos) << summary;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(summary, m, std::regex(R"re("epochs_checked": (\d+))re"))) << summary;
  EXPECT_GE(std::stoull(m[1]), 3u) << summary;
  EXPECT_GT(FaultsInjected(summary), 5u) << summary;
}

}  // namespace
}  // namespace stoker::testing
