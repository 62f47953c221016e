// The resampler: Pillow's own bytes for a downscale, an upscale, a crop and a centre crop of a resize (computed by
// Pillow 9.4, Image.resize(size, BILINEAR), on the image below); the scalar and AVX2 code byte for byte equal on
// random images, crops, flips and reductions; flipping equals mirroring.
#include "worker/resample.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace stoker::worker {
namespace {

constexpr int kWidth = 9, kHeight = 7;

// Pillow: bytes(((x*37 + y*91 + c*53) * 7 + x*y) % 256 for y in range(7) for x in range(9) for c in range(3))
std::vector<uint8_t> TestImage() {
  std::vector<uint8_t> px;
  for (int y = 0; y < kHeight; ++y)
    for (int x = 0; x < kWidth; ++x)
      for (int c = 0; c < 3; ++c) px.push_back(static_cast<uint8_t>(((x * 37 + y * 91 + c * 53) * 7 + x * y) % 256));
  return px;
}

// Resizes source box [x0, x1) x [y0, y1) of the test image to out_w x out_h, keeping outputs from (first_x,
// first_y), count_x x count_y of them; taps clipped to the box.
std::vector<uint8_t> ResizeTestImage(Resampler& r, int x0, int y0, int x1, int y1, int out_w, int out_h, int first_x,
                         int first_y, int count_x, int count_y, bool flip = false) {
  std::vector<uint8_t> image = TestImage();
  ResampleAxis ax = BuildResampleAxis(x0, x1, out_w, first_x, count_x, x0, x1, true);
  ResampleAxis ay = BuildResampleAxis(y0, y1, out_h, first_y, count_y, y0, y1, true);
  std::vector<uint8_t> out(static_cast<size_t>(count_x) * count_y * 3);
  r.Resize(image.data(), kWidth * 3, 0, 0, ax, ay, flip, out.data());
  return out;
}

class ResampleTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!GetParam() && !Resampler::CpuHasAvx2()) GTEST_SKIP() << "this CPU has no AVX2";
    resampler_.ForceScalar(GetParam());
  }
  Resampler resampler_;
};

TEST_P(ResampleTest, DownscaleIsPillowsBytes) {
  // im.resize((4, 3), Image.BILINEAR)
  std::vector<uint8_t> pillow = {99, 170, 175, 67,  152, 183, 72,  80,  188, 80,  86,  157, 160, 179, 158, 85,  158, 170,
                                 90, 72,  159, 102, 81,  88,  163, 161, 166, 73,  151, 181, 81,  89,  114, 98,  103, 72};
  EXPECT_EQ(ResizeTestImage(resampler_, 0, 0, kWidth, kHeight, 4, 3, 0, 0, 4, 3), pillow);
}

TEST_P(ResampleTest, CropThenDownscaleIsPillowsBytes) {
  // im.crop((2, 1, 8, 6)).resize((4, 3), Image.BILINEAR): torchvision's resized_crop on a PIL image
  std::vector<uint8_t> pillow = {80, 195, 163, 86,  103, 169, 92,  61,  176, 98,  67,  114, 76, 191, 164, 85, 105, 173,
                                 93, 66,  162, 102, 75,  97,  78,  193, 161, 88,  106, 171, 99, 68,  146, 109, 78, 83};
  EXPECT_EQ(ResizeTestImage(resampler_, 2, 1, 8, 6, 4, 3, 0, 0, 4, 3), pillow);
}

TEST_P(ResampleTest, CropThenUpscaleIsPillowsBytes) {
  // im.crop((1, 1, 4, 3)).resize((5, 4), Image.BILINEAR)
  std::vector<uint8_t> pillow = {129, 244, 103, 131, 246, 105, 133, 248, 107, 135, 250, 109, 137, 252, 111,
                                 161, 212, 135, 137, 214, 137, 101, 216, 139, 103, 218, 141, 105, 220, 143,
                                 224, 147, 198, 149, 149, 200, 36,  151, 202, 39,  154, 205, 41,  156, 207,
                                 255, 114, 229, 155, 116, 231, 4,   119, 234, 7,   122, 237, 9,   124, 239};
  EXPECT_EQ(ResizeTestImage(resampler_, 1, 1, 4, 3, 5, 4, 0, 0, 5, 4), pillow);
}

TEST_P(ResampleTest, OnlyTheCentreOfAResizeIsPillowsCentre) {
  // im.resize((6, 5), Image.BILINEAR).crop((1, 1, 5, 4)): Resize + CenterCrop, computing only what is kept
  std::vector<uint8_t> pillow = {108, 175, 177, 67, 144, 183, 74, 75,  190, 81, 82, 150, 114, 198, 150, 92, 153, 159,
                                 101, 53,  163, 110, 62, 120, 104, 171, 173, 68, 145, 184, 79, 80, 179, 90, 91, 80};
  EXPECT_EQ(ResizeTestImage(resampler_, 0, 0, kWidth, kHeight, 6, 5, 1, 1, 4, 3), pillow);
}

TEST_P(ResampleTest, TheSameSizeIsACopyAndAFlipIsAMirror) {
  std::vector<uint8_t> image = TestImage();
  EXPECT_EQ(ResizeTestImage(resampler_, 0, 0, kWidth, kHeight, kWidth, kHeight, 0, 0, kWidth, kHeight), image);
  std::vector<uint8_t> plain = ResizeTestImage(resampler_, 2, 1, 8, 6, 4, 3, 0, 0, 4, 3);
  std::vector<uint8_t> flipped = ResizeTestImage(resampler_, 2, 1, 8, 6, 4, 3, 0, 0, 4, 3, /*flip=*/true);
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 4; ++x)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(flipped[(y * 4 + x) * 3 + c], plain[(y * 4 + 3 - x) * 3 + c]);
}

INSTANTIATE_TEST_SUITE_P(ScalarAndAvx2, ResampleTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Scalar" : "Avx2"; });

TEST(Resample, ScalarAndAvx2GiveTheSameBytesOnRandomCrops) {
  if (!Resampler::CpuHasAvx2()) GTEST_SKIP() << "this CPU has no AVX2";
  std::mt19937 rng(12345);
  Resampler scalar, simd;
  scalar.ForceScalar(true);
  for (int round = 0; round < 300; ++round) {
    const int width = std::uniform_int_distribution<int>(1, 700)(rng);
    const int height = std::uniform_int_distribution<int>(1, 500)(rng);
    // A region as the decoder hands it: exactly the pixels asked for, in a buffer with nothing after its last row.
    std::vector<uint8_t> image(static_cast<size_t>(width) * height * 3);
    for (auto& v : image) v = static_cast<uint8_t>(rng());
    const int out_w = std::uniform_int_distribution<int>(1, 300)(rng);
    const int out_h = std::uniform_int_distribution<int>(1, 300)(rng);
    // A fractional span (a DCT-reduced crop) inside the image, taps clipped to its enclosing pixels.
    auto span = [&](int size, double* begin, double* end) {
      *begin = std::uniform_real_distribution<double>(0, size - 0.5)(rng);
      *end = std::uniform_real_distribution<double>(*begin + 0.25, size)(rng);
    };
    double bx, ex, by, ey;
    span(width, &bx, &ex);
    span(height, &by, &ey);
    const bool antialias = rng() % 4 != 0;
    ResampleAxis ax = BuildResampleAxis(bx, ex, out_w, 0, out_w, static_cast<int>(std::floor(bx)),
                                        std::min(width, static_cast<int>(std::ceil(ex))), antialias);
    ResampleAxis ay = BuildResampleAxis(by, ey, out_h, 0, out_h, static_cast<int>(std::floor(by)),
                                        std::min(height, static_cast<int>(std::ceil(ey))), antialias);
    ASSERT_GE(ax.lowest, 0);
    ASSERT_LE(ax.highest, width);
    ASSERT_GE(ay.lowest, 0);
    ASSERT_LE(ay.highest, height);
    // Hand over only the rows and columns the axes read, the rest of the buffer cut off, as the decoder does.
    const size_t stride = static_cast<size_t>(width) * 3;
    std::vector<uint8_t> region(image.begin() + ay.lowest * stride, image.begin() + ay.highest * stride);
    const uint8_t* src = region.data() + static_cast<size_t>(ax.lowest) * 3;
    const bool flip = rng() % 2;
    std::vector<uint8_t> a(static_cast<size_t>(out_w) * out_h * 3), b(a.size());
    scalar.Resize(src, stride, ax.lowest, ay.lowest, ax, ay, flip, a.data());
    simd.Resize(src, stride, ax.lowest, ay.lowest, ax, ay, flip, b.data());
    ASSERT_EQ(a, b) << "round " << round << ": " << width << "x" << height << " -> " << out_w << "x" << out_h;
  }
}

TEST(Resample, EveryOutputReadsInsideItsClipWindow) {
  for (int out = 1; out < 40; ++out) {
    for (double begin : {0.0, 0.3, 2.0, 7.75}) {
      const double end = begin + 0.5 + out * 0.37;
      const int lo = static_cast<int>(std::floor(begin)), hi = static_cast<int>(std::ceil(end));
      for (bool antialias : {true, false}) {
        ResampleAxis a = BuildResampleAxis(begin, end, out, 0, out, lo, hi, antialias);
        for (int i = 0; i < a.size(); ++i) {
          ASSERT_GE(a.count[i], 1);
          ASSERT_LE(a.count[i], a.max_taps);
          ASSERT_GE(a.first[i], lo);
          ASSERT_LE(a.first[i] + a.count[i], hi);
          int64_t total = 0;
          for (int k = 0; k < a.count[i]; ++k) total += a.weights[static_cast<size_t>(i) * a.max_taps + k];
          EXPECT_NEAR(static_cast<double>(total), double(1 << 22), 8.0);
        }
      }
    }
  }
}

}  // namespace
}  // namespace stoker::worker
