// The host conversion — the host path's output and the reference the CUDA kernel is held to — against float64
// arithmetic, and the float16/bfloat16 rounding against values worked out by hand.
#include "client/src/convert_host.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

namespace stoker::client {
namespace {

std::vector<uint8_t> RandomPixels(uint32_t n, uint32_t h, uint32_t w, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> pixels(size_t{n} * h * w * 3);
  for (uint8_t& p : pixels) p = static_cast<uint8_t>(rng());
  return pixels;
}

TEST(ConvertOnHost, Float32IsThePixelMinusMeanOverStdInEveryLayout) {
  const uint32_t n = 3, h = 5, w = 7;  // h*w odd: no vector-width assumptions
  const auto in = RandomPixels(n, h, w, 1);
  for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
    OutputFormat f;
    f.layout = layout;
    std::vector<float> out(in.size(), std::nanf(""));
    ConvertOnHost(in.data(), n, h, w, f, out.data());
    for (uint32_t b = 0; b < n; ++b) {
      for (uint32_t p = 0; p < h * w; ++p) {
        for (uint32_t c = 0; c < 3; ++c) {
          const double expected = (in[(b * h * w + p) * 3 + c] - double{f.mean[c]}) / f.std[c];
          const size_t at = layout == Layout::kNCHW ? (b * 3 + c) * h * w + p : (b * h * w + p) * 3 + c;
          ASSERT_NEAR(out[at], expected, 4e-7 * std::max(1.0, std::abs(expected))) << b << " " << p << " " << c;
        }
      }
    }
  }
}

TEST(ConvertOnHost, Uint8KeepsThePixelsAndOnlyMovesThemForNchw) {
  const uint32_t n = 2, h = 3, w = 4;
  const auto in = RandomPixels(n, h, w, 2);
  OutputFormat f;
  f.dtype = DType::kUInt8;
  f.layout = Layout::kNHWC;
  EXPECT_TRUE(f.IsIdentity());
  std::vector<uint8_t> out(in.size());
  ConvertOnHost(in.data(), n, h, w, f, out.data());
  EXPECT_EQ(out, in);
  f.layout = Layout::kNCHW;
  ConvertOnHost(in.data(), n, h, w, f, out.data());
  for (uint32_t b = 0; b < n; ++b) {
    for (uint32_t p = 0; p < h * w; ++p) {
      for (uint32_t c = 0; c < 3; ++c) ASSERT_EQ(out[(b * 3 + c) * h * w + p], in[(b * h * w + p) * 3 + c]);
    }
  }
}

TEST(HalfAndBFloat16, RoundToNearestEven) {
  EXPECT_EQ(FloatToHalfBits(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalfBits(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7c00);  // the halfway point to 65536 rounds to even: infinity
  EXPECT_EQ(FloatToHalfBits(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -24)), 0x0001);  // the smallest subnormal
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -25)), 0x0000);  // half of it: a tie, to even (zero)
  EXPECT_EQ(FloatToHalfBits(std::ldexp(3.0f, -26)), 0x0001);  // above the tie
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie between 1 and 1+2^-10: to even
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie, odd below: up
  EXPECT_EQ(FloatToHalfBits(std::nanf("")) & 0x7c00, 0x7c00);
  EXPECT_EQ(FloatToBFloat16Bits(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16Bits(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie: to even
  EXPECT_EQ(FloatToBFloat16Bits(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd below: up
  EXPECT_EQ(FloatToBFloat16Bits(std::bit_cast<float>(0x3f808001u)), 0x3f81);
}

TEST(HalfAndBFloat16, EveryHalfRoundTripsAndEveryRoundingIsNearest) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    if ((h & 0x7c00) == 0x7c00) continue;  // infinities and NaNs
    ASSERT_EQ(FloatToHalfBits(HalfBitsToFloat(h)), h) << std::hex << bits;
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> value(-70000.0f, 70000.0f);
  for (int i = 0; i < 200000; ++i) {
    const float f = i % 2 ? value(rng) : value(rng) * 1e-5f;
    const float h = HalfBitsToFloat(FloatToHalfBits(f));
    if (std::isinf(h)) {
      ASSERT_GE(std::abs(f), 65520.0f);
      continue;
    }
    // No half lies strictly closer to f than the one chosen.
    const uint16_t bits = FloatToHalfBits(f);
    for (int step : {-1, 1}) {
      const uint16_t other = static_cast<uint16_t>(bits + step);
      if ((other & 0x7c00) == 0x7c00 || ((bits ^ other) & 0x8000)) continue;
      ASSERT_LE(std::abs(double{h} - f), std::abs(double{HalfBitsToFloat(other)} - f)) << f;
    }
    const float b = BFloat16BitsToFloat(FloatToBFloat16Bits(f));
    ASSERT_LE(std::abs(double{b} - f), std::abs(double{f}) * std::ldexp(1.0, -8)) << f;
  }
}

TEST(ConvertOnHost, HalfAndBFloat16OutputsAreTheRoundedFloat32) {
  const uint32_t n = 2, h = 4, w = 4;
  const auto in = RandomPixels(n, h, w, 4);
  OutputFormat f32;
  std::vector<float> reference(in.size());
  ConvertOnHost(in.data(), n, h, w, f32, reference.data());
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    OutputFormat f;
    f.dtype = dtype;
    std::vector<uint16_t> out(in.size());
    ConvertOnHost(in.data(), n, h, w, f, out.data());
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(out[i], dtype == DType::kFloat16 ? FloatToHalfBits(reference[i]) : FloatToBFloat16Bits(reference[i]));
    }
  }
}

TEST(OutputFormat, RefusesStdOfZeroAndNonFiniteMeans) {
  OutputFormat f;
  EXPECT_TRUE(f.Validate().ok());
  f.std[1] = 0;
  EXPECT_EQ(f.Validate().code(), StatusCode::kInvalidArgument);
  f = OutputFormat();
  f.mean[2] = std::nanf("");
  EXPECT_EQ(f.Validate().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker::client
