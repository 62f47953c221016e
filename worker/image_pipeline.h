// ImagePipeline: one sample from encoded bytes to its final uint8 RGB pixels in the batch buffer.
//
//   JPEG: header -> crop geometry -> crop-region (and DCT-reduced) decode -> resize into the batch slot -> flip
//   other formats (PNG, ...): OpenCV imdecode -> crop -> resize into the batch slot -> BGR to RGB -> flip
//
// The resize writes straight into the caller's output (the batch buffer); there is no per-sample tensor.
// A sample that cannot be decoded leaves zeros in its slot and reports why, for quarantine.
//
// Thread safety: none; one pipeline per worker thread (it owns a decoder and scratch buffers).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "worker/crop_geometry.h"
#include "worker/jpeg_decoder.h"

namespace stoker {

struct SampleOutcome {
  bool ok = true;
  std::string reason;  // quarantine vocabulary: decode_error, decode_limit, unsupported_format, ...
  std::string detail;  // the decoder's own words
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

  const StageSeconds& stage_seconds() const { return stage_seconds_; }
  size_t output_bytes() const { return out_bytes_; }

  // True when this build can decode non-JPEG formats (OpenCV imgcodecs).
  static bool SupportsNonJpeg();

 private:
  SampleOutcome RunJpeg(std::span<const uint8_t> encoded, uint64_t sample_seed, uint8_t* out);
  SampleOutcome RunOther(std::span<const uint8_t> encoded, uint64_t sample_seed, uint8_t* out);
  // Resizes `src` (RGB or BGR rows) into out; swaps channels when bgr; flips when asked.
  void ResizeInto(const uint8_t* src, size_t stride, int width, int height, bool bgr, bool flip, uint8_t* out);

  PipelineSpec spec_;
  size_t out_bytes_;
  JpegRegionDecoder jpeg_;
  StageSeconds stage_seconds_;
};

// Mirrors an RGB image left-right in place.
void FlipHorizontalInPlace(uint8_t* pixels, int width, int height);

}  // namespace stoker
