// Indexing a local dataset (dataset_index.h): an ImageFolder tree or tar shards, scanned, hashed and written as a
// manifest, and the generated datasets the soak and the benchmarks reuse.
#include "tools/dataset_index.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <unordered_map>

#include "base/hash.h"
#include "datagen/synthetic_dataset.h"
#include "dataset/manifest.h"
#include "dataset/tar.h"

namespace stoker::tools {
namespace {

constexpr size_t kHashChunk = 4 << 20;
constexpr uint64_t kMaxLabelBytes = 64;
constexpr uint64_t kMaxSampleBytes = 0xffffffffULL;  // the manifest stores sizes in 32 bits

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string Extension(const std::string& name) {
  size_t slash = name.rfind('/');
  size_t dot = name.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return name.substr(dot + 1);
}

StatusOr<uint64_t> HashFile(const RandomAccessFile& file, IndexProgress* progress) {
  Xxh64Stream hash;
  std::vector<char> buffer(kHashChunk);
  uint64_t offset = 0;
  while (offset < file.Size()) {
    STOKER_ASSIGN_OR_RETURN(size_t n, file.Read(offset, buffer.size(), buffer.data()));
    if (n == 0) break;
    hash.Update(buffer.data(), n);
    offset += n;
    progress->bytes_hashed += n;
  }
  return hash.Digest();
}

// Parses a label member's text: optional whitespace around a decimal integer.
bool ParseLabel(const std::string& text, int64_t* label) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  size_t end = text.find_last_not_of(" \t\r\n");
  if (begin == std::string::npos) return false;
  std::string digits = text.substr(begin, end - begin + 1);
  errno = 0;
  char* stop = nullptr;
  long long v = std::strtoll(digits.c_str(), &stop, 10);
  if (errno != 0 || stop == nullptr || *stop != '\0') return false;
  *label = v;
  return true;
}

class Indexer {
 public:
  Indexer(Env& env, const IndexOptions& options) : env_(env), options_(options) {}

  Status IndexTarShards(const std::string& root, const std::vector<std::string>& shard_names, ManifestWriter& out,
                        IndexReport& report) {
    progress_.files_total = shard_names.size();
    for (const std::string& name : shard_names) {
      STOKER_RETURN_IF_ERROR(IndexOneTar(root, name, out, report));
      ++progress_.files_done;
      if (options_.progress) options_.progress(progress_);
    }
    return Status::Ok();
  }

  Status IndexImageFolder(const std::string& root, ManifestWriter& out, IndexReport& report) {
    STOKER_ASSIGN_OR_RETURN(auto names, env_.ListDirectory(root));
    std::vector<std::string> classes;
    for (const auto& name : names) {
      STOKER_ASSIGN_OR_RETURN(FileInfo info, env_.Stat(JoinPath(root, name)));
      if (info.is_directory) {
        classes.push_back(name);
      } else {
        report.notes.push_back("skipped " + name + ": files directly under the root belong to no class");
      }
    }
    if (classes.empty()) {
      return InvalidArgumentError(root + ": no .tar shards and no class folders found (expected ROOT/*.tar or "
                                         "ROOT/<class>/<image>)");
    }
    std::vector<std::pair<std::string, int64_t>> files;  // relative path, label
    for (size_t label = 0; label < classes.size(); ++label) {
      size_t before = files.size();
      STOKER_RETURN_IF_ERROR(Walk(root, classes[label], static_cast<int64_t>(label), files, report));
      if (files.size() == before) report.notes.push_back("class folder " + classes[label] + " holds no images");
    }
    progress_.files_total = files.size();
    for (const auto& [relative, label] : files) {
      std::string path = JoinPath(root, relative);
      STOKER_ASSIGN_OR_RETURN(auto file, env_.OpenForRead(path));
      uint64_t checksum = 0;
      if (options_.checksum) {
        STOKER_ASSIGN_OR_RETURN(checksum, HashFile(*file, &progress_));
      }
      uint64_t size = file->Size();
      ImageFormat format = ImageFormat::kOther;
      ImageFormatForExtension(Extension(relative), &format);
      std::string defect;
      if (size == 0) defect = "empty_file";
      if (size > kMaxSampleBytes) defect = "too_large";
      if (!defect.empty()) STOKER_RETURN_IF_ERROR(Defect(report, relative, defect, "file of " + std::to_string(size) + " bytes"));
      uint32_t shard = out.AddShard(relative, size, checksum);
      out.AddSample(shard, 0, static_cast<uint32_t>(size > kMaxSampleBytes ? 0 : size), label, format, relative,
                    defect, checksum);
      report.bytes += size;
      ++progress_.files_done;
      ++progress_.samples;
      if (options_.progress) options_.progress(progress_);
    }
    out.SetClasses(classes);
    report.classes = classes.size();
    report.shards = files.size();
    return Status::Ok();
  }

 private:
  Status Defect(IndexReport& report, std::string where, std::string reason, std::string detail) {
    if (options_.strict) {
      return DataLossError(where + ": " + reason + " (" + detail + "); --strict refuses datasets with defects");
    }
    report.defects.push_back({std::move(where), std::move(reason), std::move(detail)});
    return Status::Ok();
  }

  Status Walk(const std::string& root, const std::string& relative, int64_t label,
              std::vector<std::pair<std::string, int64_t>>& files, IndexReport& report) {
    STOKER_ASSIGN_OR_RETURN(auto names, env_.ListDirectory(JoinPath(root, relative)));
    for (const auto& name : names) {
      std::string child = relative + "/" + name;
      STOKER_ASSIGN_OR_RETURN(FileInfo info, env_.Stat(JoinPath(root, child)));
      if (info.is_directory) {
        STOKER_RETURN_IF_ERROR(Walk(root, child, label, files, report));
        continue;
      }
      ImageFormat format;
      if (ImageFormatForExtension(Extension(name), &format)) {
        files.emplace_back(child, label);
      } else {
        report.notes.push_back("skipped " + child + ": not an image file name");
      }
    }
    return Status::Ok();
  }

  Status IndexOneTar(const std::string& root, const std::string& name, ManifestWriter& out, IndexReport& report) {
    std::string path = JoinPath(root, name);
    STOKER_ASSIGN_OR_RETURN(auto file, env_.OpenForRead(path));
    STOKER_ASSIGN_OR_RETURN(ShardScan scan, ScanShard(*file, name, options_));
    progress_.bytes_hashed += scan.bytes_hashed;
    progress_.samples += scan.samples.size();
    AddScannedShard(name, file->Size(), "", std::move(scan), out, report);
    return Status::Ok();
  }

  Env& env_;
  const IndexOptions& options_;
  IndexProgress progress_;
};

std::string AbsolutePath(const std::string& path) {
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) != nullptr) return resolved;
  return path;
}

}  // namespace

void SplitWebDatasetName(const std::string& name, std::string* key, std::string* ext) {
  size_t slash = name.rfind('/');
  size_t base = slash == std::string::npos ? 0 : slash + 1;
  size_t dot = name.find('.', base);
  if (dot == std::string::npos) {
    *key = name;
    ext->clear();
    return;
  }
  *key = name.substr(0, dot);
  *ext = name.substr(dot + 1);
  for (char& c : *ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

namespace {

struct Entry {
  std::string key;
  bool has_image = false;
  TarMember image;
  ImageFormat format = ImageFormat::kJpeg;
  bool has_label = false;
  TarMember label;
  std::string label_text;  // read while scanning: it sits next to the headers, in the block just read
};

// One pass over the file: the shard's XXH64, and each sample's (samples are in file order and never overlap).
Status HashShard(const RandomAccessFile& file, ShardScan& scan) {
  Xxh64Stream shard;
  std::vector<char> buffer(kHashChunk);
  size_t next = 0;  // the first sample not finished
  Xxh64Stream sample;
  uint64_t offset = 0;
  while (offset < file.Size()) {
    STOKER_ASSIGN_OR_RETURN(size_t n, file.Read(offset, buffer.size(), buffer.data()));
    if (n == 0) break;
    shard.Update(buffer.data(), n);
    const uint64_t end = offset + n;
    while (next < scan.samples.size()) {
      ShardScan::Sample& s = scan.samples[next];
      if (s.size == 0 || !s.defect.empty()) {
        ++next;
        continue;
      }
      const uint64_t from = std::max(offset, s.offset), to = std::min(end, s.offset + s.size);
      if (from < to) sample.Update(buffer.data() + (from - offset), to - from);
      if (s.offset + s.size > end) break;
      s.checksum = sample.Digest();
      sample = Xxh64Stream();
      ++next;
    }
    offset = end;
    scan.bytes_hashed += n;
  }
  scan.checksum = shard.Digest();
  return Status::Ok();
}

Status Defect(ShardScan& scan, const IndexOptions& options, std::string where, std::string reason,
              std::string detail) {
  if (options.strict) {
    return DataLossError(where + ": " + reason + " (" + detail + "); --strict refuses datasets with defects");
  }
  scan.defects.push_back({std::move(where), std::move(reason), std::move(detail)});
  return Status::Ok();
}

// The sample an entry stands for, or its defect.
Status EntrySample(const Entry& e, const std::string& where, uint64_t file_size, const IndexOptions& options,
                   ShardScan& scan) {
  int64_t label = -1;
  std::string defect, detail;
  if (e.image.truncated) {
    defect = "truncated";
    detail = "image member of " + std::to_string(e.image.size) + " bytes runs past the end of the shard";
  } else if (e.image.size > kMaxSampleBytes) {
    defect = "too_large";
    detail = "image member of " + std::to_string(e.image.size) + " bytes";
  } else if (!e.has_label) {
    defect = "missing_label";
    detail = "no " + e.key + ".cls member";
  } else if (e.label.truncated || e.label.size > kMaxLabelBytes) {
    defect = "bad_label";
    detail = "label member of " + std::to_string(e.label.size) + " bytes";
  } else if (!ParseLabel(e.label_text, &label)) {
    defect = "bad_label";
    detail = "'" + e.label_text + "' is not an integer";
    label = -1;
  }
  if (!defect.empty()) STOKER_RETURN_IF_ERROR(Defect(scan, options, where, defect, detail));
  uint64_t available = e.image.data_offset < file_size ? file_size - e.image.data_offset : 0;
  uint64_t size = e.image.size < available ? e.image.size : available;
  if (size > kMaxSampleBytes) size = 0;
  scan.samples.push_back({e.image.data_offset, static_cast<uint32_t>(size), label, e.format, e.key, defect, 0});
  return Status::Ok();
}

}  // namespace

StatusOr<ShardScan> ScanShard(const RandomAccessFile& file, const std::string& name, const IndexOptions& options) {
  ShardScan out;
  std::vector<Entry> entries;
  std::unordered_map<std::string, size_t> by_key;
  auto scan = ScanTar(file, [&](const TarMember& member) {
    std::string key, ext;
    SplitWebDatasetName(member.name, &key, &ext);
    auto [it, inserted] = by_key.emplace(key, entries.size());
    if (inserted) entries.push_back(Entry{key});
    Entry& e = entries[it->second];
    ImageFormat format;
    if (ext == "cls") {
      e.has_label = true;
      e.label = member;
      if (!member.truncated && member.size <= kMaxLabelBytes) {
        e.label_text.assign(member.size, '\0');
        STOKER_ASSIGN_OR_RETURN(size_t n, file.Read(member.data_offset, member.size, e.label_text.data()));
        e.label_text.resize(n);
      }
    } else if (ImageFormatForExtension(ext, &format) && !e.has_image) {
      e.has_image = true;
      e.image = member;
      e.format = format;
    }
    return Status::Ok();
  });
  if (!scan.ok()) {
    if (scan.status().code() != StatusCode::kDataLoss) return scan.status();
    // A corrupt header hides everything after it; keep what came before and report the shard.
    STOKER_RETURN_IF_ERROR(Defect(out, options, name, "corrupt_shard", scan.status().message()));
  } else if (scan->truncated) {
    STOKER_RETURN_IF_ERROR(Defect(out, options, name, "truncated_shard",
                                  "the file ends inside a member: samples after that point are missing"));
  }
  for (const Entry& e : entries) {
    std::string where = name + ":" + e.key;
    if (!e.has_image) {
      out.notes.push_back("skipped " + where + ": no image member (.jpg, .jpeg, .png, ...)");
      continue;
    }
    STOKER_RETURN_IF_ERROR(EntrySample(e, where, file.Size(), options, out));
  }
  if (options.checksum) STOKER_RETURN_IF_ERROR(HashShard(file, out));
  return out;
}

void AddScannedShard(const std::string& name, uint64_t byte_size, const std::string& etag, ShardScan scan,
                     ManifestWriter& out, IndexReport& report) {
  uint32_t shard = out.AddShard(name, byte_size, scan.checksum, etag);
  for (ShardScan::Sample& s : scan.samples) {
    out.AddSample(shard, s.offset, s.size, s.label, s.format, std::move(s.key), std::move(s.defect), s.checksum);
  }
  for (IndexDefect& d : scan.defects) report.defects.push_back(std::move(d));
  for (std::string& n : scan.notes) report.notes.push_back(std::move(n));
  report.bytes += byte_size;
  ++report.shards;
}

StatusOr<IndexReport> IndexDataset(Env& env, const std::string& dataset, const std::string& manifest_path,
                                   const IndexOptions& options) {
  STOKER_ASSIGN_OR_RETURN(FileInfo info, env.Stat(dataset));
  if (!info.exists) return NotFoundError("dataset " + dataset + " does not exist");
  IndexReport report;
  Indexer indexer(env, options);
  std::string root = AbsolutePath(dataset);
  std::vector<std::string> tars;
  if (!info.is_directory) {
    if (!EndsWith(dataset, ".tar")) {
      return InvalidArgumentError(dataset + " is a file but not a .tar shard; pass a directory or a .tar file");
    }
    size_t slash = root.rfind('/');
    tars.push_back(root.substr(slash + 1));
    root = root.substr(0, slash);
  } else {
    STOKER_ASSIGN_OR_RETURN(auto names, env.ListDirectory(root));
    for (const auto& name : names) {
      if (EndsWith(name, ".tar")) tars.push_back(name);
    }
  }
  ManifestWriter writer(root, tars.empty() ? SourceKind::kImageFolder : SourceKind::kTarShards);
  if (!tars.empty()) {
    report.source = SourceKind::kTarShards;
    STOKER_RETURN_IF_ERROR(indexer.IndexTarShards(root, tars, writer, report));
  } else {
    report.source = SourceKind::kImageFolder;
    STOKER_RETURN_IF_ERROR(indexer.IndexImageFolder(root, writer, report));
  }
  report.samples = writer.num_samples();
  if (report.samples == 0) {
    return InvalidArgumentError(dataset + ": no samples found (tar members need KEY.jpg|jpeg|png; folders need "
                                          "images)");
  }
  STOKER_ASSIGN_OR_RETURN(report.fingerprint, writer.Write(env, manifest_path, "stoker index 0.1.0"));
  return report;
}

StatusOr<std::string> GeneratedDataset(Env& env, const std::string& dir, const std::string& name, uint64_t images,
                                       uint32_t per_shard) {
  const std::string manifest = dir + "/" + name + ".stoker";
  if (auto existing = Manifest::Open(env, manifest); existing.ok() && (*existing)->num_samples() == images) return manifest;
  datagen::GenerateOptions gen;
  gen.images = images;
  gen.per_shard = per_shard;
  STOKER_RETURN_IF_ERROR(datagen::GenerateTarDataset(env, dir + "/shards", gen));
  STOKER_RETURN_IF_ERROR(IndexDataset(env, dir + "/shards", manifest, IndexOptions{}).status());
  return manifest;
}

}  // namespace stoker::tools
