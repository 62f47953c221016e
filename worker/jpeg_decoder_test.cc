// The region decoder against full decoding (4:4:4 and 4:2:0), DCT-domain reduction, damaged input as DATA_LOSS,
// images claiming too many pixels refused, and CMYK and YCCK JPEGs decoded to RGB as Pillow decodes them.
#include "worker/jpeg_decoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "datagen/synthetic_dataset.h"

namespace stoker::worker {
namespace {

struct Image {
  std::vector<uint8_t> rgb;
  int width = 0, height = 0;
};

Image DecodeAll(const std::string& jpeg) {
  JpegRegionDecoder decoder;
  Image img;
  EXPECT_TRUE(decoder.ReadHeader(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), &img.width,
                                 &img.height).ok());
  RegionView v;
  Status s = decoder.DecodeFull(&v);
  EXPECT_TRUE(s.ok()) << s.ToString();
  for (int y = 0; y < v.height; ++y) img.rgb.insert(img.rgb.end(), v.data + y * v.stride, v.data + y * v.stride + v.width * 3);
  return img;
}

// Max and mean absolute difference between a decoded region and the same rectangle of the full decode.
void CompareRegion(const Image& full, const CropRect& crop, const RegionView& v, int* max_diff, double* mean_diff) {
  ASSERT_EQ(v.width, crop.width);
  ASSERT_EQ(v.height, crop.height);
  *max_diff = 0;
  double sum = 0;
  for (int y = 0; y < crop.height; ++y) {
    for (int x = 0; x < crop.width * 3; ++x) {
      int a = full.rgb[(size_t(crop.y + y) * full.width) * 3 + crop.x * 3 + x];
      int b = v.data[y * v.stride + x];
      *max_diff = std::max(*max_diff, std::abs(a - b));
      sum += std::abs(a - b);
    }
  }
  *mean_diff = sum / (double(crop.width) * crop.height * 3);
}

TEST(JpegRegionDecoder, RegionEqualsTheFullDecodeFor444) {
  auto jpeg = datagen::SyntheticJpeg(0, {96, true});
  ASSERT_TRUE(jpeg.ok());
  Image full = DecodeAll(*jpeg);
  JpegRegionDecoder decoder;
  for (CropRect crop : {CropRect{0, 0, 500, 375}, CropRect{13, 7, 200, 150}, CropRect{301, 200, 199, 175},
                        CropRect{250, 1, 31, 300}}) {
    int w, h;
    ASSERT_TRUE(decoder.ReadHeader(reinterpret_cast<const uint8_t*>(jpeg->data()), jpeg->size(), &w, &h).ok());
    RegionView v;
    // Ask for at least the crop's own size: no DCT reduction.
    ASSERT_TRUE(decoder.DecodeRegion(crop, crop.width, crop.height, &v).ok());
    EXPECT_EQ(v.scale_denominator, 1);
    int max_diff;
    double mean_diff;
    CompareRegion(full, crop, v, &max_diff, &mean_diff);
    EXPECT_EQ(max_diff, 0) << "crop " << crop.x << "," << crop.y << " " << crop.width << "x" << crop.height;
  }
}

TEST(JpegRegionDecoder, RegionMatchesTheFullDecodeFor420UpToEdgeUpsampling) {
  auto jpeg = datagen::SyntheticJpeg(4, {90, false});
  ASSERT_TRUE(jpeg.ok());
  Image full = DecodeAll(*jpeg);
  JpegRegionDecoder decoder;
  CropRect crop{37, 51, 250, 180};
  int w, h;
  ASSERT_TRUE(decoder.ReadHeader(reinterpret_cast<const uint8_t*>(jpeg->data()), jpeg->size(), &w, &h).ok());
  RegionView v;
  ASSERT_TRUE(decoder.DecodeRegion(crop, crop.width, crop.height, &v).ok());
  int max_diff;
  double mean_diff;
  CompareRegion(full, crop, v, &max_diff, &mean_diff);
  EXPECT_LT(mean_diff, 0.05);  // only the chroma upsampling at the skipped edge can differ
  EXPECT_LE(max_diff, 8);
}

TEST(JpegRegionDecoder, ReducesInTheDctDomainWhenTheCropIsLarge) {
  EXPECT_EQ(ChooseScaleDenominator({0, 0, 500, 375}, 224, 224), 1);
  EXPECT_EQ(ChooseScaleDenominator({0, 0, 448, 448}, 224, 224), 2);
  EXPECT_EQ(ChooseScaleDenominator({0, 0, 900, 500}, 224, 224), 2);
  EXPECT_EQ(ChooseScaleDenominator({0, 0, 1800, 1800}, 224, 224), 8);
  EXPECT_EQ(ChooseScaleDenominator({0, 0, 1000, 900}, 224, 224), 4);

  auto jpeg = datagen::SyntheticJpeg(2, {96, true});
  Image full = DecodeAll(*jpeg);
  JpegRegionDecoder decoder;
  int w, h;
  ASSERT_TRUE(decoder.ReadHeader(reinterpret_cast<const uint8_t*>(jpeg->data()), jpeg->size(), &w, &h).ok());
  RegionView v;
  CropRect crop{20, 10, 400, 300};
  ASSERT_TRUE(decoder.DecodeRegion(crop, 100, 100, &v).ok());
  EXPECT_EQ(v.scale_denominator, 2);
  EXPECT_EQ(v.width, 200);
  EXPECT_EQ(v.height, 150);
  // The half-size decode approximates 2x2 averages of the full decode.
  double sum = 0;
  for (int y = 0; y < v.height; ++y) {
    for (int x = 0; x < v.width; ++x) {
      for (int c = 0; c < 3; ++c) {
        int sy = crop.y + 2 * y, sx = crop.x + 2 * x;
        double avg = 0;
        for (int dy = 0; dy < 2; ++dy)
          for (int dx = 0; dx < 2; ++dx) avg += full.rgb[(size_t(sy + dy) * full.width + sx + dx) * 3 + c];
        sum += std::abs(avg / 4 - v.data[y * v.stride + x * 3 + c]);
      }
    }
  }
  EXPECT_LT(sum / (v.width * v.height * 3.0), 3.0);
}

TEST(JpegRegionDecoder, DamagedInputIsDataLossWithLibjpegsWords) {
  auto jpeg = datagen::SyntheticJpeg(1, {96, true});
  JpegRegionDecoder decoder;
  int w, h;
  RegionView v;
  // Truncated: half the file.
  std::string cut = jpeg->substr(0, jpeg->size() / 2);
  ASSERT_TRUE(decoder.ReadHeader(reinterpret_cast<const uint8_t*>(cut.data()), cut.size(), &w, &h).ok());
  Status s = decoder.DecodeRegion({0, 0, w, h}, w, h, &v);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("Premature end"), std::string::npos) << s.message();
  // Garbage in the entropy-coded data.
  std::string damaged = *jpeg;
  for (size_t i = damaged.size() / 3; i < damaged.size() / 3 + 2000; i += 7) damaged[i] = char(0xFF);
  ASSERT_TRUE(decoder.ReadHeader(reinterpret_cast<const uint8_t*>(damaged.data()), damaged.size(), &w, &h).ok());
  s = decoder.DecodeRegion({0, 0, w, h}, w, h, &v);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  // Not a JPEG at all, and empty.
  std::string text = "definitely not a jpeg";
  s = decoder.ReadHeader(reinterpret_cast<const uint8_t*>(text.data()), text.size(), &w, &h);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(decoder.ReadHeader(nullptr, 0, &w, &h).code(), StatusCode::kDataLoss);
  // The decoder is still usable after all of that.
  ASSERT_TRUE(decoder.ReadHeader(reinterpret_cast<const uint8_t*>(jpeg->data()), jpeg->size(), &w, &h).ok());
  EXPECT_TRUE(decoder.DecodeRegion({0, 0, 64, 64}, 64, 64, &v).ok());
}

TEST(JpegRegionDecoder, RefusesImagesClaimingTooManyPixels) {
  // A small JPEG whose header claims 65000x65000: without the limit libjpeg would allocate gigabytes.
  auto jpeg = datagen::SyntheticJpeg(3, {90, true});
  std::string bomb = *jpeg;
  for (size_t i = 0; i + 9 < bomb.size(); ++i) {
    if (static_cast<uint8_t>(bomb[i]) == 0xFF && static_cast<uint8_t>(bomb[i + 1]) == 0xC0) {  // SOF0
      bomb[i + 5] = char(0xFD);
      bomb[i + 6] = char(0xE8);
      bomb[i + 7] = char(0xFD);
      bomb[i + 8] = char(0xE8);
      break;
    }
  }
  JpegRegionDecoder decoder;
  int w, h;
  Status s = decoder.ReadHeader(reinterpret_cast<const uint8_t*>(bomb.data()), bomb.size(), &w, &h);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("65000x65000"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("limit"), std::string::npos);
  // A genuine image still decodes with the same decoder.
  ASSERT_TRUE(decoder.ReadHeader(reinterpret_cast<const uint8_t*>(jpeg->data()), jpeg->size(), &w, &h).ok());
}

// Pillow's answers (Image.frombytes("CMYK", ..., inverted).convert("RGB") in Pillow 9.4) for CMYK as libjpeg-turbo
// outputs it: Pillow opens CMYK JPEGs as "CMYK;I".
TEST(CmykToRgb, GivesPillowsPixels) {
  std::vector<uint8_t> row = {0, 0, 0, 0, 255, 255, 255, 255, 255, 128, 0, 200,
                              10, 20, 30, 40, 200, 100, 50, 255, 77, 188, 3, 129};
  CmykToRgbInPlace(row.data(), 6);
  const std::vector<uint8_t> pillow = {0, 0, 0, 255, 255, 255, 200, 100, 0, 2, 3, 5, 200, 100, 50, 39, 95, 2};
  EXPECT_EQ(std::vector<uint8_t>(row.begin(), row.begin() + 18), pillow);
}

// The CMYK and YCCK files the encoders of print workflows write, baseline and progressive, full and subsampled:
// each decodes (none is refused, as every one was before: ImageNet has 22), close to the RGB it was made from, and a
// region is the full decode's pixels.
TEST(JpegRegionDecoder, DecodesCmykAndYcckJpegs) {
  using Options = datagen::JpegEncodeOptions;
  int width = 0, height = 0;
  const std::vector<uint8_t> rgb = datagen::SyntheticImage(5, &width, &height);
  for (auto space : {Options::ColourSpace::kCmyk, Options::ColourSpace::kYcck}) {
    for (bool full_chroma : {true, false}) {
      for (auto progression : {Options::Progression::kBaseline, Options::Progression::kProgressive}) {
        Options options{.quality = 95, .chroma_444 = full_chroma, .progression = progression, .colour_space = space};
        SCOPED_TRACE(::testing::Message() << (space == Options::ColourSpace::kCmyk ? "CMYK" : "YCCK")
                                        << (full_chroma ? " 4:4:4" : " subsampled")
                                        << (progression == Options::Progression::kBaseline ? " baseline" : " progressive"));
        auto jpeg = datagen::EncodeJpeg(rgb.data(), width, height, options);
        ASSERT_TRUE(jpeg.ok()) << jpeg.status().ToString();
        Image full = DecodeAll(*jpeg);
        ASSERT_EQ(full.width, width);
        ASSERT_EQ(full.height, height);
        double sum = 0;
        for (size_t i = 0; i < rgb.size(); ++i) sum += std::abs(int{full.rgb[i]} - int{rgb[i]});
        EXPECT_LT(sum / rgb.size(), 4.0);  // lossy, but the same picture: inverted or unconverted would be ~100

        JpegRegionDecoder decoder;
        int w = 0, h = 0;
        ASSERT_TRUE(decoder.ReadHeader(reinterpret_cast<const uint8_t*>(jpeg->data()), jpeg->size(), &w, &h).ok());
        RegionView v;
        CropRect crop{37, 51, 250, 180};
        ASSERT_TRUE(decoder.DecodeRegion(crop, crop.width, crop.height, &v).ok());
        int max_diff;
        double mean_diff;
        CompareRegion(full, crop, v, &max_diff, &mean_diff);
        if (full_chroma) {
          EXPECT_EQ(max_diff, 0);
        } else {
          EXPECT_LT(mean_diff, 0.05);  // only the upsampling at the skipped edge can differ
        }
        // The DCT-reduced path runs too (a crop twice the output).
        ASSERT_TRUE(decoder.ReadHeader(reinterpret_cast<const uint8_t*>(jpeg->data()), jpeg->size(), &w, &h).ok());
        ASSERT_TRUE(decoder.DecodeRegion({0, 0, w, h}, w / 2, h / 2, &v).ok());
        EXPECT_EQ(v.scale_denominator, 2);
      }
    }
  }
}

}  // namespace
}  // namespace stoker::worker
