// ImagePipeline: one sample from encoded bytes to its final uint8 RGB pixels in the batch buffer.
//
//   JPEG: header -> crop geometry -> decode of the region the resize reads (DCT-reduced when the crop is at
//         least twice the output) -> resize with the flip folded in, straight into the batch slot
//   other formats (PNG, ...): OpenCV imdecode -> the same resize -> BGR to RGB
//
// A gpu_decode job's JPEG instead leaves as its file, or cut losslessly to the region the resize reads
// (worker/jpeg_cutter.h), with the box the client resizes; what can go neither way is made as above (RunCut).
//
// The resize kernel is the job's (PipelineSpec::resize_kernel): Pillow's bilinear resize, byte for byte
// (worker/resample.h), or OpenCV's area interpolation followed by a flip pass, what jobs before the option got.
// Eval with the Pillow kernel computes only the centre crop's pixels of Resize(shorter side) over the whole image,
// which is what torchvision's Resize + CenterCrop computes. There is no per-sample tensor.
// A sample that cannot be decoded leaves zeros in its slot and reports why, for quarantine.
//
// Thread safety: none; one pipeline per worker thread (it owns a decoder and scratch buffers).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "stoker/job_spec.h"
#include "worker/crop_geometry.h"
#include "worker/jpeg_cutter.h"
#include "worker/jpeg_decoder.h"
#include "worker/resample.h"

namespace stoker::worker {

struct SampleOutcome {
  bool ok = true;
  std::string reason;  // quarantine vocabulary: decode_error, decode_limit, unsupported_format, ...
  std::string detail;  // the decoder's own words
};

// How a gpu_decode job's sample leaves (schema/data.capnp EncodedCrop).
struct CutSample {
  bool encoded = false;  // `out` holds a JPEG of `bytes`; else the output's pixels (zeros when not ok)
  size_t bytes = 0;
  bool whole = false;    // the JPEG is the file as it is (else a cut)
  bool flip = false;
  int x = 0;  // train: the crop in the cut's pixels; eval: the whole image in them
  int y = 0;
  int width = 0;
  int height = 0;
  std::string fallback;  // why a JPEG went as pixels (the cutter's words); empty otherwise
};

// Seconds spent per stage, accumulated by the pipeline (the worker's per-stage metrics read them).
struct StageSeconds {
  double decode = 0;
  double augment = 0;
};

class ImagePipeline {
 public:
  explicit ImagePipeline(const PipelineSpec& spec, const JpegLimits& limits = {});

  // Writes output_height x output_width x 3 bytes to `out`. `sample_seed` seeds the crop and flip.
  SampleOutcome Run(std::span<const uint8_t> encoded, uint64_t sample_seed, uint8_t* out);
  // A gpu_decode job's sample: the JPEG as its file or cut to what the resize reads (the job's GpuDecode), at most
  // output_bytes() of it, into `out`; else what Run writes. `cut` says which, and the box.
  SampleOutcome RunCut(std::span<const uint8_t> encoded, uint64_t sample_seed, uint8_t* out, CutSample* cut);

  const StageSeconds& stage_seconds() const { return stage_seconds_; }
  // The DCT reduction (1, 2, 4 or 8) the last JPEG was decoded at: 1 means its output is Pillow's exactly.
  int last_reduction() const { return last_reduction_; }
  size_t output_bytes() const { return out_bytes_; }

  // True when this build can decode non-JPEG formats (OpenCV imgcodecs).
  static bool SupportsNonJpeg();

 private:
  SampleOutcome RunJpeg(std::span<const uint8_t> encoded, uint64_t sample_seed, uint8_t* out);
  SampleOutcome RunOther(std::span<const uint8_t> encoded, uint64_t sample_seed, uint8_t* out);
  // The two axes of a Pillow-kernel resize of a width x height image reduced to 1/d (see image_pipeline.cc).
  void PlanAxes(int width, int height, const Augmentation& aug, int d, ResampleAxis* ax, ResampleAxis* ay) const;
  // Resizes `src` (RGB or BGR rows) into out; swaps channels when bgr; flips when asked.
  void ResizeInto(const uint8_t* src, size_t stride, int width, int height, bool bgr, bool flip, uint8_t* out);

  PipelineSpec spec_;
  size_t out_bytes_;
  JpegRegionDecoder jpeg_;
  JpegCutter cutter_;
  Resampler resampler_;
  StageSeconds stage_seconds_;
  int last_reduction_ = 1;
};

// The Pillow kernel's two axes for `box` in a source of src_width x src_height pixels decoded at 1/d: train resizes
// the box (the crop) to the output; eval resizes it (the whole image) to Resize(resize_shorter)'s size and keeps
// the centre. What the worker resizes with, and what a client resizes a cut JPEG (CutSample's box) with, d = 1.
void PlanResizeAxes(const PipelineSpec& spec, const CropRect& box, int d, int src_width, int src_height,
                    ResampleAxis* ax, ResampleAxis* ay);

// Mirrors an RGB image left-right in place.
void FlipHorizontalInPlace(uint8_t* pixels, int width, int height);

}  // namespace stoker::worker
