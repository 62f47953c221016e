// The job spec's flags (dataset/job_spec_flags.h).
#include "dataset/job_spec_flags.h"

namespace stoker {

void AddJobSpecFlags(FlagSet& flags, JobSpec* spec) {
  flags.AddString("job", &spec->name, "job name ([A-Za-z0-9._-], at most 64)");
  flags.AddString("manifest", &spec->manifest_path, "dataset manifest written by `stoker index`");
  flags.AddUint32("batch-size", &spec->batch_size, "samples per batch, per rank");
  flags.AddUint32("ranks", &spec->world_size, "number of ranks (world size) of the job");
  flags.AddUint32("epochs", &spec->epochs, "epochs to deliver");
  flags.AddUint("seed", &spec->seed, "seed of the shuffle and of every augmentation");
  flags.AddBool("shuffle", &spec->shuffle, "shuffle samples every epoch");
  flags.AddEnum("remainder", &spec->remainder, {{"drop", Remainder::kDrop}, {"pad", Remainder::kPad}},
                "what to do with samples that do not fill a last global batch");
  flags.AddUint32("batches-per-unit", &spec->batches_per_unit, "consecutive batches leased together");
  flags.AddEnum("pipeline", &spec->pipeline.mode, {{"train", PipelineMode::kTrain}, {"eval", PipelineMode::kEval}},
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
  flags.AddEnum("resize-kernel", &spec->pipeline.resize_kernel,
                {{"pillow", ResizeKernel::kPillow}, {"opencv", ResizeKernel::kOpenCv}},
                "pillow: Pillow's bilinear resize byte for byte (torchvision on PIL images); opencv: OpenCV area "
                  "interpolation, what jobs before this option got");
  flags.AddEnum("gpu-decode", &spec->pipeline.gpu_decode,
                {{"off", GpuDecode::kOff}, {"file", GpuDecode::kFile}, {"cut", GpuDecode::kCut}},
                "off: workers decode; file: workers send each JPEG as its file (cut where the GPU cannot take it), "
                "the client decodes and resizes on its GPU; cut: workers cut each JPEG losslessly to its crop first "
                "(fewer bytes on the wire, a decode's worth of worker CPU)");
}

}  // namespace stoker
