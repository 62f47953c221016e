#include "common/manifest.h"

#include <gtest/gtest.h>

#include "common/dataset_index.h"
#include "common/tar.h"
#include "tests/support/temp_dir.h"

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

  auto m = Manifest::Open(dir.Join("m.stoker"));
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
  auto moved = Manifest::Open(dir.Join("m.stoker"), "/elsewhere");
  EXPECT_EQ((*moved)->shard(0).path, "/elsewhere/s0.tar");
}

TEST(Manifest, BadFilesGetClearErrors) {
  TempDir dir;
  auto missing = Manifest::Open(dir.Join("nope.stoker"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("stoker index"), std::string::npos);
  dir.Write("junk.stoker", std::string(64, 'j'));
  auto junk = Manifest::Open(dir.Join("junk.stoker"));
  EXPECT_EQ(junk.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(junk.status().message().find("not a stoker manifest"), std::string::npos);

  PosixEnv env;
  ManifestWriter writer(dir.path(), SourceKind::kTarShards);
  uint32_t s = writer.AddShard("s.tar", 100000, 0);
  for (int i = 0; i < 50; ++i) writer.AddSample(s, 512 * i, 100, i, ImageFormat::kJpeg, "key" + std::to_string(i));
  ASSERT_TRUE(writer.Write(env, dir.Join("good.stoker"), "test").ok());
  auto whole = ReadWholeFile(env, dir.Join("good.stoker"));
  dir.Write("cut.stoker", whole->substr(0, whole->size() / 2 / 8 * 8));
  auto cut = Manifest::Open(dir.Join("cut.stoker"));
  EXPECT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), StatusCode::kDataLoss) << cut.status().ToString();
}

TEST(DatasetIndex, SplitsWebDatasetNames) {
  std::string key, ext;
  SplitWebDatasetName("dir.v2/x001.seg.PNG", &key, &ext);
  EXPECT_EQ(key, "dir.v2/x001");
  EXPECT_EQ(ext, "seg.png");
  SplitWebDatasetName("noext", &key, &ext);
  EXPECT_EQ(key, "noext");
  EXPECT_EQ(ext, "");
}

TEST(DatasetIndex, TarShardsRecordOffsetsLabelsAndDefects) {
  TempDir dir;
  TarWriter a;
  a.Add("s/000.jpg", "JPEG-0");
  a.Add("s/000.cls", "3\n");
  a.Add("s/001.jpeg", "JPEG-1");
  a.Add("s/001.cls", "4");
  a.Add("s/002.png", "PNG-2");        // no label
  a.Add("s/003.jpg", "JPEG-3");
  a.Add("s/003.cls", "three");        // bad label
  a.Add("s/004.cls", "9");            // label without image
  a.Add("s/005.json", "{}");
  dir.Write("data/a.tar", a.Finish());
  TarWriter b;
  b.Add("t/100.jpg", std::string(5000, 'z'));
  b.Add("t/100.cls", "1");
  b.Add("t/101.jpg", std::string(5000, 'y'));
  b.Add("t/101.cls", "2");
  std::string image = b.Finish();
  dir.Write("data/b.tar", image.substr(0, 512 + 5120 + 512 + 512 + 512 + 100));  // 101.jpg cut short

  PosixEnv env;
  IndexOptions options;
  uint64_t last_done = 0;
  options.progress = [&](const IndexProgress& p) { last_done = p.files_done; };
  auto report = IndexDataset(env, dir.Join("data"), dir.Join("m.stoker"), options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(last_done, 2u);
  EXPECT_EQ(report->shards, 2u);
  EXPECT_EQ(report->samples, 6u);  // 000 001 002 003 100 101
  std::map<std::string, std::string> defects;
  for (const auto& d : report->defects) defects[d.where] = d.reason;
  EXPECT_EQ(defects["a.tar:s/002"], "missing_label");
  EXPECT_EQ(defects["a.tar:s/003"], "bad_label");
  EXPECT_EQ(defects["b.tar:t/101"], "truncated");
  EXPECT_EQ(defects["b.tar"], "truncated_shard");

  auto m = Manifest::Open(dir.Join("m.stoker"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->fingerprint(), report->fingerprint);
  PosixEnv env2;
  auto shard = env2.OpenForRead((*m)->shard(0).path);
  SampleInfo s1 = (*m)->sample(1);
  std::string bytes(s1.size, '\0');
  ASSERT_TRUE((*shard)->Read(s1.offset, s1.size, bytes.data()).ok());
  EXPECT_EQ(bytes, "JPEG-1");  // read at the recorded offset, no scan
  EXPECT_EQ(s1.label, 4);
  EXPECT_EQ(s1.key, "s/001");
  EXPECT_EQ((*m)->sample(2).defect, "missing_label");
  EXPECT_EQ((*m)->sample(2).format, ImageFormat::kPng);
  EXPECT_EQ((*m)->sample(5).defect, "truncated");
  EXPECT_NE((*m)->shard(0).checksum, 0u);
}

TEST(DatasetIndex, StrictRefusesDefects) {
  TempDir dir;
  TarWriter a;
  a.Add("x.jpg", "J");
  dir.Write("d/a.tar", a.Finish());
  PosixEnv env;
  IndexOptions options;
  options.strict = true;
  auto report = IndexDataset(env, dir.Join("d"), dir.Join("m.stoker"), options);
  EXPECT_EQ(report.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(report.status().message().find("missing_label"), std::string::npos);
}

TEST(DatasetIndex, ImageFolderLabelsBySortedClassName) {
  TempDir dir;
  dir.Write("root/zebra/1.jpg", "z1");
  dir.Write("root/ant/b.png", "a2");
  dir.Write("root/ant/nested/a.JPG", "a1");
  dir.Write("root/ant/readme.txt", "not an image");
  dir.Write("root/stray.jpg", "no class");
  PosixEnv env;
  auto report = IndexDataset(env, dir.Join("root"), dir.Join("m.stoker"), IndexOptions{});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->source, SourceKind::kImageFolder);
  EXPECT_EQ(report->samples, 3u);
  EXPECT_EQ(report->classes, 2u);
  auto m = Manifest::Open(dir.Join("m.stoker"));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->classes(), (std::vector<std::string>{"ant", "zebra"}));
  EXPECT_EQ((*m)->sample(0).key, "ant/b.png");
  EXPECT_EQ((*m)->sample(0).label, 0);
  EXPECT_EQ((*m)->sample(1).key, "ant/nested/a.JPG");
  EXPECT_EQ((*m)->sample(1).format, ImageFormat::kJpeg);
  EXPECT_EQ((*m)->sample(2).label, 1);
  EXPECT_EQ((*m)->shard(2).path, dir.Join("root/zebra/1.jpg"));
}

TEST(DatasetIndex, MissingOrEmptyDatasetsAreClearErrors) {
  TempDir dir;
  PosixEnv env;
  auto missing = IndexDataset(env, dir.Join("nope"), dir.Join("m"), IndexOptions{});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos);
  std::filesystem::create_directories(dir.Join("empty"));
  auto empty = IndexDataset(env, dir.Join("empty"), dir.Join("m"), IndexOptions{});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  dir.Write("file.bin", "x");
  auto not_tar = IndexDataset(env, dir.Join("file.bin"), dir.Join("m"), IndexOptions{});
  EXPECT_EQ(not_tar.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker
