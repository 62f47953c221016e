// Building a manifest from a dataset on disk (`stoker index`). Two layouts are understood:
//  - ImageFolder: ROOT/<class>/**/<file>.{jpg,jpeg,png,...}; the label is the position of the class folder in
//    sorted order (torchvision's convention);
//  - WebDataset-style tar shards: ROOT/*.tar (or one .tar file), members KEY.jpg|jpeg|png (the image) and
//    KEY.cls (the label, a decimal integer). KEY is the member path up to the first '.' of its file name.
// Only headers of tar shards are read, plus each label member; the checksums (XXH64 of each shard and of each
// sample's bytes, optional) read the whole file once. Shards on object storage: tools/remote_index.h. Samples that cannot be used (missing or malformed label, truncated member) are kept in the
// manifest with a defect so that they are quarantined and reported by id at run time, and listed in the report.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/env.h"
#include "dataset/manifest.h"
#include "stoker/status.h"

namespace stoker::tools {

struct IndexProgress {
  uint64_t files_done = 0;
  uint64_t files_total = 0;
  uint64_t samples = 0;
  uint64_t bytes_hashed = 0;  // bytes read to compute checksums
  uint64_t bytes_read = 0;    // every byte read (headers, labels, checksums)
};

struct IndexOptions {
  bool checksum = true;  // XXH64 every shard and every sample (reads every byte)
  bool strict = false;   // any defect fails the index instead of being recorded
  std::function<void(const IndexProgress&)> progress;  // called after each file
  uint32_t parallel = 16;  // remote shards scanned at once (each waits on storage round trips)
};

struct IndexDefect {
  std::string where;   // shard path and member, or file path
  std::string reason;  // missing_label, bad_label, truncated, ...
  std::string detail;
};

struct IndexReport {
  SourceKind source = SourceKind::kTarShards;
  uint64_t samples = 0;
  uint64_t shards = 0;
  uint64_t classes = 0;
  uint64_t bytes = 0;          // the dataset's size
  uint64_t bytes_read = 0;     // what indexing read of it (remote: fetched over the network)
  uint64_t fingerprint = 0;
  std::vector<IndexDefect> defects;
  std::vector<std::string> notes;  // things skipped that are not samples (stray files, labels without images)
};

// Indexes `dataset` (a directory or a .tar file) and writes the manifest to `manifest_path`.
// NotFound for a missing path; InvalidArgument when it is neither layout; DataLoss for a corrupt tar header.
StatusOr<IndexReport> IndexDataset(Env& env, const std::string& dataset, const std::string& manifest_path,
                                   const IndexOptions& options);

// The manifest dir/name.stoker over `images` generated JPEGs in tar shards of `per_shard` under dir/shards, made and
// indexed unless a manifest of that many samples is already there (a soak or a benchmark run again reuses it).
StatusOr<std::string> GeneratedDataset(Env& env, const std::string& dir, const std::string& name, uint64_t images,
                                       uint32_t per_shard);

// One tar shard's samples as found by its headers (and, with checksums, its bytes).
struct ShardScan {
  struct Sample {
    uint64_t offset = 0;
    uint32_t size = 0;
    int64_t label = -1;
    ImageFormat format = ImageFormat::kJpeg;
    std::string key;
    std::string defect;
    uint64_t checksum = 0;
  };
  uint64_t checksum = 0;  // the whole shard's XXH64 (0 without checksums)
  std::vector<Sample> samples;
  std::vector<IndexDefect> defects;
  std::vector<std::string> notes;
  uint64_t bytes_hashed = 0;
};

// Scans one tar shard (`name`: how it is called in reports). DataLoss with --strict on a defect; I/O errors.
StatusOr<ShardScan> ScanShard(const RandomAccessFile& file, const std::string& name, const IndexOptions& options);

// Adds a scanned shard to the manifest being written and its defects and notes to the report.
void AddScannedShard(const std::string& name, uint64_t byte_size, const std::string& etag, ShardScan scan,
                     ManifestWriter& out, IndexReport& report);

// Splits a tar member path into WebDataset key and extension: "a/b/x.seg.png" -> ("a/b/x", "seg.png").
void SplitWebDatasetName(const std::string& name, std::string* key, std::string* ext);

}  // namespace stoker::tools
