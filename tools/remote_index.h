// Indexing tar shards on object storage or a web server (`stoker index s3://bucket/prefix/`, `stoker index
// https://host/a.tar https://host/b.tar`). The shards are found by listing the S3 prefix (every .tar under it) or
// named one by one; each is scanned by ranged reads of its tar headers (and label members, which sit next to
// them) through RemoteFile — a few KB per sample, never the images — and recorded with its size and ETag, so
// workers refuse an object replaced since. With checksums (--checksum) every shard is read once, whole, to record
// its XXH64 and every sample's. Shards are scanned `options.parallel` at a time: each scan waits on round trips.
//
// Thread safety: a function; it runs its own threads.
#pragma once

#include <string>
#include <vector>

#include "base/env.h"
#include "storage/object_store.h"
#include "tools/dataset_index.h"

namespace stoker::tools {

// The manifest's root for these shard URLs: everything up to their common last '/'. InvalidArgument if they do
// not share a scheme and host (or bucket).
StatusOr<std::string> CommonUrlRoot(const std::vector<std::string>& urls);

// Indexes the shards at `locations` (one s3:// prefix or .tar URL, or several .tar URLs) and writes the manifest
// to `manifest_path` (a local file).
StatusOr<IndexReport> IndexRemoteDataset(storage::ObjectStore& store, Env& env, const std::vector<std::string>& locations,
                                         const std::string& manifest_path, const IndexOptions& options);

}  // namespace stoker::tools
