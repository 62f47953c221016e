// Where each output image comes from: the crop rectangle in source pixels and the flip, decided before any pixel
// is decoded so the decoder can decode only that rectangle.
//
// RandomResizedCrop follows torchvision's get_params exactly (10 tries of area ~ U(scale) * H * W and
// log-uniform ratio, rounding half to even like Python's round, then the centre-crop fallback), drawing from an
// Rng seeded per (job seed, epoch, sample id): the same sample in the same epoch gets the same crop on any
// worker. Eval maps Resize(shorter side) + CenterCrop back to the source rectangle it covers.
#pragma once

#include <cstdint>

#include "stoker/job_spec.h"
#include "base/rng.h"

namespace stoker::worker {

struct CropRect {
  int x = 0;       // left column in source pixels
  int y = 0;       // top row
  int width = 0;
  int height = 0;
  bool operator==(const CropRect&) const = default;
};

struct Augmentation {
  CropRect crop;
  bool flip = false;
};

// torchvision.transforms.RandomResizedCrop.get_params for an image of width x height. Requires both > 0.
CropRect RandomResizedCropRect(int width, int height, double scale_min, double scale_max, double ratio_min,
                               double ratio_max, Rng& rng);

// The source rectangle that Resize(resize_shorter) followed by CenterCrop(out_h, out_w) keeps.
CropRect CenterCropRect(int width, int height, uint32_t resize_shorter, uint32_t out_width, uint32_t out_height);

// The augmentation of one sample: train draws crop then flip from Rng(sample_seed); eval is deterministic.
Augmentation PlanAugmentation(const PipelineSpec& spec, int width, int height, uint64_t sample_seed);

// The seed of one sample's randomness.
uint64_t SampleSeed(uint64_t job_seed, uint32_t epoch, uint64_t sample_id);

}  // namespace stoker::worker
