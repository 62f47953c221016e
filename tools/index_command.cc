// stoker index PATH -o MANIFEST: builds a dataset manifest (tools/dataset_index.h) with live progress, and
// reports what it found, including every sample it had to mark unusable.
#include <cstdio>

#include "tools/dataset_index.h"
#include "common/flags.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace stoker {

int IndexCommand(int argc, char** argv) {
  std::string output;
  bool no_checksum = false, strict = false;
  FlagSet flags("stoker index PATH -o MANIFEST [flags]",
                "Indexes an ImageFolder tree (PATH/<class>/<image>) or WebDataset-style .tar shards (PATH/*.tar "
                "or one .tar: KEY.jpg|jpeg|png + KEY.cls) into a manifest that records where every sample's bytes "
                "are, so workers read any sample with one read and no tar scan.");
  flags.AddString("output", &output, "manifest file to write");
  flags.AddShortAlias('o', "output");
  flags.AddBool("no-checksum", &no_checksum, "skip hashing every shard (faster; no corruption check later)");
  flags.AddBool("strict", &strict, "fail on any unusable sample instead of recording it for quarantine");
  std::vector<std::string> positional;
  Status parsed = flags.Parse(argc, argv, 2, &positional);
  if (!parsed.ok()) return Fail("index", parsed);
  if (positional.size() != 1 || output.empty()) {
    return Fail("index", InvalidArgumentError("expected one dataset PATH and -o MANIFEST (see --help)"));
  }
  PosixEnv env;
  IndexOptions options;
  options.checksum = !no_checksum;
  options.strict = strict;
  ProgressLine progress;
  auto start = std::chrono::steady_clock::now();
  options.progress = [&](const IndexProgress& p) {
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char line[200];
    std::snprintf(line, sizeof(line), "indexing: %llu/%llu files, %llu samples, %.0f MB read (%.0f MB/s)",
                  static_cast<unsigned long long>(p.files_done), static_cast<unsigned long long>(p.files_total),
                  static_cast<unsigned long long>(p.samples), p.bytes_hashed / 1e6,
                  seconds > 0 ? p.bytes_hashed / 1e6 / seconds : 0.0);
    progress.Update(line);
  };
  auto report = IndexDataset(env, positional[0], output, options);
  progress.Finish();
  if (!report.ok()) return Fail("index", report.status());
  std::printf("%s: %llu samples in %llu %s (%.1f MB), %llu classes; fingerprint %016llx\n", output.c_str(),
              static_cast<unsigned long long>(report->samples), static_cast<unsigned long long>(report->shards),
              report->source == SourceKind::kTarShards ? "tar shards" : "files", report->bytes / 1e6,
              static_cast<unsigned long long>(report->classes), static_cast<unsigned long long>(report->fingerprint));
  if (!report->defects.empty()) {
    std::printf("%zu unusable samples or shards (recorded: their samples are quarantined and reported by id):\n",
                report->defects.size());
    for (size_t i = 0; i < report->defects.size() && i < 20; ++i) {
      const auto& d = report->defects[i];
      std::printf("  %s: %s (%s)\n", d.where.c_str(), d.reason.c_str(), d.detail.c_str());
    }
    if (report->defects.size() > 20) std::printf("  ... and %zu more\n", report->defects.size() - 20);
  }
  if (!report->notes.empty()) {
    std::printf("%zu entries skipped (not samples), e.g. %s\n", report->notes.size(), report->notes[0].c_str());
  }
  return 0;
}

}  // namespace stoker
