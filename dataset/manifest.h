// Manifest: a dataset's index (schema/manifest.capnp), opened read-only by the coordinator and workers. The file
// is read whole into memory (a mapping would turn a file truncated underneath into SIGBUS), and Open() validates
// every field of every shard, sample and class once: a manifest that opens can be read for the life of the process
// without a check or an exception, and a damaged one is refused (DataLoss) saying what is wrong where.
// ManifestWriter builds one (used by `stoker index` and tests).
//
// Thread safety: a Manifest is immutable; all methods may be called concurrently. ManifestWriter is not.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "stoker/status.h"

namespace stoker {

enum class ImageFormat : uint8_t { kJpeg = 0, kPng = 1, kOther = 2 };
enum class SourceKind : uint8_t { kImageFolder = 0, kTarShards = 1 };

// True for a location on object storage or a web server rather than a file system: s3://, http://, https://.
bool IsObjectUrl(std::string_view location);

// Classifies a file extension (without the dot, any case): jpeg, png, other image, or not an image (false).
bool ImageFormatForExtension(std::string_view ext, ImageFormat* format);

struct ShardInfo {
  std::string path;          // absolute (root joined with the stored relative path): a file path or a URL
  uint64_t byte_size = 0;
  uint64_t checksum = 0;
  uint32_t sample_count = 0;
  std::string etag;          // remote shards: the ETag when indexed (empty: not recorded, or a local file)
};

struct SampleInfo {
  uint32_t shard = 0;
  uint64_t offset = 0;
  uint32_t size = 0;
  int64_t label = -1;
  ImageFormat format = ImageFormat::kJpeg;
  std::string_view key;      // valid as long as the Manifest lives
  std::string_view defect;   // empty unless indexing found the sample unusable
  uint64_t checksum = 0;     // XXH64 of the sample's bytes; 0: not recorded
};

class Manifest {
 public:
  // Reads `path` through `env`. NotFound / InvalidArgument ("not a stoker manifest") / DataLoss (corrupt) with the
  // path in the message. `root_override`, when set, replaces the root recorded at indexing time (the dataset is
  // mounted elsewhere).
  static StatusOr<std::shared_ptr<const Manifest>> Open(Env& env, const std::string& path,
                                                        const std::string& root_override = "");
  // The same from a manifest file's bytes (`path` only names it in errors): the fuzz target's way in.
  static StatusOr<std::shared_ptr<const Manifest>> Parse(const std::string& path, std::string_view bytes,
                                                         const std::string& root_override = "");
  ~Manifest();
  Manifest(const Manifest&) = delete;
  Manifest& operator=(const Manifest&) = delete;

  const std::string& path() const { return path_; }
  uint64_t fingerprint() const { return fingerprint_; }
  const std::string& root() const { return root_; }
  // The shards are on object storage or a web server (the root is a URL), not on a file system.
  bool remote() const { return IsObjectUrl(root_); }
  uint32_t format_version() const;
  SourceKind source() const;
  uint64_t num_samples() const;
  uint32_t num_shards() const;
  std::vector<std::string> classes() const;

  SampleInfo sample(uint64_t id) const;
  ShardInfo shard(uint32_t index) const;

 private:
  struct Impl;
  explicit Manifest(std::unique_ptr<Impl> impl);
  // The message after the magic, as 8-byte words.
  static StatusOr<std::shared_ptr<const Manifest>> FromWords(const std::string& path, std::vector<uint64_t> words,
                                                             const std::string& root_override);
  std::unique_ptr<Impl> impl_;
  std::string path_;
  std::string root_;
  uint64_t fingerprint_ = 0;
};

class ManifestWriter {
 public:
  ManifestWriter(std::string root, SourceKind source);

  void SetClasses(std::vector<std::string> classes) { classes_ = std::move(classes); }
  // Returns the new shard's index. `relative_path` is relative to the root (a key under a URL root).
  uint32_t AddShard(std::string relative_path, uint64_t byte_size, uint64_t checksum, std::string etag = "");
  // `checksum`: XXH64 of the sample's bytes, 0 when not computed.
  void AddSample(uint32_t shard, uint64_t offset, uint32_t size, int64_t label, ImageFormat format, std::string key,
                 std::string defect = "", uint64_t checksum = 0);
  uint64_t num_samples() const { return samples_.size(); }

  // Writes "STKMAN01" + the message atomically; returns the file's fingerprint (XXH64). Format version 2 when the
  // root is a URL or a shard has an ETag, else 1 (what older builds read).
  StatusOr<uint64_t> Write(Env& env, const std::string& path, const std::string& created_by) const;

 private:
  struct PendingShard {
    std::string path;
    uint64_t byte_size;
    uint64_t checksum;
    uint32_t sample_count = 0;
    std::string etag;
  };
  struct PendingSample {
    uint32_t shard;
    uint64_t offset;
    uint32_t size;
    int64_t label;
    ImageFormat format;
    std::string key;
    std::string defect;
    uint64_t checksum;
  };
  std::string root_;
  SourceKind source_;
  std::vector<std::string> classes_;
  std::vector<PendingShard> shards_;
  std::vector<PendingSample> samples_;
};

}  // namespace stoker
