// JobSpec <-> wire::JobSpec (schema/job.capnp): the job spec as the control plane and the journal carry it.
#include "wire/job_spec_wire.h"

namespace stoker {

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

}  // namespace stoker
