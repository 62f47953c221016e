// Manifests: round trips, remote shards, and every kind of bad file refused with a clear error.
#include "dataset/manifest.h"

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"

#include <fstream>
#include <iterator>

namespace stoker {
namespace {

using testing::TempDir;

TEST(Manifest, WriteOpenRoundTrip) {
  TempDir dir;
  PosixEnv env;
  ManifestWriter writer(dir.path(), SourceKind::kTarShards);
  writer.SetClasses({"cat", "dog"});
  uint32_t s0 = writer.AddShard("s0.tar", 4096, 11);
  writer.AddSample(s0, 512, 100, 1, ImageFormat::kJpeg, "k0");
  writer.AddSample(s0, 1536, 200, -1, ImageFormat::kPng, "k1", "missing_label");
  uint32_t s1 = writer.AddShard("s1.tar", 2048, 22);
  writer.AddSample(s1, 512, 10, 0, ImageFormat::kJpeg, "k2");
  auto fp = writer.Write(env, dir.Join("m.stoker"), "test");
  ASSERT_TRUE(fp.ok()) << fp.status().ToString();

  auto m = Manifest::Open(env, dir.Join("m.stoker"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->fingerprint(), *fp);
  EXPECT_EQ((*m)->num_samples(), 3u);
  EXPECT_EQ((*m)->num_shards(), 2u);
  EXPECT_EQ((*m)->classes(), (std::vector<std::string>{"cat", "dog"}));
  SampleInfo k1 = (*m)->sample(1);
  EXPECT_EQ(k1.offset, 1536u);
  EXPECT_EQ(k1.size, 200u);
  EXPECT_EQ(k1.label, -1);
  EXPECT_EQ(k1.format, ImageFormat::kPng);
  EXPECT_EQ(k1.key, "k1");
  EXPECT_EQ(k1.defect, "missing_label");
  EXPECT_EQ((*m)->shard(1).path, dir.Join("s1.tar"));
  EXPECT_EQ((*m)->shard(1).checksum, 22u);
  auto moved = Manifest::Open(env, dir.Join("m.stoker"), "/elsewhere");
  EXPECT_EQ((*moved)->shard(0).path, "/elsewhere/s0.tar");
}

// Format 2: a URL root, ETags and per-sample checksums; version 1 stays what a local dataset writes.
TEST(Manifest, RemoteShardsWriteVersionTwo) {
  TempDir dir;
  PosixEnv env;
  ManifestWriter writer("s3://bucket/train", SourceKind::kTarShards);
  uint32_t s = writer.AddShard("shard-0000.tar", 4096, 0, "\"9b2cf535f27731c974343645a3985328\"");
  writer.AddSample(s, 512, 100, 3, ImageFormat::kJpeg, "k0", "", 0x1234);
  ASSERT_TRUE(writer.Write(env, dir.Join("remote.stoker"), "test").ok());
  auto m = Manifest::Open(env, dir.Join("remote.stoker"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->format_version(), 2u);
  EXPECT_TRUE((*m)->remote());
  EXPECT_EQ((*m)->shard(0).path, "s3://bucket/train/shard-0000.tar");
  EXPECT_EQ((*m)->shard(0).etag, "\"9b2cf535f27731c974343645a3985328\"");
  EXPECT_EQ((*m)->sample(0).checksum, 0x1234u);
  auto mirrored = Manifest::Open(env, dir.Join("remote.stoker"), "https://mirror.example/train/");
  EXPECT_EQ((*mirrored)->shard(0).path, "https://mirror.example/train/shard-0000.tar");

  ManifestWriter local(dir.path(), SourceKind::kTarShards);
  local.AddSample(local.AddShard("s.tar", 4096, 7), 512, 100, 1, ImageFormat::kJpeg, "k", "", 99);
  ASSERT_TRUE(local.Write(env, dir.Join("local.stoker"), "test").ok());
  auto l = Manifest::Open(env, dir.Join("local.stoker"));
  ASSERT_TRUE(l.ok());
  EXPECT_EQ((*l)->format_version(), 1u);
  EXPECT_FALSE((*l)->remote());
  EXPECT_EQ((*l)->sample(0).checksum, 99u);
  EXPECT_EQ((*l)->shard(0).etag, "");
}

TEST(Manifest, BadFilesGetClearErrors) {
  TempDir dir;
  PosixEnv env;
  auto missing = Manifest::Open(env, dir.Join("nope.stoker"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("stoker index"), std::string::npos);
  dir.Write("junk.stoker", std::string(64, 'j'));
  auto junk = Manifest::Open(env, dir.Join("junk.stoker"));
  EXPECT_EQ(junk.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(junk.status().message().find("not a stoker manifest"), std::string::npos);

  ManifestWriter writer(dir.path(), SourceKind::kTarShards);
  uint32_t s = writer.AddShard("s.tar", 100000, 0);
  for (int i = 0; i < 50; ++i) writer.AddSample(s, 512 * i, 100, i, ImageFormat::kJpeg, "key" + std::to_string(i));
  ASSERT_TRUE(writer.Write(env, dir.Join("good.stoker"), "test").ok());
  auto whole = ReadWholeFile(env, dir.Join("good.stoker"));
  dir.Write("cut.stoker", whole->substr(0, whole->size() / 2 / 8 * 8));
  auto cut = Manifest::Open(env, dir.Join("cut.stoker"));
  EXPECT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), StatusCode::kDataLoss) << cut.status().ToString();
}

// Regression (found by fuzzing): Cap'n Proto lets a list of empty structs claim millions of elements in no bytes;
// this 400-byte file claimed 16,777,218 samples, opened, and reading them took 16 s under the fuzzer. It is refused.
TEST(Manifest, MoreSamplesThanTheFileHasRoomForAreRefused) {
  const std::string hex =
      "53544b4d414e30310000000030000000000000000200050001000000010000009afd8311a2010000110000007a0000001500"
      "000016000000290000002f0000004900000077000000990000005a0000002f646174612f696d6167656e6574000005000000"
      "5200000009000000520000006e3031343430373634000000000000006e303134343335333700000000000000040000000300"
      "020000001000000000003412000000000000020000010000000005000000aa0000000000000000000000747261696e2f7368"
      "6172642d303030302e7461720000000008000004000000000000000000000000000000000000000000000000000021000000"
      "82000000000000000000000000000000840300000008000000000000ffffffffffffff0300000008000000000000ffffffff"
      "ffffffff01000000000000ffffffff00000000000d0000006200000011000000720000006e30313434303736345f31303032"
      "36006e30313434333533375f3100000000006d697373696e675f6c6162656c00000066757a7a5f7365656473000000000000";
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  ASSERT_EQ(bytes.size(), 400u);
  auto parsed = Manifest::Parse("amplified.stoker", bytes);
  ASSERT_FALSE(parsed.ok()) << (*parsed)->num_samples() << " samples";
  EXPECT_EQ(parsed.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(parsed.status().message().find("claims 16777218 samples"), std::string::npos) << parsed.status().ToString();
}

// The bytes of a one-shard manifest whose sample and shard are given here.
std::string ManifestBytes(const TempDir& dir, uint64_t offset, uint32_t size, const std::string& shard_path,
                          const std::string& key) {
  PosixEnv env;
  ManifestWriter writer(dir.path(), SourceKind::kTarShards);
  uint32_t shard = writer.AddShard(shard_path, 4096, 0);
  writer.AddSample(shard, offset, size, 3, ImageFormat::kJpeg, key);
  EXPECT_TRUE(writer.Write(env, dir.Join("m.stoker"), "test").ok());
  std::ifstream in(dir.Join("m.stoker"), std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Regression: Open checked offset + size against the shard's size in 64-bit arithmetic that wraps, so an offset
// near 2^64 passed and the worker later read wherever the sum pointed.
TEST(Manifest, ASampleWhoseEndWrapsPastTwoToTheSixtyFourIsRefused) {
  TempDir dir;
  auto m = Manifest::Parse("wrap", ManifestBytes(dir, UINT64_MAX - 4, 10, "s.tar", "k"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(m.status().message().find("sample 0 lies past the end of its shard"), std::string::npos)
      << m.status().message();
}

// Regression: text fields were not read at Open, so a key without its terminating NUL opened fine and made a
// later sample() throw outside any error guard, ending the process.
TEST(Manifest, ATextFieldWithoutItsTerminatorIsRefusedAtOpen) {
  TempDir dir;
  std::string bytes = ManifestBytes(dir, 512, 10, "s.tar", "UNIQUEKEY");
  const size_t at = bytes.find(std::string("UNIQUEKEY\0", 10));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 9] = 'Q';
  auto m = Manifest::Parse("text", bytes);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(m.status().message().find("is corrupt"), std::string::npos) << m.status().message();
}

TEST(Manifest, AShardPathLeavingTheDatasetRootIsRefused) {
  TempDir dir;
  for (const std::string path : {"../../etc/passwd", "a/../../b.tar", ""}) {
    auto m = Manifest::Parse("paths", ManifestBytes(dir, 512, 10, path, "k"));
    ASSERT_FALSE(m.ok()) << path;
    EXPECT_NE(m.status().message().find("shard 0 has an empty path"), std::string::npos) << m.status().message();
  }
  EXPECT_TRUE(Manifest::Parse("fine", ManifestBytes(dir, 512, 10, "shards/s..v2.tar", "k")).ok());
}

}  // namespace
}  // namespace stoker
