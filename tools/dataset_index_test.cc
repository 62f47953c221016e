// Indexing datasets on disk into manifests: tar shards and ImageFolder trees, defects recorded, clear errors.
#include "tools/dataset_index.h"

#include <gtest/gtest.h>

#include <cstring>

#include "base/hash.h"
#include "dataset/manifest.h"
#include "dataset/tar.h"
#include "tests/support/temp_dir.h"

namespace stoker::tools {
namespace {

using testing::TempDir;

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

  auto m = Manifest::Open(env, dir.Join("m.stoker"));
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
  // One pass over each shard: its XXH64 and every sample's.
  std::string whole_a = *ReadWholeFile(env2, (*m)->shard(0).path);
  EXPECT_EQ((*m)->shard(0).checksum, Xxh64(whole_a.data(), whole_a.size()));
  EXPECT_EQ(s1.checksum, Xxh64("JPEG-1", 6));
  EXPECT_EQ((*m)->sample(4).checksum, Xxh64(std::string(5000, 'z').data(), 5000));
  EXPECT_EQ((*m)->sample(5).checksum, 0u);  // truncated: never read, never hashed
  EXPECT_EQ((*m)->format_version(), 1u);   // local: what older builds read
}

// What the tar scan reads of a shard: headers and labels, never the images (the remote indexer relies on it).
TEST(DatasetIndex, ScanningReadsHeadersAndLabelsOnly) {
  TarWriter t;
  for (int i = 0; i < 20; ++i) {
    t.Add("k/" + std::to_string(100 + i) + ".cls", std::to_string(i));
    t.Add("k/" + std::to_string(100 + i) + ".jpg", std::string(100000, static_cast<char>(i)));
  }
  struct Counting final : RandomAccessFile {
    explicit Counting(std::string d) : data(std::move(d)) {}
    StatusOr<size_t> Read(uint64_t offset, size_t n, void* out) const override {
      n = std::min<size_t>(n, data.size() - std::min<size_t>(offset, data.size()));
      std::memcpy(out, data.data() + offset, n);
      read += n;
      return n;
    }
    uint64_t Size() const override { return data.size(); }
    const std::string& path() const override { return name; }
    std::string data, name = "count.tar";
    mutable uint64_t read = 0;
  } file(t.Finish());
  IndexOptions options;
  options.checksum = false;
  auto scan = ScanShard(file, "count.tar", options);
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  EXPECT_EQ(scan->samples.size(), 20u);
  EXPECT_EQ(scan->samples[7].label, 7);
  EXPECT_LT(file.read, 20u * 3 * 512 + 1024);  // 2 headers and a label per sample (+ the end marker)
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
  auto m = Manifest::Open(env, dir.Join("m.stoker"));
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
}  // namespace stoker::tools
