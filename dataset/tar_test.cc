// The tar scanner and writer: round trips, what GNU tar writes, truncated shards and every corrupt header.
#include "dataset/tar.h"

#include <gtest/gtest.h>

#include <cstdio>
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


// One 512-byte ustar header with `size_field` written into the size field as is, and its checksum set.
std::string RawHeader(const std::string& name, const std::string& size_field, char type) {
  std::string h(512, '\0');
  h.replace(0, name.size(), name);
  h.replace(124, size_field.size(), size_field);
  h[156] = type;
  h.replace(257, 6, std::string("ustar\0", 6));
  h.replace(148, 8, "        ");
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  char field[8];
  std::snprintf(field, sizeof(field), "%06o", sum);
  h.replace(148, 7, std::string(field, 7));
  h[155] = ' ';
  return h;
}

std::string OctalSize(uint64_t size) {
  char field[12];
  std::snprintf(field, sizeof(field), "%011llo", static_cast<unsigned long long>(size));
  return std::string(field, 11);
}

// Scans `image`, giving up (and failing the test) after 1,000 members: a scanner that stands still on a header
// would otherwise visit it forever.
StatusOr<TarScanResult> ScanBounded(TempDir& dir, const std::string& image, int* visits) {
  std::string path = dir.Write("hostile.tar", image);
  PosixEnv env;
  auto file = env.OpenForRead(path);
  EXPECT_TRUE(file.ok());
  *visits = 0;
  return ScanTar(**file, [visits](const TarMember&) {
    return ++*visits > 1000 ? InternalError("the scan does not advance") : Status::Ok();
  });
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

// A pax header of `records`, then a 4-byte member "plain.jpg" it applies to, then the end of the archive.
std::string PaxThenAMember(const std::string& records) {
  std::string image = RawHeader("pax", OctalSize(records.size()), 'x') + records;
  image.append(512 - records.size() % 512, '\0');
  return image + RawHeader("plain.jpg", OctalSize(4), '0') + "abcd" + std::string(508, '\0') + std::string(1024, '\0');
}

// Regression: a GNU base-256 size of 2^64 - 512 rounded to blocks and added to the data offset wrapped the next
// header's offset back onto the current one, and `stoker index` visited that header forever.
TEST(Tar, ABase256SizeNearTwoToTheSixtyFourIsRefusedNotLoopedOn) {
  TempDir dir;
  std::string size_field(12, '\0');
  size_field[0] = static_cast<char>(0x80);
  for (int i = 4; i < 11; ++i) size_field[i] = static_cast<char>(0xff);
  size_field[11] = static_cast<char>(0x00);
  size_field[10] = static_cast<char>(0xfe);  // 0xFFFF'FFFF'FFFF'FE00
  std::string image = RawHeader("wrap.jpg", size_field, '0') + std::string(1024, '\0');
  int visits = 0;
  auto result = ScanBounded(dir, image, &visits);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kDataLoss) << result.status().ToString();
  EXPECT_NE(result.status().message().find("more than the whole file"), std::string::npos)
      << result.status().message();
  EXPECT_EQ(visits, 0);
}

// Regression: a pax record length that, added to the parse position, wrapped it back to the start made the pax
// parser loop forever.
TEST(Tar, APaxLengthThatWrapsThePositionEndsThePaxParse) {
  TempDir dir;
  const std::string image = PaxThenAMember("20 path=wrapped.jpg\n18446744073709551596 size=1\n");
  int visits = 0;
  auto result = ScanBounded(dir, image, &visits);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(visits, 1);
  EXPECT_TRUE(result->end_marker);
}

TEST(Tar, AMemberLargerThanTheWholeFileIsCorruptionNotTruncation) {
  TempDir dir;
  std::string image = RawHeader("huge.jpg", OctalSize(uint64_t{1} << 40), '0') + std::string(512, 'x');
  int visits = 0;
  auto result = ScanBounded(dir, image, &visits);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(result.status().message().find("byte 0"), std::string::npos) << result.status().message();
}

TEST(Tar, APaxSizeThatIsNotANumberIsCorruption) {
  TempDir dir;
  const std::string image = PaxThenAMember("29 size=99999999999999999999\n");
  int visits = 0;
  auto result = ScanBounded(dir, image, &visits);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kDataLoss) << result.status().ToString();
}

}  // namespace
}  // namespace stoker
