// Crop geometry (crop_geometry.h): torchvision's RandomResizedCrop and Resize + CenterCrop as source rectangles.
#include "worker/crop_geometry.h"

#include <algorithm>
#include <cmath>

#include "base/hash.h"

namespace stoker::worker {
namespace {
// Python's round(): halves go to the even neighbour (std::nearbyint in the default rounding mode does the same).
int RoundHalfEven(double v) { return static_cast<int>(std::nearbyint(v)); }
}  // namespace

CropRect RandomResizedCropRect(int width, int height, double scale_min, double scale_max, double ratio_min,
                               double ratio_max, Rng& rng) {
  const double area = static_cast<double>(width) * height;
  const double log_ratio_min = std::log(ratio_min);
  const double log_ratio_max = std::log(ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    double target_area = area * rng.Uniform(scale_min, scale_max);
    double aspect = std::exp(rng.Uniform(log_ratio_min, log_ratio_max));
    int w = RoundHalfEven(std::sqrt(target_area * aspect));
    int h = RoundHalfEven(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      int top = static_cast<int>(rng.UniformInt(0, height - h));
      int left = static_cast<int>(rng.UniformInt(0, width - w));
      return {left, top, w, h};
    }
  }
  // Fallback: the largest centred crop whose ratio is within range.
  double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < ratio_min) {
    h = RoundHalfEven(w / ratio_min);
  } else if (in_ratio > ratio_max) {
    w = RoundHalfEven(h * ratio_max);
  }
  w = std::clamp(w, 1, width);
  h = std::clamp(h, 1, height);
  return {(width - w) / 2, (height - h) / 2, w, h};
}

CropRect CenterCropRect(int width, int height, uint32_t resize_shorter, uint32_t out_width, uint32_t out_height) {
  // torchvision Resize(int): the shorter side becomes resize_shorter, the longer int(size * long / short).
  double resized_w, resized_h;
  if (width <= height) {
    resized_w = resize_shorter;
    resized_h = std::floor(static_cast<double>(resize_shorter) * height / width);
  } else {
    resized_h = resize_shorter;
    resized_w = std::floor(static_cast<double>(resize_shorter) * width / height);
  }
  double sx = resized_w / width;
  double sy = resized_h / height;
  // CenterCrop: top = int(round((h - out_h) / 2)), left likewise, in resized pixels.
  double left = RoundHalfEven((resized_w - out_width) / 2.0);
  double top = RoundHalfEven((resized_h - out_height) / 2.0);
  CropRect r;
  r.x = std::clamp(static_cast<int>(std::lround(left / sx)), 0, width - 1);
  r.y = std::clamp(static_cast<int>(std::lround(top / sy)), 0, height - 1);
  r.width = std::clamp(static_cast<int>(std::lround(out_width / sx)), 1, width - r.x);
  r.height = std::clamp(static_cast<int>(std::lround(out_height / sy)), 1, height - r.y);
  return r;
}

Augmentation PlanAugmentation(const PipelineSpec& spec, int width, int height, uint64_t sample_seed) {
  Augmentation a;
  if (spec.mode == PipelineMode::kEval) {
    a.crop = CenterCropRect(width, height, spec.resize_shorter, spec.output_width, spec.output_height);
    return a;
  }
  Rng rng(sample_seed);
  a.crop = RandomResizedCropRect(width, height, spec.scale_min, spec.scale_max, spec.ratio_min, spec.ratio_max, rng);
  a.flip = rng.NextDouble() < spec.flip_probability;
  return a;
}

uint64_t SampleSeed(uint64_t job_seed, uint32_t epoch, uint64_t sample_id) {
  return DeriveSeed(job_seed, 0x61756dULL /* "aug" */, epoch, sample_id);
}

}  // namespace stoker::worker
