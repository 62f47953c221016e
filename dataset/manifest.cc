// The dataset manifest (manifest.h): writing it, and opening an untrusted one under checks.
#include "dataset/manifest.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <vector>

#include "stoker/clock.h"
#include "base/hash.h"
#include "stoker/schema/manifest.capnp.h"

namespace stoker {
namespace {
constexpr char kMagic[8] = {'S', 'T', 'K', 'M', 'A', 'N', '0', '1'};
constexpr uint32_t kFormatVersion = 1;        // local shards: what every build reads
constexpr uint32_t kRemoteFormatVersion = 2;  // remote shards (URL root, ETags, sample checksums)
}  // namespace

bool IsObjectUrl(std::string_view location) {
  return location.starts_with("s3://") || location.starts_with("http://") || location.starts_with("https://");
}

bool ImageFormatForExtension(std::string_view ext, ImageFormat* format) {
  std::string lower(ext);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "jpg" || lower == "jpeg") {
    *format = ImageFormat::kJpeg;
  } else if (lower == "png") {
    *format = ImageFormat::kPng;
  } else if (lower == "webp" || lower == "bmp" || lower == "tif" || lower == "tiff" || lower == "ppm" ||
             lower == "pgm" || lower == "pbm" || lower == "jp2") {
    *format = ImageFormat::kOther;
  } else {
    return false;
  }
  return true;
}

struct Manifest::Impl {
  std::vector<uint64_t> words;  // the message after the magic, owned and word-aligned
  std::unique_ptr<capnp::FlatArrayMessageReader> reader;
  wire::Manifest::Reader root;
  capnp::List<wire::Sample>::Reader samples;
  capnp::List<wire::Shard>::Reader shards;
};

Manifest::Manifest(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Manifest::~Manifest() = default;

namespace {

// A path of a shard inside the dataset: not empty, no NUL, no ".." component (nothing outside the root).
bool ValidShardPath(std::string_view path) {
  if (path.empty() || path.find('\0') != std::string_view::npos) return false;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = std::min(path.find('/', start), path.size());
    if (path.substr(start, slash - start) == "..") return false;
    start = slash + 1;
  }
  return true;
}

// Reads every field of every shard, sample and class once, so that a manifest Open accepts can be read for the
// life of the process without a check or an exception (Cap'n Proto checks a text's terminator when it is read).
// `words`: the file's size in 8-byte words.
Status Validate(const wire::Manifest::Reader& root, const std::string& path, size_t words) {
  const auto shards = root.getShards();
  const auto samples = root.getSamples();
  // Every shard and sample the writer makes takes words of its own, but Cap'n Proto lets a list of empty structs
  // claim 2^29 elements in none (the traversal limit is off: this is a local file read in full, below): a 400-byte
  // file claimed 16 million samples, and reading them all took 16 s (found by fuzzing).
  if (uint64_t{samples.size()} + shards.size() > words) {
    return DataLossError("manifest " + path + " is corrupt: it claims " + std::to_string(samples.size()) +
                         " samples and " + std::to_string(shards.size()) + " shards in " +
                         std::to_string(words * 8) + " bytes");
  }
  (void)root.getRoot();
  (void)root.getCreatedBy();
  if (static_cast<uint16_t>(root.getSource()) > static_cast<uint16_t>(wire::SourceKind::TAR_SHARDS)) {
    return DataLossError("manifest " + path + ": an unknown source kind");
  }
  for (auto c : root.getClasses()) (void)c.size();
  uint64_t expected_samples = 0;
  for (uint32_t i = 0; i < shards.size(); ++i) {
    auto shard = shards[i];
    if (!ValidShardPath(std::string_view(shard.getPath().cStr(), shard.getPath().size()))) {
      return DataLossError("manifest " + path + ": shard " + std::to_string(i) +
                           " has an empty path, a NUL in it or a '..' component");
    }
    (void)shard.getEtag();
    expected_samples += shard.getSampleCount();
  }
  if (expected_samples != samples.size()) {
    return DataLossError("manifest " + path + " is inconsistent: shards declare " + std::to_string(expected_samples) +
                         " samples, the list holds " + std::to_string(samples.size()));
  }
  for (uint64_t i = 0; i < samples.size(); ++i) {
    auto s = samples[static_cast<unsigned>(i)];
    const std::string where = "manifest " + path + ": sample " + std::to_string(i);
    if (s.getShard() >= shards.size()) {
      return DataLossError(where + " names shard " + std::to_string(s.getShard()) + " of " +
                           std::to_string(shards.size()));
    }
    const uint64_t shard_bytes = shards[s.getShard()].getByteSize();
    if (s.getOffset() > shard_bytes || s.getSize() > shard_bytes - s.getOffset()) {
      return DataLossError(where + " lies past the end of its shard");
    }
    if (s.getLabel() < -1) return DataLossError(where + " has label " + std::to_string(s.getLabel()));
    if (static_cast<uint16_t>(s.getFormat()) > static_cast<uint16_t>(wire::ImageFormat::OTHER)) {
      return DataLossError(where + " has an unknown image format");
    }
    (void)s.getKey();
    (void)s.getDefect();
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::shared_ptr<const Manifest>> Manifest::Open(Env& env, const std::string& path,
                                                         const std::string& root_override) {
  auto file = env.OpenForRead(path);
  if (!file.ok()) {
    const Status& s = file.status();
    return s.code() == StatusCode::kNotFound
               ? NotFoundError("cannot open manifest " + path + ": " + std::string(s.message()) +
                               " (create one with `stoker index DATASET -o " + path + "`)")
               : UnavailableError("cannot open manifest " + path + ": " + std::string(s.message()));
  }
  const uint64_t size = (*file)->Size();
  if (size < sizeof(kMagic) + 8) return InvalidArgumentError(path + " is not a stoker manifest (too short)");
  char magic[sizeof(kMagic)];
  STOKER_ASSIGN_OR_RETURN(size_t got, (*file)->Read(0, sizeof(magic), magic));
  if (got != sizeof(magic) || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return InvalidArgumentError(path + " is not a stoker manifest (bad magic; write one with `stoker index`)");
  }
  if ((size - sizeof(kMagic)) % sizeof(capnp::word) != 0) {
    return DataLossError("manifest " + path + " is truncated (size not a whole number of words)");
  }
  // Read whole, not mapped: a file truncated under a mapping would kill the process with SIGBUS on a later read.
  std::vector<uint64_t> words((size - sizeof(kMagic)) / sizeof(capnp::word));
  const size_t bytes = words.size() * sizeof(capnp::word);
  STOKER_ASSIGN_OR_RETURN(got, (*file)->Read(sizeof(kMagic), bytes, words.data()));
  if (got != bytes) return DataLossError("manifest " + path + " shrank while it was read");
  return FromWords(path, std::move(words), root_override);
}

StatusOr<std::shared_ptr<const Manifest>> Manifest::Parse(const std::string& path, std::string_view bytes,
                                                          const std::string& root_override) {
  if (bytes.size() < sizeof(kMagic) + 8 || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return InvalidArgumentError(path + " is not a stoker manifest (too short or bad magic)");
  }
  if ((bytes.size() - sizeof(kMagic)) % sizeof(capnp::word) != 0) {
    return DataLossError("manifest " + path + " is truncated (size not a whole number of words)");
  }
  std::vector<uint64_t> words((bytes.size() - sizeof(kMagic)) / sizeof(capnp::word));
  std::memcpy(words.data(), bytes.data() + sizeof(kMagic), words.size() * sizeof(capnp::word));
  return FromWords(path, std::move(words), root_override);
}

StatusOr<std::shared_ptr<const Manifest>> Manifest::FromWords(const std::string& path, std::vector<uint64_t> words,
                                                              const std::string& root_override) {
  Xxh64Stream fingerprint;
  fingerprint.Update(kMagic, sizeof(kMagic));
  fingerprint.Update(words.data(), words.size() * sizeof(capnp::word));
  auto impl = std::make_unique<Impl>();
  impl->words = std::move(words);
  auto manifest = std::shared_ptr<Manifest>(new Manifest(std::move(impl)));
  manifest->path_ = path;
  manifest->fingerprint_ = fingerprint.Digest();
  Impl& m = *manifest->impl_;
  try {
    capnp::ReaderOptions options;
    // A local file, validated in full below; lookups re-read pointers for the life of the process, so the
    // traversal budget must not run out. Nesting stays limited.
    options.traversalLimitInWords = std::numeric_limits<uint64_t>::max() / 2;
    options.nestingLimit = 16;
    m.reader = std::make_unique<capnp::FlatArrayMessageReader>(
        kj::ArrayPtr<const capnp::word>(reinterpret_cast<const capnp::word*>(m.words.data()), m.words.size()),
        options);
    m.root = m.reader->getRoot<wire::Manifest>();
    const uint32_t version = m.root.getFormatVersion();
    if (version != kFormatVersion && version != kRemoteFormatVersion) {
      return InvalidArgumentError("manifest " + path + " has format version " + std::to_string(version) +
                                  "; this build reads versions " + std::to_string(kFormatVersion) + " and " +
                                  std::to_string(kRemoteFormatVersion) + " (re-run `stoker index`)");
    }
    STOKER_RETURN_IF_ERROR(Validate(m.root, path, m.words.size()));
    m.samples = m.root.getSamples();
    m.shards = m.root.getShards();
    manifest->root_ = root_override.empty() ? std::string(m.root.getRoot().cStr()) : root_override;
  } catch (const kj::Exception& e) {
    return DataLossError("manifest " + path + " is corrupt: " + std::string(e.getDescription().cStr()));
  }
  return std::shared_ptr<const Manifest>(std::move(manifest));
}

uint32_t Manifest::format_version() const { return impl_->root.getFormatVersion(); }

SourceKind Manifest::source() const {
  return impl_->root.getSource() == wire::SourceKind::IMAGE_FOLDER ? SourceKind::kImageFolder : SourceKind::kTarShards;
}
uint64_t Manifest::num_samples() const { return impl_->samples.size(); }
uint32_t Manifest::num_shards() const { return impl_->shards.size(); }

std::vector<std::string> Manifest::classes() const {
  std::vector<std::string> out;
  for (auto c : impl_->root.getClasses()) out.emplace_back(c.cStr());
  return out;
}

SampleInfo Manifest::sample(uint64_t id) const {
  STOKER_CHECK(id < num_samples(), "sample id out of range");
  auto s = impl_->samples[static_cast<unsigned>(id)];
  SampleInfo info;
  info.shard = s.getShard();
  info.offset = s.getOffset();
  info.size = s.getSize();
  info.label = s.getLabel();
  switch (s.getFormat()) {
    case wire::ImageFormat::JPEG: info.format = ImageFormat::kJpeg; break;
    case wire::ImageFormat::PNG: info.format = ImageFormat::kPng; break;
    default: info.format = ImageFormat::kOther; break;
  }
  auto key = s.getKey();
  info.key = std::string_view(key.cStr(), key.size());
  auto defect = s.getDefect();
  info.defect = std::string_view(defect.cStr(), defect.size());
  info.checksum = s.getChecksum();
  return info;
}

ShardInfo Manifest::shard(uint32_t index) const {
  STOKER_CHECK(index < num_shards(), "shard index out of range");
  auto s = impl_->shards[index];
  ShardInfo info;
  info.path = JoinPath(root_, s.getPath().cStr());
  info.byte_size = s.getByteSize();
  info.checksum = s.getChecksum();
  info.sample_count = s.getSampleCount();
  info.etag = s.getEtag().cStr();
  return info;
}

ManifestWriter::ManifestWriter(std::string root, SourceKind source) : root_(std::move(root)), source_(source) {}

uint32_t ManifestWriter::AddShard(std::string relative_path, uint64_t byte_size, uint64_t checksum,
                                  std::string etag) {
  shards_.push_back({std::move(relative_path), byte_size, checksum, 0, std::move(etag)});
  return static_cast<uint32_t>(shards_.size() - 1);
}

void ManifestWriter::AddSample(uint32_t shard, uint64_t offset, uint32_t size, int64_t label, ImageFormat format,
                               std::string key, std::string defect, uint64_t checksum) {
  STOKER_CHECK(shard < shards_.size(), "AddSample before AddShard");
  ++shards_[shard].sample_count;
  samples_.push_back({shard, offset, size, label, format, std::move(key), std::move(defect), checksum});
}

StatusOr<uint64_t> ManifestWriter::Write(Env& env, const std::string& path, const std::string& created_by) const {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<wire::Manifest>();
  bool remote = IsObjectUrl(root_);
  for (const PendingShard& shard : shards_) remote = remote || !shard.etag.empty();
  root.setFormatVersion(remote ? kRemoteFormatVersion : kFormatVersion);
  root.setRoot(root_);
  root.setSource(source_ == SourceKind::kImageFolder ? wire::SourceKind::IMAGE_FOLDER : wire::SourceKind::TAR_SHARDS);
  auto classes = root.initClasses(static_cast<unsigned>(classes_.size()));
  for (size_t i = 0; i < classes_.size(); ++i) classes.set(static_cast<unsigned>(i), classes_[i]);
  auto shards = root.initShards(static_cast<unsigned>(shards_.size()));
  for (size_t i = 0; i < shards_.size(); ++i) {
    auto s = shards[static_cast<unsigned>(i)];
    s.setPath(shards_[i].path);
    s.setByteSize(shards_[i].byte_size);
    s.setChecksum(shards_[i].checksum);
    s.setSampleCount(shards_[i].sample_count);
    if (!shards_[i].etag.empty()) s.setEtag(shards_[i].etag);
  }
  auto samples = root.initSamples(static_cast<unsigned>(samples_.size()));
  for (size_t i = 0; i < samples_.size(); ++i) {
    const PendingSample& p = samples_[i];
    auto s = samples[static_cast<unsigned>(i)];
    s.setShard(p.shard);
    s.setOffset(p.offset);
    s.setSize(p.size);
    s.setLabel(p.label);
    s.setFormat(p.format == ImageFormat::kJpeg  ? wire::ImageFormat::JPEG
                : p.format == ImageFormat::kPng ? wire::ImageFormat::PNG
                                                : wire::ImageFormat::OTHER);
    s.setKey(p.key);
    if (!p.defect.empty()) s.setDefect(p.defect);
    s.setChecksum(p.checksum);
  }
  root.setCreatedBy(created_by);
  root.setCreatedAtUnixMs(static_cast<uint64_t>(UnixMillisNow()));
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  std::string file(kMagic, sizeof(kMagic));
  file.append(reinterpret_cast<const char*>(words.begin()), words.size() * sizeof(capnp::word));
  STOKER_RETURN_IF_ERROR(env.WriteFileAtomically(path, file.data(), file.size()));
  return Xxh64(file.data(), file.size());
}

}  // namespace stoker
