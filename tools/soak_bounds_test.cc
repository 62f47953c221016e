// JudgeFlat: a flat series passes, a growing one fails, and the ceiling always holds.
#include "tools/soak_bounds.h"

#include <gtest/gtest.h>

namespace stoker::tools {
namespace {

TEST(SoakBounds, AFlatSeriesPassesAGrowingOneFailsAndTheCeilingAlwaysHolds) {
  EXPECT_TRUE(JudgeFlat("rss", {40, 42, 41, 43, 40, 42, 41, 44, 42}, 1.25, 4, 1000).flat);
  FlatVerdict growing = JudgeFlat("rss", {40, 45, 50, 55, 60, 65, 70, 75, 80}, 1.25, 4, 1000);
  EXPECT_FALSE(growing.flat);
  EXPECT_NE(growing.describe.find("GROWING"), std::string::npos) << growing.describe;
  FlatVerdict over = JudgeFlat("journal", {10, 2000}, 1.0, 0, 1000);
  EXPECT_FALSE(over.flat) << "a short run is still held to the ceiling";
  EXPECT_NE(over.describe.find("ceiling"), std::string::npos);
  EXPECT_TRUE(JudgeFlat("fds", {30, 31}, 1.0, 0, 1000).flat) << "too short for a trend";
  EXPECT_TRUE(JudgeFlat("fds", {}, 1.0, 0, 1000).flat);
}

}  // namespace
}  // namespace stoker::tools
