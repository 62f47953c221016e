// Checkpoint tokens (checkpoint.h) and the job spec's fingerprint they carry.
#include "dataset/checkpoint.h"

#include <cinttypes>
#include <cstdio>
#include <sstream>
#include <vector>

#include "base/hash.h"

namespace stoker {
namespace {
constexpr char kPrefix[] = "stoker-ckpt1";

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, sep);) parts.push_back(part);
  return parts;
}
}  // namespace

std::string EncodeCheckpointToken(const CheckpointToken& t) {
  char body[256];
  std::snprintf(body, sizeof(body), "%s:%s:%u:%" PRIu64 ":%016" PRIx64, kPrefix, t.job.c_str(), t.rank, t.position,
                t.spec_fingerprint);
  std::string text = body;
  char check[16];
  std::snprintf(check, sizeof(check), ":%08" PRIx32, static_cast<uint32_t>(Xxh64(text.data(), text.size())));
  return text + check;
}

StatusOr<CheckpointToken> DecodeCheckpointToken(const std::string& text) {
  std::vector<std::string> parts = Split(text, ':');
  if (parts.size() != 6 || parts[0] != kPrefix) {
    std::string message = "'";
    message.append(text, 0, 80);
    message.append("' is not a stoker checkpoint token (stoker-ckpt1:...)");
    return InvalidArgumentError(message);
  }
  std::string body = text.substr(0, text.rfind(':'));
  char check[16];
  std::snprintf(check, sizeof(check), "%08" PRIx32, static_cast<uint32_t>(Xxh64(body.data(), body.size())));
  if (parts[5] != check) return InvalidArgumentError("checkpoint token is damaged (check digest mismatch)");
  CheckpointToken t;
  t.job = parts[1];
  char* end = nullptr;
  t.rank = static_cast<uint32_t>(std::strtoul(parts[2].c_str(), &end, 10));
  t.position = std::strtoull(parts[3].c_str(), &end, 10);
  t.spec_fingerprint = std::strtoull(parts[4].c_str(), &end, 16);
  return t;
}

}  // namespace stoker
