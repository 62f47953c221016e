// Demo::StageOnObjectStore (demo.h): the demo over object storage — its generated shards put in a bucket (or found
// on a web server) and indexed there by ranged reads, as `stoker index s3://...` would.
#include <cstdio>

#include "storage/object_store.h"
#include "tools/demo.h"
#include "tools/remote_index.h"

namespace stoker::tools {

StatusOr<std::string> Demo::StageOnObjectStore(const std::string& shards) {
  PosixEnv env;
  storage::StorageStats stats;
  std::unique_ptr<storage::HttpObjectStore> store = storage::MakeObjectStore(o_.storage, &stats);
  STOKER_ASSIGN_OR_RETURN(std::vector<std::string> names, env.ListDirectory(shards));
  uint64_t uploaded = 0;
  for (const std::string& name : names) {
    const std::string url = o_.object_store + name;
    STOKER_ASSIGN_OR_RETURN(auto file, env.OpenForRead(JoinPath(shards, name)));
    auto there = store->Stat(url);
    if (there.ok() && there->size == file->Size()) continue;
    if (!o_.object_store.starts_with("s3://")) {
      return there.ok() ? FailedPreconditionError(url + " differs from the generated shard")
                        : there.status().WithContext("--object-store over http(s) needs the shards served there");
    }
    STOKER_ASSIGN_OR_RETURN(std::string data, ReadWholeFile(env, JoinPath(shards, name)));
    STOKER_RETURN_IF_ERROR(store->Put(url, data));
    ++uploaded;
  }
  const std::string manifest_path = JoinPath(o_.data, "manifest-object-store.stoker");
  std::vector<std::string> locations;
  for (const std::string& name : names) locations.push_back(o_.object_store + name);
  IndexOptions options;
  options.checksum = false;  // as `stoker index` does remotely: headers only, no image bytes
  STOKER_ASSIGN_OR_RETURN(IndexReport report, IndexRemoteDataset(*store, env, locations, manifest_path, options));
  std::fprintf(stderr, "object store: %s (%llu shards uploaded): %llu samples indexed by reading %.1f of %.0f MB\n",
               o_.object_store.c_str(), static_cast<unsigned long long>(uploaded),
               static_cast<unsigned long long>(report.samples), report.bytes_read / 1e6, report.bytes / 1e6);
  return manifest_path;
}

}  // namespace stoker::tools
