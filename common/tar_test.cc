#include "common/tar.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "tests/support/temp_dir.h"

namespace stoker {
namespace {

using testing::TempDir;

std::map<std::string, std::string> ReadAll(const RandomAccessFile& file, TarScanResult* result) {
  std::map<std::string, std::string> members;
  auto scanned = ScanTar(file, [&](const TarMember& m) {
    std::string data(m.size, '\0');
    auto n = file.Read(m.data_offset, m.size, data.data());
    EXPECT_TRUE(n.ok());
    data.resize(*n);
    members[m.name] = data;
    return Status::Ok();
  });
  EXPECT_TRUE(scanned.ok()) << scanned.status().ToString();
  if (scanned.ok()) *result = *scanned;
  return members;
}

TEST(Tar, WriterAndScannerRoundTripWithLongNames) {
  TempDir dir;
  TarWriter writer;
  std::string long_name = std::string(150, 'd') + "/sample.jpg";
  writer.Add("a.jpg", "jpegbytes");
  writer.Add("a.cls", "7\n");
  writer.Add(long_name, std::string(1000, 'x'));
  writer.Add("empty.txt", "");
  std::string path = dir.Write("shard.tar", writer.Finish());
  PosixEnv env;
  auto file = env.OpenForRead(path);
  ASSERT_TRUE(file.ok());
  TarScanResult result;
  auto members = ReadAll(**file, &result);
  EXPECT_EQ(result.members, 4u);
  EXPECT_TRUE(result.end_marker);
  EXPECT_FALSE(result.truncated);
  EXPECT_EQ(members["a.jpg"], "jpegbytes");
  EXPECT_EQ(members["a.cls"], "7\n");
  EXPECT_EQ(members[long_name], std::string(1000, 'x'));
  EXPECT_EQ(members["empty.txt"], "");
}

TEST(Tar, ReadsWhatGnuTarWritesIncludingPax) {
  if (std::system("tar --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no tar binary";
  TempDir dir;
  std::string long_dir = std::string(120, 'p');
  dir.Write("src/" + long_dir + "/k1.jpg", "one");
  dir.Write("src/k2.cls", "42");
  std::string cmd = "cd " + dir.Join("src") + " && tar --format=pax -cf ../pax.tar " + long_dir + "/k1.jpg k2.cls";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  PosixEnv env;
  auto file = env.OpenForRead(dir.Join("pax.tar"));
  ASSERT_TRUE(file.ok());
  TarScanResult result;
  auto members = ReadAll(**file, &result);
  EXPECT_EQ(members[long_dir + "/k1.jpg"], "one");
  EXPECT_EQ(members["k2.cls"], "42");
}

TEST(Tar, TruncatedShardMarksTheCutMember) {
  TempDir dir;
  TarWriter writer;
  writer.Add("a.jpg", std::string(3000, 'a'));
  writer.Add("b.jpg", std::string(3000, 'b'));
  std::string image = writer.Finish();
  std::string path = dir.Write("cut.tar", image.substr(0, 512 + 3072 + 512 + 1000));  // b.jpg cut at 1000 bytes
  PosixEnv env;
  auto file = env.OpenForRead(path);
  std::vector<TarMember> seen;
  auto result = ScanTar(**file, [&](const TarMember& m) {
    seen.push_back(m);
    return Status::Ok();
  });
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->truncated);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_FALSE(seen[0].truncated);
  EXPECT_TRUE(seen[1].truncated);
  EXPECT_EQ(seen[1].size, 3000u);
}

TEST(Tar, CorruptHeaderIsDataLossNamingTheOffset) {
  TempDir dir;
  TarWriter writer;
  writer.Add("a.jpg", "aaaa");
  writer.Add("b.jpg", "bbbb");
  std::string image = writer.Finish();
  image[1024 + 10] ^= 0x55;  // inside b.jpg's header name
  std::string path = dir.Write("bad.tar", image);
  PosixEnv env;
  auto file = env.OpenForRead(path);
  int visited = 0;
  auto result = ScanTar(**file, [&](const TarMember&) {
    ++visited;
    return Status::Ok();
  });
  EXPECT_EQ(visited, 1);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(result.status().message().find("byte 1024"), std::string::npos) << result.status().message();
}

}  // namespace
}  // namespace stoker
