// stoker index PATH|URL... -o MANIFEST: builds a dataset manifest (tools/dataset_index.h; on object storage
// tools/remote_index.h) with live progress, and reports what it found, including every sample it had to mark
// unusable.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "tools/dataset_index.h"
#include "base/flags.h"
#include "base/lifeline.h"
#include "storage/object_store.h"
#include "tools/commands.h"
#include "tools/progress.h"
#include "tools/remote_index.h"

namespace stoker::tools {

namespace {

// "indexing: 3/10 files, 2400 samples, 310 MB read (120 MB/s)", redrawn as the index grows.
std::function<void(const IndexProgress&)> ShowProgress(ProgressLine& progress) {
  auto start = std::chrono::steady_clock::now();
  return [&progress, start](const IndexProgress& p) {
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char line[200];
    const uint64_t read = std::max(p.bytes_hashed, p.bytes_read);
    std::snprintf(line, sizeof(line), "indexing: %llu/%llu files, %llu samples, %.0f MB read (%.0f MB/s)",
                  static_cast<unsigned long long>(p.files_done), static_cast<unsigned long long>(p.files_total),
                  static_cast<unsigned long long>(p.samples), read / 1e6, seconds > 0 ? read / 1e6 / seconds : 0.0);
    progress.Update(line);
  };
}

// What the index found, how much of a remote dataset it had to read, and every sample it marked unusable.
void PrintReport(const std::string& output, const IndexReport& report, bool remote, bool checksum,
                 storage::StorageStats& storage_stats) {
  std::printf("%s: %llu samples in %llu %s (%.1f MB), %llu classes; fingerprint %016llx\n", output.c_str(),
              static_cast<unsigned long long>(report.samples), static_cast<unsigned long long>(report.shards),
              report.source == SourceKind::kTarShards ? "tar shards" : "files", report.bytes / 1e6,
              static_cast<unsigned long long>(report.classes), static_cast<unsigned long long>(report.fingerprint));
  if (remote) {
    uint64_t requests = 0;
    for (const auto& [status, count] : storage_stats.Take().requests) requests += count;
    std::printf("read %.1f MB of the dataset's %.1f MB (%.1f %%) in %llu requests%s\n", report.bytes_read / 1e6,
                report.bytes / 1e6, report.bytes > 0 ? 100.0 * report.bytes_read / report.bytes : 0.0,
                static_cast<unsigned long long>(requests), checksum ? " (--checksum: every byte)" : "");
  }
  if (!report.defects.empty()) {
    std::printf("%zu unusable samples or shards (recorded: their samples are quarantined and reported by id):\n",
                report.defects.size());
    for (size_t i = 0; i < report.defects.size() && i < 20; ++i) {
      const auto& d = report.defects[i];
      std::printf("  %s: %s (%s)\n", d.where.c_str(), d.reason.c_str(), d.detail.c_str());
    }
    if (report.defects.size() > 20) std::printf("  ... and %zu more\n", report.defects.size() - 20);
  }
  if (!report.notes.empty()) {
    std::printf("%zu entries skipped (not samples), e.g. %s\n", report.notes.size(), report.notes[0].c_str());
  }
}

}  // namespace

int IndexCommand(int argc, char** argv) {
  std::string output;
  bool no_checksum = false, checksum = false, strict = false;
  uint32_t parallel = 16;
  FlagSet flags("stoker index PATH|URL... -o MANIFEST [flags]",
                "Indexes an ImageFolder tree (PATH/<class>/<image>) or WebDataset-style .tar shards (PATH/*.tar "
                "or one .tar: KEY.jpg|jpeg|png + KEY.cls) into a manifest that records where every sample's bytes "
                "are, so workers read any sample with one read and no tar scan. Shards on object storage: an "
                "s3://bucket/prefix/ (every .tar under it) or .tar URLs (s3://, http://, https://), indexed by "
                "ranged reads of their headers without downloading the images.");
  flags.AddString("output", &output, "manifest file to write");
  flags.AddShortAlias('o', "output");
  flags.AddBool("no-checksum", &no_checksum,
                "skip hashing shards and samples (faster; no corruption check later). Local datasets only: remote "
                "ones are not hashed unless --checksum");
  flags.AddBool("checksum", &checksum,
                "remote datasets: read every shard once, whole, to record its XXH64 and every sample's (workers "
                "then quarantine a sample whose bytes differ)");
  flags.AddBool("strict", &strict, "fail on any unusable sample instead of recording it for quarantine");
  flags.AddUint32("parallel", &parallel, "remote datasets: shards scanned at once");
  int64_t lifeline_fd = -1;
  flags.AddInt("lifeline-fd", &lifeline_fd,
               "exit at once when this inherited pipe reaches end-of-file: the process that started this one is gone "
               "(stoker's local mode; -1: none)");
  storage::StorageFlags storage_flags;
  storage_flags.Register(flags);
  std::vector<std::string> positional;
  Status parsed = flags.Parse(argc, argv, 2, &positional);
  if (!parsed.ok()) return Fail("index", parsed);
  if (lifeline_fd >= 0) {
    if (Status watched = WatchLifeline(static_cast<int>(lifeline_fd)); !watched.ok()) return Fail("index", watched);
  }
  const bool remote = !positional.empty() && IsObjectUrl(positional[0]);
  if (positional.empty() || (!remote && positional.size() != 1) || output.empty()) {
    return Fail("index", InvalidArgumentError("expected one dataset PATH (or shard URLs) and -o MANIFEST (see --help)"));
  }
  PosixEnv env;
  IndexOptions options;
  options.checksum = remote ? checksum : !no_checksum;
  options.strict = strict;
  options.parallel = parallel;
  ProgressLine progress;
  options.progress = ShowProgress(progress);
  storage::StorageStats storage_stats;
  std::unique_ptr<storage::HttpObjectStore> store;
  if (remote) {
    auto storage = storage_flags.Resolve([](const char* name) { return std::getenv(name); });
    if (!storage.ok()) return Fail("index", storage.status());
    store = storage::MakeObjectStore(*storage, &storage_stats);
  }
  auto report = remote ? IndexRemoteDataset(*store, env, positional, output, options)
                       : IndexDataset(env, positional[0], output, options);
  progress.Finish();
  if (!report.ok()) return Fail("index", report.status());
  PrintReport(output, *report, remote, options.checksum, storage_stats);
  return 0;
}

}  // namespace stoker::tools
