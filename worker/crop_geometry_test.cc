// Crop geometry against a transcription of torchvision's get_params (bounds, fallback), the centre crop mapped
// back to the source, and augmentation as a function of the sample's seed.
#include "worker/crop_geometry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace stoker::worker {
namespace {

// An independent transcription of torchvision.transforms.RandomResizedCrop.get_params (torchvision 0.26), taking
// its random draws from a list so both implementations see the same numbers.
struct Draws {
  std::vector<double> uniforms;  // in [0,1): area then log-ratio per try
  size_t next = 0;
  double U() { return uniforms.at(next++); }
};

CropRect TorchvisionReference(int width, int height, double s0, double s1, double r0, double r1, Rng& rng) {
  double area = double(height) * width;
  double lr0 = std::log(r0), lr1 = std::log(r1);
  for (int i = 0; i < 10; ++i) {
    double target_area = area * (s0 + (s1 - s0) * rng.NextDouble());
    double aspect_ratio = std::exp(lr0 + (lr1 - lr0) * rng.NextDouble());
    int w = int(std::nearbyint(std::sqrt(target_area * aspect_ratio)));
    int h = int(std::nearbyint(std::sqrt(target_area / aspect_ratio)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      int top = int(rng.UniformInt(0, height - h));
      int left = int(rng.UniformInt(0, width - w));
      return {left, top, w, h};
    }
  }
  double in_ratio = double(width) / height;
  int w, h;
  if (in_ratio < r0) {
    w = width;
    h = int(std::nearbyint(w / r0));
  } else if (in_ratio > r1) {
    h = height;
    w = int(std::nearbyint(h * r1));
  } else {
    w = width;
    h = height;
  }
  return {(width - w) / 2, (height - h) / 2, w, h};
}

TEST(RandomResizedCrop, MatchesTheTorchvisionAlgorithm) {
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    int width = 50 + int(seed * 37 % 900), height = 40 + int(seed * 91 % 700);
    Rng a(seed), b(seed);
    CropRect ours = RandomResizedCropRect(width, height, 0.08, 1.0, 3.0 / 4, 4.0 / 3, a);
    CropRect ref = TorchvisionReference(width, height, 0.08, 1.0, 3.0 / 4, 4.0 / 3, b);
    ASSERT_EQ(ours, ref) << "seed " << seed << " image " << width << "x" << height;
  }
}

TEST(RandomResizedCrop, StaysInsideWithAreaAndRatioInRange) {
  int fallbacks = 0;
  for (uint64_t seed = 0; seed < 5000; ++seed) {
    Rng rng(seed);
    CropRect r = RandomResizedCropRect(500, 375, 0.08, 1.0, 0.75, 4.0 / 3, rng);
    ASSERT_GE(r.x, 0);
    ASSERT_GE(r.y, 0);
    ASSERT_LE(r.x + r.width, 500);
    ASSERT_LE(r.y + r.height, 375);
    double area = double(r.width) * r.height / (500.0 * 375);
    double ratio = double(r.width) / r.height;
    if (r.width == 500 && r.height == 375) {
      ++fallbacks;
      continue;
    }
    // Rounding to whole pixels moves area and ratio slightly past the bounds for small crops.
    EXPECT_GE(area, 0.08 * 0.97) << seed;
    EXPECT_LE(area, 1.0 + 1e-9);
    EXPECT_GE(ratio, 0.75 * 0.97) << seed;
    EXPECT_LE(ratio, 4.0 / 3 * 1.03) << seed;
  }
  EXPECT_LT(fallbacks, 50);  // the fallback is rare for a 4:3 image
}

TEST(RandomResizedCrop, FallbackClampsExtremeAspectRatios) {
  // A 1000x10 strip: no try fits, so the fallback takes the full height and width = round(10 * 4/3) = 13.
  Rng rng(1);
  CropRect r = RandomResizedCropRect(1000, 10, 0.9, 1.0, 0.75, 4.0 / 3, rng);
  EXPECT_EQ(r, (CropRect{493, 0, 13, 10}));
  Rng rng2(1);
  CropRect tall = RandomResizedCropRect(10, 1000, 0.9, 1.0, 0.75, 4.0 / 3, rng2);
  EXPECT_EQ(tall, (CropRect{0, 493, 10, 13}));
}

TEST(CenterCrop, MapsResizeThenCenterCropBackToTheSource) {
  // 500x375 -> Resize(256) gives 341x256; CenterCrop(224) keeps left 58 (round(58.5) is 58), top 16.
  CropRect r = CenterCropRect(500, 375, 256, 224, 224);
  EXPECT_EQ(r, (CropRect{85, 23, 328, 328}));
  CropRect portrait = CenterCropRect(375, 500, 256, 224, 224);
  EXPECT_EQ(portrait, (CropRect{23, 85, 328, 328}));
  CropRect exact = CenterCropRect(256, 256, 256, 224, 224);
  EXPECT_EQ(exact, (CropRect{16, 16, 224, 224}));
}

TEST(PlanAugmentation, IsAFunctionOfTheSampleSeed) {
  PipelineSpec spec;
  Augmentation a = PlanAugmentation(spec, 500, 375, SampleSeed(7, 1, 42));
  Augmentation b = PlanAugmentation(spec, 500, 375, SampleSeed(7, 1, 42));
  EXPECT_EQ(a.crop, b.crop);
  EXPECT_EQ(a.flip, b.flip);
  int differ = 0, flips = 0;
  for (uint64_t id = 0; id < 1000; ++id) {
    Augmentation x = PlanAugmentation(spec, 500, 375, SampleSeed(7, 1, id));
    Augmentation y = PlanAugmentation(spec, 500, 375, SampleSeed(7, 2, id));
    differ += !(x.crop == y.crop);
    flips += x.flip;
  }
  EXPECT_GT(differ, 990);
  EXPECT_NEAR(flips, 500, 80);
  spec.mode = PipelineMode::kEval;
  EXPECT_FALSE(PlanAugmentation(spec, 500, 375, 1).flip);
}

}  // namespace
}  // namespace stoker::worker
