// The sample reader: reads by manifest offset, keeps a bounded cache of open shards, and reports every failure by
// reason (index defects, shards changed or gone since indexing).
#include "worker/sample_reader.h"

#include <gtest/gtest.h>

#include "dataset/tar.h"
#include "tests/support/fixtures.h"
#include "tests/support/temp_dir.h"

namespace stoker::worker {
namespace {

using testing::TempDir;

TEST(SampleReader, ReadsByOffsetAndReportsEveryFailureByReason) {
  TempDir dir;
  TarWriter a;
  a.Add("k0.jpg", "zero");
  a.Add("k0.cls", "0");
  a.Add("k1.jpg", "one!");  // no label: an index defect
  dir.Write("d/a.tar", a.Finish());
  TarWriter b;
  b.Add("k2.jpg", std::string(3000, '2'));
  b.Add("k2.cls", "2");
  dir.Write("d/b.tar", b.Finish());
  TarWriter c;
  c.Add("k3.jpg", "three");
  c.Add("k3.cls", "3");
  dir.Write("d/c.tar", c.Finish());
  PosixEnv env;
  ASSERT_TRUE(testing::IndexForTest(dir.Join("d"), dir.Join("m")).ok());
  auto manifest = Manifest::Open(env, dir.Join("m"));
  ASSERT_TRUE(manifest.ok());

  SampleReader reader(env, *manifest, /*max_open_shards=*/1);
  std::vector<uint8_t> bytes;
  ReadFailure why;
  ASSERT_TRUE(reader.Read(0, &bytes, &why));
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "zero");
  EXPECT_FALSE(reader.Read(1, &bytes, &why));
  EXPECT_EQ(why.reason, "missing_label");
  ASSERT_TRUE(reader.Read(2, &bytes, &why));  // evicts a.tar from the one-shard cache
  EXPECT_EQ(bytes.size(), 3000u);
  ASSERT_TRUE(reader.Read(0, &bytes, &why));  // reopens it

  // The shard is rewritten shorter after indexing: refused, not read at stale offsets.
  dir.Write("d/b.tar", "short");
  SampleReader fresh(env, *manifest);
  EXPECT_FALSE(fresh.Read(2, &bytes, &why));
  EXPECT_EQ(why.reason, "shard_changed");
  EXPECT_NE(why.detail.find("changed since"), std::string::npos);
  // The shard disappears.
  std::filesystem::remove(dir.Join("d/c.tar"));
  EXPECT_FALSE(fresh.Read(3, &bytes, &why));
  EXPECT_EQ(why.reason, "read_error");
  EXPECT_NE(why.detail.find("No such file"), std::string::npos) << why.detail;
}

}  // namespace
}  // namespace stoker::worker
