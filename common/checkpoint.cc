#include "common/checkpoint.h"

#include <cinttypes>
#include <cstdio>
#include <sstream>
#include <vector>

#include "common/hash.h"

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

uint64_t SpecFingerprint(const JobSpec& spec) {
  std::ostringstream c;
  const PipelineSpec& p = spec.pipeline;
  c << "name=" << spec.name << "\nmanifest=" << spec.manifest_path << "\nfingerprint=" << spec.manifest_fingerprint
    << "\nbatch=" << spec.batch_size << "\nworld=" << spec.world_size << "\nepochs=" << spec.epochs
    << "\nseed=" << spec.seed << "\nshuffle=" << spec.shuffle << "\nremainder=" << RemainderName(spec.remainder)
    << "\nper_unit=" << spec.batches_per_unit << "\nmode=" << PipelineModeName(p.mode) << "\nout=" << p.output_height
    << "x" << p.output_width << "\nscale=" << p.scale_min << "," << p.scale_max << "\nratio=" << p.ratio_min << ","
    << p.ratio_max << "\nflip=" << p.flip_probability << "\nresize=" << p.resize_shorter
    << "\nantialias=" << p.antialias;
  // Added after tokens were first issued: absent for the kernel those jobs had, so their tokens stay valid.
  if (p.resize_kernel != ResizeKernel::kOpenCv) c << "\nresize_kernel=" << ResizeKernelName(p.resize_kernel);
  std::string text = c.str();
  return Xxh64(text.data(), text.size());
}

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
