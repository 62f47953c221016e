// PosixEnv: reads only regular files, and never waits on a FIFO; RealPath resolves links.
#include "base/env.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <future>

#include "tests/support/temp_dir.h"

namespace stoker {
namespace {

// Regression: a FIFO given as a manifest path froze the coordinator's main loop until a writer came.
TEST(PosixEnv, AFifoIsRefusedAtOnceNotWaitedOn) {
  testing::TempDir dir;
  const std::string fifo = dir.Join("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  PosixEnv env;
  auto opening = std::async(std::launch::async, [&] { return env.OpenForRead(fifo); });
  const bool answered = opening.wait_for(std::chrono::seconds(1)) == std::future_status::ready;
  int writer = -1;
  if (!answered) writer = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);  // lets a waiting open return: fail, not hang
  auto file = opening.get();
  if (writer >= 0) ::close(writer);
  EXPECT_TRUE(answered) << "the open waited for a writer";
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(file.status().message().find("not a regular file"), std::string::npos) << file.status().message();
}

TEST(PosixEnv, ReadsARegularFileAndRefusesADirectory) {
  testing::TempDir dir;
  PosixEnv env;
  auto text = ReadWholeFile(env, dir.Write("a.txt", "hello"));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "hello");
  EXPECT_EQ(env.OpenForRead(dir.path()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(env.OpenForRead(dir.Join("missing")).status().code(), StatusCode::kNotFound);
}

TEST(PosixEnv, RealPathResolvesLinksAndDotDot) {
  testing::TempDir dir;
  dir.Write("data/m.stoker", "x");
  std::filesystem::create_symlink(dir.Join("data"), dir.Join("link"));
  PosixEnv env;
  auto real = env.RealPath(dir.Join("link/../data/./m.stoker"));
  ASSERT_TRUE(real.ok()) << real.status().ToString();
  auto expected = env.RealPath(dir.Join("data/m.stoker"));
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(*real, *expected);
  EXPECT_EQ(env.RealPath(dir.Join("nothing")).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace stoker
