// IndexRemoteDataset (remote_index.h): list or stat the shards, scan them in parallel by ranged reads, write the
// manifest in shard order.
#include "tools/remote_index.h"

#include <atomic>
#include <thread>

#include "base/sync.h"
#include "storage/remote_file.h"

namespace stoker::tools {
namespace {

bool IsTar(const std::string& url) { return url.size() > 4 && url.compare(url.size() - 4, 4, ".tar") == 0; }

// The shards the locations name: an s3:// prefix is listed; a .tar URL is one shard.
StatusOr<std::vector<storage::ObjectInfo>> FindShards(storage::ObjectStore& store, const std::vector<std::string>& locations) {
  std::vector<storage::ObjectInfo> shards;
  for (const std::string& location : locations) {
    if (IsTar(location)) {
      STOKER_ASSIGN_OR_RETURN(storage::ObjectInfo info, store.Stat(location));
      shards.push_back(std::move(info));
      continue;
    }
    STOKER_ASSIGN_OR_RETURN(std::vector<storage::ObjectInfo> listed, store.List(location));
    size_t before = shards.size();
    for (storage::ObjectInfo& o : listed) {
      if (IsTar(o.url)) shards.push_back(std::move(o));
    }
    if (shards.size() == before) return InvalidArgumentError(location + ": no .tar objects under this prefix");
  }
  if (shards.empty()) return InvalidArgumentError("no shards to index");
  return shards;
}

struct Scanned {
  StatusOr<ShardScan> scan = InternalError("not scanned");
  uint64_t fetched = 0;
};

}  // namespace

StatusOr<std::string> CommonUrlRoot(const std::vector<std::string>& urls) {
  if (urls.empty()) return InvalidArgumentError("no URLs");
  std::string root = urls[0].substr(0, urls[0].rfind('/') + 1);
  for (const std::string& url : urls) {
    size_t n = 0;
    while (n < root.size() && n < url.size() && root[n] == url[n]) ++n;
    root.resize(n);
  }
  root.resize(root.rfind('/') + 1);
  STOKER_ASSIGN_OR_RETURN(storage::ObjectUrl parsed, storage::ParseObjectUrl(root));
  const size_t scheme_end = root.find("://") + 3;
  if (root.find('/', scheme_end) == std::string::npos) {
    return InvalidArgumentError("the shards are not on one host (or bucket): index them separately");
  }
  (void)parsed;
  return root;
}

StatusOr<IndexReport> IndexRemoteDataset(storage::ObjectStore& store, Env& env, const std::vector<std::string>& locations,
                                         const std::string& manifest_path, const IndexOptions& options) {
  STOKER_ASSIGN_OR_RETURN(std::vector<storage::ObjectInfo> shards, FindShards(store, locations));
  std::vector<std::string> urls;
  for (const storage::ObjectInfo& s : shards) urls.push_back(s.url);
  STOKER_ASSIGN_OR_RETURN(std::string root, CommonUrlRoot(urls));

  std::vector<Scanned> scanned(shards.size());
  std::atomic<size_t> next{0};
  Mutex progress_mu;
  IndexProgress progress;
  progress.files_total = shards.size();
  auto scan_some = [&] {
    for (size_t i = next++; i < shards.size(); i = next++) {
      storage::RemoteFile file(store, shards[i], 4096);
      scanned[i].scan = ScanShard(file, shards[i].url.substr(root.size()), options);
      scanned[i].fetched = file.bytes_fetched();
      MutexLock lock(progress_mu);
      ++progress.files_done;
      progress.bytes_read += file.bytes_fetched();
      if (scanned[i].scan.ok()) {
        progress.samples += scanned[i].scan->samples.size();
        progress.bytes_hashed += scanned[i].scan->bytes_hashed;
      }
      if (options.progress) options.progress(progress);
    }
  };
  std::vector<std::thread> threads;
  const size_t parallel = std::min<size_t>(std::max<uint32_t>(1, options.parallel), shards.size());
  for (size_t t = 0; t < parallel; ++t) threads.emplace_back(scan_some);
  for (std::thread& t : threads) t.join();

  IndexReport report;
  report.source = SourceKind::kTarShards;
  ManifestWriter writer(root, SourceKind::kTarShards);
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!scanned[i].scan.ok()) return scanned[i].scan.status().WithContext("indexing " + shards[i].url);
    report.bytes_read += scanned[i].fetched;
    AddScannedShard(shards[i].url.substr(root.size()), shards[i].size, shards[i].etag, std::move(*scanned[i].scan),
                    writer, report);
  }
  report.samples = writer.num_samples();
  if (report.samples == 0) return InvalidArgumentError(root + ": no samples found (tar members need KEY.jpg|jpeg|png)");
  STOKER_ASSIGN_OR_RETURN(report.fingerprint, writer.Write(env, manifest_path, "stoker index 0.1.0"));
  return report;
}

}  // namespace stoker::tools
