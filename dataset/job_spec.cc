// JobSpec (stoker/job_spec.h): validation, the differences a refused registration lists, the enum names and the
// fingerprint.
#include "stoker/job_spec.h"

#include <cctype>
#include <cmath>
#include <sstream>

#include "base/hash.h"

namespace stoker {
namespace {

template <typename T>
void Compare(std::vector<std::string>& out, const char* field, const T& here, const T& registered) {
  if (here == registered) return;
  std::ostringstream line;
  line << field << ": " << here << " here, " << registered << " registered";
  out.push_back(line.str());
}

}  // namespace

bool IsValidJobName(std::string_view name) {
  if (name.empty() || name.size() > kMaxJobNameBytes) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

const char* RemainderName(Remainder r) { return r == Remainder::kDrop ? "drop" : "pad"; }
const char* ResizeKernelName(ResizeKernel k) { return k == ResizeKernel::kPillow ? "pillow" : "opencv"; }
const char* GpuDecodeName(GpuDecode g) {
  return g == GpuDecode::kFile ? "file" : g == GpuDecode::kCut ? "cut" : "off";
}
const char* PipelineModeName(PipelineMode m) { return m == PipelineMode::kTrain ? "train" : "eval"; }

Status JobSpec::Validate() const {
  if (!IsValidJobName(name)) {
    return InvalidArgumentError("job name '" + name + "' must be 1-64 characters of [A-Za-z0-9._-]");
  }
  if (manifest_path.empty()) return InvalidArgumentError("job '" + name + "': manifest path is empty");
  if (batch_size == 0) return InvalidArgumentError("job '" + name + "': batch_size must be at least 1");
  if (batch_size > 65536) return InvalidArgumentError("job '" + name + "': batch_size above 65536");
  if (world_size == 0) return InvalidArgumentError("job '" + name + "': world_size (ranks) must be at least 1");
  if (world_size > 65536) return InvalidArgumentError("job '" + name + "': world_size above 65536");
  if (epochs == 0) return InvalidArgumentError("job '" + name + "': epochs must be at least 1");
  if (origin_epoch > epochs || (origin_epoch == epochs && origin_offset != 0)) {
    return InvalidArgumentError("job '" + name + "': origin (epoch " + std::to_string(origin_epoch) + ", offset " +
                                std::to_string(origin_offset) + ") is past the job's " + std::to_string(epochs) +
                                " epochs");
  }
  if (epochs > kMaxEpochs) {
    return InvalidArgumentError("job '" + name + "': epochs above " + std::to_string(kMaxEpochs));
  }
  if (batches_per_unit == 0 || batches_per_unit > 1024) {
    return InvalidArgumentError("job '" + name + "': batches_per_unit must be in [1, 1024]");
  }
  const PipelineSpec& p = pipeline;
  if (p.output_height == 0 || p.output_width == 0 || p.output_height > 4096 || p.output_width > 4096) {
    return InvalidArgumentError("job '" + name + "': output size must be in [1, 4096] on each side");
  }
  if (BatchBytes() > (uint64_t{2} << 30)) {
    return InvalidArgumentError("job '" + name + "': one batch would be " + std::to_string(BatchBytes()) +
                                " bytes; the limit is 2 GiB (lower batch_size or the output size)");
  }
  auto finite_positive = [](float v) { return std::isfinite(v) && v > 0; };
  if (!finite_positive(p.scale_min) || !finite_positive(p.scale_max) || p.scale_min > p.scale_max ||
      p.scale_max > 1.0f) {
    return InvalidArgumentError("job '" + name + "': scale range must satisfy 0 < scale_min <= scale_max <= 1");
  }
  if (!finite_positive(p.ratio_min) || !finite_positive(p.ratio_max) || p.ratio_min > p.ratio_max) {
    return InvalidArgumentError("job '" + name + "': ratio range must satisfy 0 < ratio_min <= ratio_max");
  }
  if (!(p.flip_probability >= 0.0f && p.flip_probability <= 1.0f)) {
    return InvalidArgumentError("job '" + name + "': flip probability must be in [0, 1]");
  }
  if (p.mode == PipelineMode::kEval &&
      (p.resize_shorter < p.output_height || p.resize_shorter < p.output_width)) {
    return InvalidArgumentError("job '" + name + "': eval resize_shorter (" + std::to_string(p.resize_shorter) +
                                ") must be at least the output size");
  }
  if (p.DecodesOnGpu() && p.resize_kernel != ResizeKernel::kPillow) {
    return InvalidArgumentError("job '" + name + "': gpu_decode resizes with the pillow kernel only (resize_kernel is " +
                                ResizeKernelName(p.resize_kernel) + ")");
  }
  return Status::Ok();
}

std::vector<std::string> JobSpec::Differences(const JobSpec& r) const {
  std::vector<std::string> out;
  Compare(out, "name", name, r.name);
  Compare(out, "manifest", manifest_path, r.manifest_path);
  if (manifest_fingerprint != 0 && r.manifest_fingerprint != 0) {
    Compare(out, "manifest_fingerprint", manifest_fingerprint, r.manifest_fingerprint);
  }
  Compare(out, "batch_size", batch_size, r.batch_size);
  Compare(out, "world_size", world_size, r.world_size);
  Compare(out, "epochs", epochs, r.epochs);
  Compare(out, "seed", seed, r.seed);
  Compare(out, "shuffle", shuffle, r.shuffle);
  Compare(out, "remainder", std::string(RemainderName(remainder)), std::string(RemainderName(r.remainder)));
  Compare(out, "batches_per_unit", batches_per_unit, r.batches_per_unit);
  const PipelineSpec& a = pipeline;
  const PipelineSpec& b = r.pipeline;
  Compare(out, "pipeline", std::string(PipelineModeName(a.mode)), std::string(PipelineModeName(b.mode)));
  Compare(out, "output_height", a.output_height, b.output_height);
  Compare(out, "output_width", a.output_width, b.output_width);
  Compare(out, "scale_min", a.scale_min, b.scale_min);
  Compare(out, "scale_max", a.scale_max, b.scale_max);
  Compare(out, "ratio_min", a.ratio_min, b.ratio_min);
  Compare(out, "ratio_max", a.ratio_max, b.ratio_max);
  Compare(out, "flip_probability", a.flip_probability, b.flip_probability);
  Compare(out, "resize_shorter", a.resize_shorter, b.resize_shorter);
  Compare(out, "antialias", a.antialias, b.antialias);
  Compare(out, "resize_kernel", std::string(ResizeKernelName(a.resize_kernel)),
          std::string(ResizeKernelName(b.resize_kernel)));
  Compare(out, "gpu_decode", std::string(GpuDecodeName(a.gpu_decode)), std::string(GpuDecodeName(b.gpu_decode)));
  return out;
}

bool JobSpec::IsShapeField(std::string_view difference) {
  for (std::string_view field : {"world_size:", "batch_size:", "batches_per_unit:"}) {
    if (difference.substr(0, field.size()) == field) return true;
  }
  return false;
}

namespace {
void WritePipeline(std::ostringstream& c, const PipelineSpec& p) {
  c << "\nmode=" << PipelineModeName(p.mode) << "\nout=" << p.output_height << "x" << p.output_width
    << "\nscale=" << p.scale_min << "," << p.scale_max << "\nratio=" << p.ratio_min << "," << p.ratio_max
    << "\nflip=" << p.flip_probability << "\nresize=" << p.resize_shorter << "\nantialias=" << p.antialias;
  // Added after tokens were first issued: absent for the kernel those jobs had, so their tokens stay valid.
  if (p.resize_kernel != ResizeKernel::kOpenCv) c << "\nresize_kernel=" << ResizeKernelName(p.resize_kernel);
  // Later still, and only when set: the bytes of a batch differ from the CPU path's.
  if (p.DecodesOnGpu()) c << "\ngpu_decode=" << GpuDecodeName(p.gpu_decode);
}
}  // namespace

uint64_t SpecFingerprint(const JobSpec& spec) {
  std::ostringstream c;
  c << "name=" << spec.name << "\nmanifest=" << spec.manifest_path << "\nfingerprint=" << spec.manifest_fingerprint
    << "\nbatch=" << spec.batch_size << "\nworld=" << spec.world_size << "\nepochs=" << spec.epochs
    << "\nseed=" << spec.seed << "\nshuffle=" << spec.shuffle << "\nremainder=" << RemainderName(spec.remainder)
    << "\nper_unit=" << spec.batches_per_unit;
  WritePipeline(c, spec.pipeline);
  // Added later still, and only when set: every job that starts at the beginning keeps its fingerprint.
  if (spec.origin_epoch != 0 || spec.origin_offset != 0) {
    c << "\norigin=" << spec.origin_epoch << "," << spec.origin_offset;
  }
  std::string text = c.str();
  return Xxh64(text.data(), text.size());
}

uint64_t PipelineFingerprint(const PipelineSpec& pipeline) {
  std::ostringstream c;
  c << "pipeline";
  WritePipeline(c, pipeline);
  std::string text = c.str();
  return Xxh64(text.data(), text.size());
}

}  // namespace stoker
