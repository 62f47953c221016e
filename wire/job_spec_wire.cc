// JobSpec <-> wire::JobSpec (schema/job.capnp): the job spec as the control plane and the journal carry it, a field
// list each for the spec and its pipeline (wire/fields.h).
#include "wire/job_spec_wire.h"

#include <tuple>
#include <utility>

#include "wire/fields.h"

namespace stoker {
namespace {

constexpr auto kRemainders = fields::MakeEnumMap("job spec: unknown remainder policy",
                                                 std::pair{Remainder::kDrop, wire::Remainder::DROP},
                                                 std::pair{Remainder::kPad, wire::Remainder::PAD});
constexpr auto kGpuDecodes = fields::MakeEnumMap("job spec: unknown GPU decode (a newer client?)",
                                                 std::pair{GpuDecode::kOff, wire::GpuDecode::OFF},
                                                 std::pair{GpuDecode::kFile, wire::GpuDecode::FILE},
                                                 std::pair{GpuDecode::kCut, wire::GpuDecode::CUT});

constexpr auto kPipelineModes = fields::MakeEnumMap("job spec: unknown pipeline mode",
                                                    std::pair{PipelineMode::kTrain, wire::PipelineMode::TRAIN},
                                                    std::pair{PipelineMode::kEval, wire::PipelineMode::EVAL});
constexpr auto kResizeKernels = fields::MakeEnumMap("job spec: unknown resize kernel (a newer client?)",
                                                    std::pair{ResizeKernel::kOpenCv, wire::ResizeKernel::OPENCV},
                                                    std::pair{ResizeKernel::kPillow, wire::ResizeKernel::PILLOW});

constexpr auto kPipeline = fields::List<PipelineSpec>(
    fields::Mapped(kPipelineModes, STOKER_FIELD(mode, Mode)), STOKER_FIELD(output_height, OutputHeight),
    STOKER_FIELD(output_width, OutputWidth), STOKER_FIELD(scale_min, ScaleMin), STOKER_FIELD(scale_max, ScaleMax),
    STOKER_FIELD(ratio_min, RatioMin), STOKER_FIELD(ratio_max, RatioMax),
    STOKER_FIELD(flip_probability, FlipProbability), STOKER_FIELD(resize_shorter, ResizeShorter),
    STOKER_FIELD(antialias, Antialias), fields::Mapped(kResizeKernels, STOKER_FIELD(resize_kernel, ResizeKernel)),
    fields::Mapped(kGpuDecodes, STOKER_FIELD(gpu_decode, GpuDecode)));

constexpr auto kJobSpec = fields::List<JobSpec>(
    STOKER_FIELD(name, Name), STOKER_FIELD(manifest_path, ManifestPath),
    STOKER_FIELD(manifest_fingerprint, ManifestFingerprint), STOKER_FIELD(batch_size, BatchSize),
    STOKER_FIELD(world_size, WorldSize), STOKER_FIELD(epochs, Epochs), STOKER_FIELD(seed, Seed),
    STOKER_FIELD(shuffle, Shuffle), fields::Mapped(kRemainders, STOKER_FIELD(remainder, Remainder)),
    STOKER_FIELD(batches_per_unit, BatchesPerUnit), STOKER_FIELD(origin_epoch, OriginEpoch),
    STOKER_FIELD(origin_offset, OriginOffset), fields::Nested(kPipeline, STOKER_FIELD(pipeline, Pipeline)));

}  // namespace

void ToWire(const JobSpec& spec, wire::JobSpec::Builder out) { fields::Encode(kJobSpec, spec, out); }

StatusOr<JobSpec> FromWire(wire::JobSpec::Reader in) {
  JobSpec spec;
  STOKER_RETURN_IF_ERROR(fields::Decode(kJobSpec, in, &spec));
  STOKER_RETURN_IF_ERROR(spec.Validate());
  return spec;
}

}  // namespace stoker
