#include "common/job_spec.h"

#include <cctype>
#include <cmath>
#include <sstream>

#include "common/flags.h"

namespace stoker {
namespace {

bool ValidJobName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

template <typename T>
void Compare(std::vector<std::string>& out, const char* field, const T& here, const T& registered) {
  if (here == registered) return;
  std::ostringstream line;
  line << field << ": " << here << " here, " << registered << " registered";
  out.push_back(line.str());
}

}  // namespace

const char* RemainderName(Remainder r) { return r == Remainder::kDrop ? "drop" : "pad"; }
const char* ResizeKernelName(ResizeKernel k) { return k == ResizeKernel::kPillow ? "pillow" : "opencv"; }
const char* PipelineModeName(PipelineMode m) { return m == PipelineMode::kTrain ? "train" : "eval"; }

Status JobSpec::Validate() const {
  if (!ValidJobName(name)) {
    return InvalidArgumentError("job name '" + name + "' must be 1-64 characters of [A-Za-z0-9._-]");
  }
  if (manifest_path.empty()) return InvalidArgumentError("job '" + name + "': manifest path is empty");
  if (batch_size == 0) return InvalidArgumentError("job '" + name + "': batch_size must be at least 1");
  if (batch_size > 65536) return InvalidArgumentError("job '" + name + "': batch_size above 65536");
  if (world_size == 0) return InvalidArgumentError("job '" + name + "': world_size (ranks) must be at least 1");
  if (world_size > 65536) return InvalidArgumentError("job '" + name + "': world_size above 65536");
  if (epochs == 0) return InvalidArgumentError("job '" + name + "': epochs must be at least 1");
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
  return out;
}

void ToWire(const JobSpec& spec, wire::JobSpec::Builder out) {
  out.setName(spec.name);
  out.setManifestPath(spec.manifest_path);
  out.setManifestFingerprint(spec.manifest_fingerprint);
  out.setBatchSize(spec.batch_size);
  out.setWorldSize(spec.world_size);
  out.setEpochs(spec.epochs);
  out.setSeed(spec.seed);
  out.setShuffle(spec.shuffle);
  out.setRemainder(spec.remainder == Remainder::kDrop ? wire::Remainder::DROP : wire::Remainder::PAD);
  out.setBatchesPerUnit(spec.batches_per_unit);
  auto p = out.initPipeline();
  const PipelineSpec& ps = spec.pipeline;
  p.setMode(ps.mode == PipelineMode::kTrain ? wire::PipelineMode::TRAIN : wire::PipelineMode::EVAL);
  p.setOutputHeight(ps.output_height);
  p.setOutputWidth(ps.output_width);
  p.setScaleMin(ps.scale_min);
  p.setScaleMax(ps.scale_max);
  p.setRatioMin(ps.ratio_min);
  p.setRatioMax(ps.ratio_max);
  p.setFlipProbability(ps.flip_probability);
  p.setResizeShorter(ps.resize_shorter);
  p.setAntialias(ps.antialias);
  p.setResizeKernel(ps.resize_kernel == ResizeKernel::kPillow ? wire::ResizeKernel::PILLOW
                                                                : wire::ResizeKernel::OPENCV);
}

StatusOr<JobSpec> FromWire(wire::JobSpec::Reader in) {
  JobSpec spec;
  spec.name = in.getName();
  spec.manifest_path = in.getManifestPath();
  spec.manifest_fingerprint = in.getManifestFingerprint();
  spec.batch_size = in.getBatchSize();
  spec.world_size = in.getWorldSize();
  spec.epochs = in.getEpochs();
  spec.seed = in.getSeed();
  spec.shuffle = in.getShuffle();
  switch (in.getRemainder()) {
    case wire::Remainder::DROP: spec.remainder = Remainder::kDrop; break;
    case wire::Remainder::PAD: spec.remainder = Remainder::kPad; break;
    default: return InvalidArgumentError("job spec: unknown remainder policy");
  }
  spec.batches_per_unit = in.getBatchesPerUnit();
  auto p = in.getPipeline();
  switch (p.getMode()) {
    case wire::PipelineMode::TRAIN: spec.pipeline.mode = PipelineMode::kTrain; break;
    case wire::PipelineMode::EVAL: spec.pipeline.mode = PipelineMode::kEval; break;
    default: return InvalidArgumentError("job spec: unknown pipeline mode");
  }
  spec.pipeline.output_height = p.getOutputHeight();
  spec.pipeline.output_width = p.getOutputWidth();
  spec.pipeline.scale_min = p.getScaleMin();
  spec.pipeline.scale_max = p.getScaleMax();
  spec.pipeline.ratio_min = p.getRatioMin();
  spec.pipeline.ratio_max = p.getRatioMax();
  spec.pipeline.flip_probability = p.getFlipProbability();
  spec.pipeline.resize_shorter = p.getResizeShorter();
  spec.pipeline.antialias = p.getAntialias();
  switch (p.getResizeKernel()) {
    case wire::ResizeKernel::OPENCV: spec.pipeline.resize_kernel = ResizeKernel::kOpenCv; break;
    case wire::ResizeKernel::PILLOW: spec.pipeline.resize_kernel = ResizeKernel::kPillow; break;
    default: return InvalidArgumentError("job spec: unknown resize kernel (a newer client?)");
  }
  STOKER_RETURN_IF_ERROR(spec.Validate());
  return spec;
}

void AddJobSpecFlags(FlagSet& flags, JobSpec* spec) {
  flags.AddString("job", &spec->name, "job name ([A-Za-z0-9._-], at most 64)");
  flags.AddString("manifest", &spec->manifest_path, "dataset manifest written by `stoker index`");
  flags.AddUint32("batch-size", &spec->batch_size, "samples per batch, per rank");
  flags.AddUint32("ranks", &spec->world_size, "number of ranks (world size) of the job");
  flags.AddUint32("epochs", &spec->epochs, "epochs to deliver");
  flags.AddUint("seed", &spec->seed, "seed of the shuffle and of every augmentation");
  flags.AddBool("shuffle", &spec->shuffle, "shuffle samples every epoch");
  flags.AddChoice("remainder", {"drop", "pad"}, RemainderName(spec->remainder),
                  [spec](const std::string& v) {
                    if (v == "drop") spec->remainder = Remainder::kDrop;
                    else if (v == "pad") spec->remainder = Remainder::kPad;
                    else return false;
                    return true;
                  },
                  "what to do with samples that do not fill a last global batch");
  flags.AddUint32("batches-per-unit", &spec->batches_per_unit, "consecutive batches leased together");
  flags.AddChoice("pipeline", {"train", "eval"}, PipelineModeName(spec->pipeline.mode),
                  [spec](const std::string& v) {
                    if (v == "train") spec->pipeline.mode = PipelineMode::kTrain;
                    else if (v == "eval") spec->pipeline.mode = PipelineMode::kEval;
                    else return false;
                    return true;
                  },
                  "train: RandomResizedCrop + flip; eval: resize + center crop");
  flags.AddUint32("image-height", &spec->pipeline.output_height, "output image height");
  flags.AddUint32("image-width", &spec->pipeline.output_width, "output image width");
  flags.AddFloat("scale-min", &spec->pipeline.scale_min, "RandomResizedCrop minimum area fraction");
  flags.AddFloat("scale-max", &spec->pipeline.scale_max, "RandomResizedCrop maximum area fraction");
  flags.AddFloat("ratio-min", &spec->pipeline.ratio_min, "RandomResizedCrop minimum aspect ratio (w/h)");
  flags.AddFloat("ratio-max", &spec->pipeline.ratio_max, "RandomResizedCrop maximum aspect ratio (w/h)");
  flags.AddFloat("flip", &spec->pipeline.flip_probability, "horizontal flip probability (train)");
  flags.AddUint32("resize-shorter", &spec->pipeline.resize_shorter, "eval: shorter side before center crop");
  flags.AddBool("antialias", &spec->pipeline.antialias, "shrink with a filter as wide as the reduction");
  flags.AddChoice("resize-kernel", {"pillow", "opencv"}, ResizeKernelName(spec->pipeline.resize_kernel),
                  [spec](const std::string& v) {
                    if (v == "pillow") spec->pipeline.resize_kernel = ResizeKernel::kPillow;
                    else if (v == "opencv") spec->pipeline.resize_kernel = ResizeKernel::kOpenCv;
                    else return false;
                    return true;
                  },
                  "pillow: Pillow's bilinear resize byte for byte (torchvision on PIL images); opencv: OpenCV area "
                  "interpolation, what jobs before this option got");
}

}  // namespace stoker
