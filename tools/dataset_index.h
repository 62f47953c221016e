// Building a manifest from a dataset on disk (`stoker index`). Two layouts are understood:
//  - ImageFolder: ROOT/<class>/**/<file>.{jpg,jpeg,png,...}; the label is the position of the class folder in
//    sorted order (torchvision's convention);
//  - WebDataset-style tar shards: ROOT/*.tar (or one .tar file), members KEY.jpg|jpeg|png (the image) and
//    KEY.cls (the label, a decimal integer). KEY is the member path up to the first '.' of its file name.
// Only headers of tar shards are read, plus each label member; the shard checksum (XXH64, optional) reads the
// whole file. Samples that cannot be used (missing or malformed label, truncated member) are kept in the
// manifest with a defect so that they are quarantined and reported by id at run time, and listed in the report.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/manifest.h"
#include "common/status.h"

namespace stoker {

struct IndexProgress {
  uint64_t files_done = 0;
  uint64_t files_total = 0;
  uint64_t samples = 0;
  uint64_t bytes_hashed = 0;
};

struct IndexOptions {
  bool checksum = true;  // XXH64 every shard (reads every byte)
  bool strict = false;   // any defect fails the index instead of being recorded
  std::function<void(const IndexProgress&)> progress;  // called after each file
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
  uint64_t bytes = 0;
  uint64_t fingerprint = 0;
  std::vector<IndexDefect> defects;
  std::vector<std::string> notes;  // things skipped that are not samples (stray files, labels without images)
};

// Indexes `dataset` (a directory or a .tar file) and writes the manifest to `manifest_path`.
// NotFound for a missing path; InvalidArgument when it is neither layout; DataLoss for a corrupt tar header.
StatusOr<IndexReport> IndexDataset(Env& env, const std::string& dataset, const std::string& manifest_path,
                                   const IndexOptions& options);

// Splits a tar member path into WebDataset key and extension: "a/b/x.seg.png" -> ("a/b/x", "seg.png").
void SplitWebDatasetName(const std::string& name, std::string* key, std::string* ext);

}  // namespace stoker
