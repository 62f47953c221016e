// The local group file: made once, read back the same, refused when others could read or write it.
#include "base/local_group.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <thread>
#include <vector>

#include "tests/support/temp_dir.h"

namespace stoker {
namespace {

TEST(LocalGroupTest, MadeOnceAndReadBackTheSame) {
  testing::TempDir dir;
  auto made = ReadOrMakeLocalGroup(dir.path());
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(made->size(), 32u);
  struct stat st {};
  ASSERT_EQ(::stat(dir.Join(kLocalGroupFile).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto again = ReadOrMakeLocalGroup(dir.path());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *made);
  testing::TempDir other;
  EXPECT_NE(*ReadOrMakeLocalGroup(other.path()), *made);  // random, not derived from anything
}

TEST(LocalGroupTest, MakersAtOnceAgreeOnOne) {
  testing::TempDir dir;
  std::vector<std::string> seen(8);
  std::vector<std::thread> makers;
  for (size_t i = 0; i < seen.size(); ++i) {
    makers.emplace_back([&, i] {
      auto group = ReadOrMakeLocalGroup(dir.path());
      if (group.ok()) seen[i] = *group;
    });
  }
  for (std::thread& t : makers) t.join();
  for (const std::string& s : seen) EXPECT_EQ(s, seen[0]);
  EXPECT_EQ(seen[0].size(), 32u);
}

TEST(LocalGroupTest, RefusesAFileOthersCanReadAndSaysNothingOfIt) {
  testing::TempDir dir;
  auto made = ReadOrMakeLocalGroup(dir.path());
  ASSERT_TRUE(made.ok());
  ASSERT_EQ(::chmod(dir.Join(kLocalGroupFile).c_str(), 0644), 0);
  auto read = ReadOrMakeLocalGroup(dir.path());
  ASSERT_EQ(read.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(read.status().message().find("0644"), std::string::npos) << read.status().ToString();
  EXPECT_EQ(read.status().ToString().find(*made), std::string::npos);  // the secret never in an error
}

TEST(LocalGroupTest, RefusesMalformedAndLinkedFiles) {
  testing::TempDir dir;
  dir.Write(kLocalGroupFile, "not hex\n");
  ASSERT_EQ(::chmod(dir.Join(kLocalGroupFile).c_str(), 0600), 0);
  EXPECT_EQ(ReadOrMakeLocalGroup(dir.path()).status().code(), StatusCode::kFailedPrecondition);
  testing::TempDir linked;
  ASSERT_EQ(::symlink(dir.Join(kLocalGroupFile).c_str(), linked.Join(kLocalGroupFile).c_str()), 0);
  EXPECT_EQ(ReadOrMakeLocalGroup(linked.path()).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadOrMakeLocalGroup("relative").status().code(), StatusCode::kInvalidArgument);
}

TEST(LocalGroupTest, IpcEndpointInTheDirectoryOnly) {
  EXPECT_TRUE(IpcEndpointIn("ipc:///run/s/w-1.sock", "/run/s"));
  EXPECT_FALSE(IpcEndpointIn("ipc:///run/s/sub/w-1.sock", "/run/s"));
  EXPECT_FALSE(IpcEndpointIn("ipc:///run/s/../x.sock", "/run/s"));
  EXPECT_FALSE(IpcEndpointIn("ipc:///run/sx/w.sock", "/run/s"));
  EXPECT_FALSE(IpcEndpointIn("tcp://run/s/w.sock", "/run/s"));
  EXPECT_FALSE(IpcEndpointIn("ipc:///run/s/", "/run/s"));
}

}  // namespace
}  // namespace stoker
