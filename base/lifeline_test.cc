// Lifeline: a child given the read end ends when the write end closes, however the parent lets go of it.
#include "base/lifeline.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>

#include "base/subprocess.h"

namespace stoker {
namespace {

TEST(Lifeline, AChildHoldingTheReadEndSeesEndOfFileWhenTheLineIsCut) {
  auto line = Lifeline::Make();
  ASSERT_TRUE(line.ok()) << line.status().ToString();
  // `cat` reads the passed descriptor until end-of-file: it runs exactly as long as the lifeline holds.
  auto child = Subprocess::Start({"/bin/sh", "-c", "cat <&3 >/dev/null"}, "", {}, line->child_end());
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  EXPECT_FALSE(child->Wait(std::chrono::milliseconds(200)).has_value()) << "the child ended with the line intact";
  line->Cut();
  EXPECT_EQ(child->Wait(std::chrono::seconds(30)), 0);
}

TEST(Lifeline, ADescriptorNumberedAsThePassedOneIsStillPassed) {
  auto line = Lifeline::Make();
  ASSERT_TRUE(line.ok());
  // Make the read end descriptor 3 itself: dup2 onto itself would leave it close-on-exec.
  const bool moved = line->child_end() != Subprocess::kPassedFd;  // a test process often has it at 3 already
  const int saved = moved ? ::fcntl(Subprocess::kPassedFd, F_DUPFD_CLOEXEC, 10) : -1;
  if (moved) {
    ASSERT_GE(::dup3(line->child_end(), Subprocess::kPassedFd, O_CLOEXEC), 0);
  }
  auto child = Subprocess::Start({"/bin/sh", "-c", "cat <&3 >/dev/null"}, "", {}, Subprocess::kPassedFd);
  ASSERT_TRUE(child.ok());
  EXPECT_FALSE(child->Wait(std::chrono::milliseconds(200)).has_value()) << "descriptor 3 was not passed";
  line->Cut();
  EXPECT_EQ(child->Wait(std::chrono::seconds(30)), 0);
  if (saved >= 0) {
    ::dup3(saved, Subprocess::kPassedFd, O_CLOEXEC);
    ::close(saved);
  } else if (moved) {
    ::close(Subprocess::kPassedFd);
  }
}

TEST(LifelineDeathTest, AWatchingProcessExitsWithZeroWhenItsParentLetsGo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto line = Lifeline::Make();
        if (!line.ok() || !WatchLifeline(line->child_end()).ok()) std::_Exit(3);
        line->Cut();  // this process is its own parent here: the watcher sees end-of-file
        while (true) ::pause();
      },
      ::testing::ExitedWithCode(0), "lifeline closed");
}

TEST(Lifeline, WatchingWhatIsNoPipeIsRefused) {
  EXPECT_EQ(WatchLifeline(-1).code(), StatusCode::kInvalidArgument);
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_EQ(WatchLifeline(null).code(), StatusCode::kInvalidArgument);
  ::close(null);
}

}  // namespace
}  // namespace stoker
