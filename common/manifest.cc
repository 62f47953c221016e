#include "common/manifest.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fcntl.h>
#include <kj/exception.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>

#include "common/clock.h"
#include "common/hash.h"
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
  void* map = MAP_FAILED;
  size_t map_size = 0;
  std::unique_ptr<capnp::FlatArrayMessageReader> reader;
  wire::Manifest::Reader root;
  capnp::List<wire::Sample>::Reader samples;
  capnp::List<wire::Shard>::Reader shards;

  ~Impl() {
    reader.reset();
    if (map != MAP_FAILED) ::munmap(map, map_size);
  }
};

Manifest::Manifest(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Manifest::~Manifest() = default;

StatusOr<std::shared_ptr<const Manifest>> Manifest::Open(const std::string& path, const std::string& root_override) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::string message = "cannot open manifest " + path + ": " + std::strerror(errno);
    return errno == ENOENT ? NotFoundError(message + " (create one with `stoker index DATASET -o " + path + "`)")
                           : UnavailableError(message);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(kMagic) + 8)) {
    ::close(fd);
    return InvalidArgumentError(path + " is not a stoker manifest (too short)");
  }
  auto impl = std::make_unique<Impl>();
  impl->map_size = static_cast<size_t>(st.st_size);
  impl->map = ::mmap(nullptr, impl->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (impl->map == MAP_FAILED) return UnavailableError("cannot map manifest " + path + ": " + std::strerror(errno));
  const auto* bytes = static_cast<const unsigned char*>(impl->map);
  if (std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0) {
    return InvalidArgumentError(path + " is not a stoker manifest (bad magic; write one with `stoker index`)");
  }
  if ((impl->map_size - sizeof(kMagic)) % sizeof(capnp::word) != 0) {
    return DataLossError("manifest " + path + " is truncated (size not a whole number of words)");
  }
  uint64_t fingerprint = Xxh64(bytes, impl->map_size);

  auto manifest = std::shared_ptr<Manifest>(new Manifest(std::move(impl)));
  manifest->path_ = path;
  manifest->fingerprint_ = fingerprint;
  Impl& m = *manifest->impl_;
  try {
    kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(bytes + sizeof(kMagic)),
                                          (m.map_size - sizeof(kMagic)) / sizeof(capnp::word));
    capnp::ReaderOptions options;
    // A local file we wrote and validate in full below; lookups re-read pointers for the life of the process,
    // so the traversal budget must not run out. Nesting stays limited.
    options.traversalLimitInWords = std::numeric_limits<uint64_t>::max() / 2;
    options.nestingLimit = 16;
    m.reader = std::make_unique<capnp::FlatArrayMessageReader>(words, options);
    m.root = m.reader->getRoot<wire::Manifest>();
    const uint32_t version = m.root.getFormatVersion();
    if (version != kFormatVersion && version != kRemoteFormatVersion) {
      return InvalidArgumentError("manifest " + path + " has format version " + std::to_string(version) +
                                  "; this build reads versions " + std::to_string(kFormatVersion) + " and " +
                                  std::to_string(kRemoteFormatVersion) + " (re-run `stoker index`)");
    }
    m.samples = m.root.getSamples();
    m.shards = m.root.getShards();
    uint64_t expected_samples = 0;
    for (auto shard : m.shards) expected_samples += shard.getSampleCount();
    if (expected_samples != m.samples.size()) {
      return DataLossError("manifest " + path + " is inconsistent: shards declare " +
                           std::to_string(expected_samples) + " samples, the list holds " +
                           std::to_string(m.samples.size()));
    }
    for (uint64_t i = 0; i < m.samples.size(); ++i) {
      auto s = m.samples[static_cast<unsigned>(i)];
      if (s.getShard() >= m.shards.size()) {
        return DataLossError("manifest " + path + ": sample " + std::to_string(i) + " names shard " +
                             std::to_string(s.getShard()) + " of " + std::to_string(m.shards.size()));
      }
      auto shard = m.shards[s.getShard()];
      if (s.getOffset() + s.getSize() > shard.getByteSize()) {
        return DataLossError("manifest " + path + ": sample " + std::to_string(i) + " lies past the end of its shard");
      }
    }
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
