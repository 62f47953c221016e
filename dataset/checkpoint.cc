// Checkpoint tokens (checkpoint.h): encoding, decoding and what a token may resume.
#include "dataset/checkpoint.h"

#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <sstream>
#include <vector>

#include "base/hash.h"

namespace stoker {
namespace {
constexpr char kPrefixV1[] = "stoker-ckpt1";
constexpr char kPrefixV2[] = "stoker-ckpt2";
constexpr size_t kFieldsV1 = 6;
constexpr size_t kFieldsV2 = 13;
constexpr size_t kMaxTokenBytes = 512;  // a job name of 64 bytes and every field at its widest is under 300

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, sep);) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.emplace_back();
  return parts;
}

std::string Check(const std::string& body) {
  char check[16];
  std::snprintf(check, sizeof(check), "%08" PRIx32, static_cast<uint32_t>(Xxh64(body.data(), body.size())));
  return check;
}

// A whole field of decimal (base 10) or hex (base 16) digits that fits `max`.
bool ParseNumber(const std::string& text, int base, uint64_t max, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  for (char c : text) {
    if (!(std::isdigit(static_cast<unsigned char>(c)) || (base == 16 && std::isxdigit(static_cast<unsigned char>(c))))) {
      return false;
    }
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, base);
  if (errno != 0 || *end != '\0' || v > max) return false;
  *out = v;
  return true;
}

std::string Hex(uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof(text), "%016" PRIx64, v);
  return text;
}
}  // namespace

CheckpointToken MakeCheckpointToken(const JobSpec& spec, const Plan& plan, uint32_t rank, uint64_t position) {
  CheckpointToken t;
  t.job = spec.name;
  t.rank = rank;
  t.position = position;
  t.point = plan.PointOf(position);
  t.ranks = spec.world_size;
  t.batch_size = spec.batch_size;
  t.epochs = spec.epochs;
  t.manifest_fingerprint = spec.manifest_fingerprint;
  t.seed = spec.seed;
  t.shuffle = spec.shuffle;
  t.remainder = spec.remainder;
  t.pipeline_fingerprint = PipelineFingerprint(spec.pipeline);
  return t;
}

CheckpointToken MakeCheckpointTokenV1(const std::string& job, uint32_t rank, uint64_t position,
                                      uint64_t spec_fingerprint) {
  CheckpointToken t;
  t.version = 1;
  t.job = job;
  t.rank = rank;
  t.position = position;
  t.spec_fingerprint = spec_fingerprint;
  return t;
}

std::string EncodeCheckpointToken(const CheckpointToken& t) {
  std::ostringstream body;
  if (t.version == 1) {
    body << kPrefixV1 << ":" << t.job << ":" << t.rank << ":" << t.position << ":" << Hex(t.spec_fingerprint);
  } else {
    body << kPrefixV2 << ":" << t.job << ":" << t.rank << ":" << t.position << ":" << t.point.epoch << ":"
         << t.point.offset << ":" << t.ranks << "x" << t.batch_size << ":" << t.epochs << ":"
         << Hex(t.manifest_fingerprint) << ":" << Hex(t.seed) << ":" << (t.shuffle ? "s" : "n")
         << (t.remainder == Remainder::kDrop ? "d" : "p") << ":" << Hex(t.pipeline_fingerprint);
  }
  const std::string text = body.str();
  return text + ":" + Check(text);
}

StatusOr<CheckpointToken> DecodeCheckpointToken(const std::string& text) {
  if (text.size() > kMaxTokenBytes) {
    return InvalidArgumentError("a checkpoint token is at most " + std::to_string(kMaxTokenBytes) + " bytes; this is " +
                                std::to_string(text.size()));
  }
  const std::vector<std::string> parts = Split(text, ':');
  const bool v1 = !parts.empty() && parts[0] == kPrefixV1 && parts.size() == kFieldsV1;
  const bool v2 = !parts.empty() && parts[0] == kPrefixV2 && parts.size() == kFieldsV2;
  if (!v1 && !v2) {
    std::string message = "'";
    message.append(text, 0, 80);
    message.append("' is not a stoker checkpoint token (stoker-ckpt2:... or stoker-ckpt1:...)");
    return InvalidArgumentError(message);
  }
  const std::string body = text.substr(0, text.rfind(':'));
  if (parts.back() != Check(body)) return InvalidArgumentError("checkpoint token is damaged (check digest mismatch)");
  const auto malformed = [] { return InvalidArgumentError("checkpoint token is malformed"); };
  CheckpointToken t;
  t.version = v1 ? 1 : 2;
  t.job = parts[1];
  uint64_t rank = 0;
  if (!IsValidJobName(t.job) || !ParseNumber(parts[2], 10, UINT32_MAX, &rank) ||
      !ParseNumber(parts[3], 10, UINT64_MAX, &t.position)) {
    return malformed();
  }
  t.rank = static_cast<uint32_t>(rank);
  if (v1) {
    if (!ParseNumber(parts[4], 16, UINT64_MAX, &t.spec_fingerprint)) return malformed();
    return t;
  }
  uint64_t epoch = 0, ranks = 0, batch = 0, epochs = 0;
  const std::string& shape = parts[6];
  const size_t x = shape.find('x');
  const std::string& order = parts[10];
  if (!ParseNumber(parts[4], 10, UINT32_MAX, &epoch) || !ParseNumber(parts[5], 10, UINT64_MAX, &t.point.offset) ||
      x == std::string::npos || !ParseNumber(shape.substr(0, x), 10, UINT32_MAX, &ranks) ||
      !ParseNumber(shape.substr(x + 1), 10, UINT32_MAX, &batch) || !ParseNumber(parts[7], 10, UINT32_MAX, &epochs) ||
      !ParseNumber(parts[8], 16, UINT64_MAX, &t.manifest_fingerprint) ||
      !ParseNumber(parts[9], 16, UINT64_MAX, &t.seed) || order.size() != 2 || (order[0] != 's' && order[0] != 'n') ||
      (order[1] != 'd' && order[1] != 'p') || !ParseNumber(parts[11], 16, UINT64_MAX, &t.pipeline_fingerprint)) {
    return malformed();
  }
  t.point.epoch = static_cast<uint32_t>(epoch);
  t.ranks = static_cast<uint32_t>(ranks);
  t.batch_size = static_cast<uint32_t>(batch);
  t.epochs = static_cast<uint32_t>(epochs);
  t.shuffle = order[0] == 's';
  t.remainder = order[1] == 'd' ? Remainder::kDrop : Remainder::kPad;
  return t;
}

std::vector<std::string> ContentDifferences(const CheckpointToken& t, const JobSpec& spec) {
  std::vector<std::string> out;
  auto compare = [&out](const char* field, const std::string& token, const std::string& job) {
    if (token != job) out.push_back(std::string(field) + ": " + token + " in the checkpoint, " + job + " in the job");
  };
  compare("dataset (manifest fingerprint)", Hex(t.manifest_fingerprint), Hex(spec.manifest_fingerprint));
  compare("seed", std::to_string(t.seed), std::to_string(spec.seed));
  compare("shuffle", t.shuffle ? "true" : "false", spec.shuffle ? "true" : "false");
  compare("remainder", RemainderName(t.remainder), RemainderName(spec.remainder));
  compare("pipeline (augmentation fingerprint)", Hex(t.pipeline_fingerprint), Hex(PipelineFingerprint(spec.pipeline)));
  compare("epochs", std::to_string(t.epochs), std::to_string(spec.epochs));
  return out;
}

}  // namespace stoker
