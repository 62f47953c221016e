// JobSpec: what a training job asks of stoker (dataset, pipeline, batch size, ranks, epochs, seed, remainder
// policy), as a plain C++ value. It validates itself with messages that name the field, describes how two specs
// differ (a registration that disagrees with the job it joins is refused with that description) and has a
// fingerprint (what checkpoint tokens carry). wire/job_spec_wire.h converts it to and from schema/job.capnp.
//
// Thread safety: a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/status.h"

namespace stoker {

enum class Remainder { kDrop, kPad };
enum class PipelineMode { kTrain, kEval };
// How a crop becomes the output image. kPillow is Pillow's bilinear resize exactly (what torchvision runs on PIL
// images; worker/resample.h) and the faster; kOpenCv is what stoker did before it (OpenCV area interpolation when
// shrinking), kept so that jobs started then keep their bytes (a spec without the field reads as kOpenCv).
enum class ResizeKernel { kOpenCv, kPillow };
// Where a job's JPEGs are decoded (docs/design.md "Decoding on the GPU"). kOff: by the workers, as pixels. kFile:
// by the client's GPU, each JPEG sent as its file (no work on the worker beyond reading it and planning the crop)
// where the GPU can take it as it is, else cut; kCut: by the client's GPU, each JPEG cut losslessly to what its
// resize reads (fewer bytes on the wire; the cut costs a worker about what decoding does). What cannot go as a
// JPEG goes as pixels made the CPU way.
enum class GpuDecode { kOff, kFile, kCut };

struct PipelineSpec {
  PipelineMode mode = PipelineMode::kTrain;
  uint32_t output_height = 224;
  uint32_t output_width = 224;
  float scale_min = 0.08f;
  float scale_max = 1.0f;
  float ratio_min = 3.0f / 4.0f;
  float ratio_max = 4.0f / 3.0f;
  float flip_probability = 0.5f;
  uint32_t resize_shorter = 256;
  bool antialias = true;
  ResizeKernel resize_kernel = ResizeKernel::kPillow;
  // Whether the client decodes, resizes, flips and normalises on its GPU what workers send as JPEGs. Needs the
  // Pillow kernel.
  GpuDecode gpu_decode = GpuDecode::kOff;

  bool operator==(const PipelineSpec&) const = default;
  bool DecodesOnGpu() const { return gpu_decode != GpuDecode::kOff; }
};

// Limits Validate() enforces on what a peer may ask for. A job name is 1-64 characters of [A-Za-z0-9._-]: names
// key the coordinator's and workers' tables, logs and metrics labels. Epochs are capped so a plan (and the state a
// job can grow: quarantine reports, attempts) stays bounded.
constexpr size_t kMaxJobNameBytes = 64;
constexpr uint32_t kMaxEpochs = 100000;
bool IsValidJobName(std::string_view name);

struct JobSpec {
  std::string name;
  std::string manifest_path;
  uint64_t manifest_fingerprint = 0;  // 0: filled in by the coordinator from the manifest file
  PipelineSpec pipeline;
  uint32_t batch_size = 256;
  uint32_t world_size = 1;
  uint32_t epochs = 1;  // 1..kMaxEpochs
  uint64_t seed = 0;
  bool shuffle = true;
  Remainder remainder = Remainder::kDrop;
  uint32_t batches_per_unit = 1;
  // Where the plan starts, set by the coordinator (like manifest_fingerprint) when a checkpoint resumes the job on
  // another shape: epoch origin_epoch deals only its positions from origin_offset on (dataset/plan.h). 0, 0: the
  // beginning. Not compared by Differences; in the fingerprint only when set.
  uint32_t origin_epoch = 0;
  uint64_t origin_offset = 0;

  bool operator==(const JobSpec&) const = default;

  // Checks every field on its own (not against a manifest): InvalidArgument naming the field.
  Status Validate() const;

  // One line per differing field, "batch_size: 32 here, 64 registered". Empty when equal. A zero fingerprint on
  // either side matches any fingerprint; the origin is not compared.
  std::vector<std::string> Differences(const JobSpec& registered) const;
  // Whether a field is one of the job's shape (world_size, batch_size, batches_per_unit): what a checkpoint may
  // resume on with other values.
  static bool IsShapeField(std::string_view difference);

  uint64_t SampleBytes() const { return uint64_t{pipeline.output_height} * pipeline.output_width * 3; }
  uint64_t BatchBytes() const { return SampleBytes() * batch_size; }
};

// XXH64 over every field of the spec, the manifest fingerprint included, in a fixed order: what a checkpoint
// token names, so that resuming against another spec or dataset is refused.
uint64_t SpecFingerprint(const JobSpec& spec);
// XXH64 of the pipeline's fields alone: what a checkpoint token carries to refuse another augmentation.
uint64_t PipelineFingerprint(const PipelineSpec& pipeline);

const char* RemainderName(Remainder r);
const char* ResizeKernelName(ResizeKernel k);
const char* GpuDecodeName(GpuDecode g);  // off, file, cut
const char* PipelineModeName(PipelineMode m);

}  // namespace stoker
