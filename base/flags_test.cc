// FlagSet: every form of a flag, the environment twin under the command line, errors that name the flag; durations.
#include "base/flags.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace stoker {
namespace {

struct Args {
  explicit Args(std::vector<std::string> v) : storage(std::move(v)) {
    for (auto& s : storage) ptrs.push_back(s.data());
  }
  int argc() { return static_cast<int>(ptrs.size()); }
  char** argv() { return ptrs.data(); }
  std::vector<std::string> storage;
  std::vector<char*> ptrs;
};

TEST(FlagSet, ParsesEveryFormAndPositionals) {
  std::string endpoint = "tcp://*:7400";
  uint32_t threads = 1;
  bool verbose = false, shuffle = true;
  double ratio = 0.5;
  FlagSet flags("test [flags]", "", "STOKERTEST_");
  flags.AddString("endpoint", &endpoint, "where");
  flags.AddUint32("threads", &threads, "how many");
  flags.AddBool("verbose", &verbose, "talk");
  flags.AddBool("shuffle", &shuffle, "mix");
  flags.AddDouble("ratio", &ratio, "r");
  Args args({"prog", "--endpoint=tcp://x:1", "--threads", "8", "--verbose", "--no-shuffle", "pos1", "--ratio=0.25",
             "--", "--not-a-flag"});
  std::vector<std::string> positional;
  ASSERT_TRUE(flags.Parse(args.argc(), args.argv(), 1, &positional).ok());
  EXPECT_EQ(endpoint, "tcp://x:1");
  EXPECT_EQ(threads, 8u);
  EXPECT_TRUE(verbose);
  EXPECT_FALSE(shuffle);
  EXPECT_DOUBLE_EQ(ratio, 0.25);
  EXPECT_EQ(positional, (std::vector<std::string>{"pos1", "--not-a-flag"}));
}

TEST(FlagSet, EnvironmentTwinIsOverriddenByCommandLine) {
  std::string coordinator = "default";
  uint32_t port = 1;
  FlagSet flags("test", "", "STOKERTEST_");
  flags.AddString("coordinator", &coordinator, "");
  flags.AddUint32("port", &port, "");
  ::setenv("STOKERTEST_COORDINATOR", "tcp://from-env:7400", 1);
  ::setenv("STOKERTEST_PORT", "9", 1);
  Args args({"prog", "--port=10"});
  ASSERT_TRUE(flags.Parse(args.argc(), args.argv()).ok());
  EXPECT_EQ(coordinator, "tcp://from-env:7400");
  EXPECT_EQ(port, 10u);
  ::unsetenv("STOKERTEST_COORDINATOR");
  ::unsetenv("STOKERTEST_PORT");
}

TEST(FlagSet, BadInputNamesTheFlag) {
  uint32_t threads = 1;
  FlagSet flags("test", "", "STOKERTEST_");
  flags.AddUint32("threads", &threads, "");
  Args unknown({"prog", "--thread=3"});
  Status s = flags.Parse(unknown.argc(), unknown.argv());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--thread"), std::string::npos);
  Args bad({"prog", "--threads=-2"});
  s = flags.Parse(bad.argc(), bad.argv());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--threads"), std::string::npos);
  Args stray({"prog", "stray"});
  EXPECT_EQ(flags.Parse(stray.argc(), stray.argv()).code(), StatusCode::kInvalidArgument);
  Args missing({"prog", "--threads"});
  EXPECT_EQ(flags.Parse(missing.argc(), missing.argv()).code(), StatusCode::kInvalidArgument);
}

TEST(ParseDurationMs, AcceptsUnits) {
  EXPECT_EQ(*ParseDurationMs("250"), 250);
  EXPECT_EQ(*ParseDurationMs("250ms"), 250);
  EXPECT_EQ(*ParseDurationMs("3s"), 3000);
  EXPECT_EQ(*ParseDurationMs("1.5s"), 1500);
  EXPECT_EQ(*ParseDurationMs("2m"), 120000);
  EXPECT_FALSE(ParseDurationMs("fast").ok());
  EXPECT_FALSE(ParseDurationMs("3 days").ok());
}

}  // namespace
}  // namespace stoker
