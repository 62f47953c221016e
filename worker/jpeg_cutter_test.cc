// The lossless cut against a full decode of the same region (libjpeg-turbo on both sides): equal pixels for 4:4:4,
// greyscale, progressive and arithmetic inputs (the cut is baseline Huffman whatever came in), and for 4:2:0 with
// box upsampling (fancy upsampling reads across the cut's edges); MCU-aligned corners; CMYK, YCCK, damage, a
// region outside the image and a cut too large for its buffer refused; and the file as it is where the GPU takes it.
#include "worker/jpeg_cutter.h"

#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <algorithm>
#include <utility>
#include <string>
#include <vector>

#include "datagen/synthetic_dataset.h"

namespace stoker::worker {
// A namespace of its own: the unity build compiles this file with the other tests', whose helpers share names.
namespace cutter_test {
namespace {

using datagen::JpegEncodeOptions;

struct Rgb {
  std::vector<uint8_t> pixels;
  int width = 0, height = 0;
};

// TurboJPEG's decode of the whole JPEG to RGB; `flags` TJFLAG_FASTUPSAMPLE for box upsampling.
Rgb Decode(const uint8_t* jpeg, size_t size, int flags = 0) {
  tjhandle h = tjInitDecompress();
  Rgb out;
  int subsamp = 0, colorspace = 0;
  EXPECT_EQ(tjDecompressHeader3(h, jpeg, size, &out.width, &out.height, &subsamp, &colorspace), 0);
  out.pixels.resize(size_t(out.width) * out.height * 3);
  EXPECT_EQ(tjDecompress2(h, jpeg, size, out.pixels.data(), out.width, 0, out.height, TJPF_RGB, flags), 0)
      << tjGetErrorStr2(h);
  tjDestroy(h);
  return out;
}

std::string Jpeg(uint64_t index, JpegEncodeOptions options = {}) {
  auto jpeg = datagen::SyntheticJpeg(index, options);
  EXPECT_TRUE(jpeg.ok()) << jpeg.status().ToString();
  return jpeg.ok() ? *jpeg : std::string();
}

std::span<const uint8_t> Bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

// Whether the JPEG has a start-of-frame marker `sof` (0xC0 baseline, 0xC2 progressive, 0xC9 arithmetic) before its
// scan; walks the marker segments.
bool HasFrameMarker(const uint8_t* jpeg, size_t size, uint8_t sof) {
  for (size_t at = 2; at + 4 <= size && jpeg[at] == 0xFF;) {
    const uint8_t marker = jpeg[at + 1];
    if (marker == sof) return true;
    if (marker == 0xDA) return false;
    at += 2 + (size_t(jpeg[at + 2]) << 8 | jpeg[at + 3]);
  }
  return false;
}

// The largest difference between the cut's pixels and the same pixels of the full image, leaving out `margin`
// pixels along each edge of the cut that is not an edge of the image.
int MaxDifference(const Rgb& full, const Rgb& cut, const JpegCut& where, int margin) {
  int worst = 0;
  for (int y = 0; y < cut.height; ++y) {
    for (int x = 0; x < cut.width; ++x) {
      const bool inner_x = (where.x == 0 || x >= margin) && (where.x + cut.width == full.width || x < cut.width - margin);
      const bool inner_y = (where.y == 0 || y >= margin) && (where.y + cut.height == full.height || y < cut.height - margin);
      if (!inner_x || !inner_y) continue;
      for (int c = 0; c < 3; ++c) {
        const int a = cut.pixels[(size_t(y) * cut.width + x) * 3 + c];
        const int b = full.pixels[(size_t(where.y + y) * full.width + where.x + x) * 3 + c];
        worst = std::max(worst, std::abs(a - b));
      }
    }
  }
  return worst;
}

// Cuts `jpeg` to `region` and checks the cut's geometry and that it is a baseline JPEG; returns the cut's pixels.
Rgb CutAndCheck(const std::string& jpeg, const CropRect& region, int mcu, JpegCut* where, int flags = 0) {
  JpegCutter cutter;
  std::vector<uint8_t> out(jpeg.size() * 2);
  StatusOr<JpegCut> cut = cutter.Prepare(Bytes(jpeg), region, GpuDecode::kCut, out.data(), out.size());
  EXPECT_TRUE(cut.ok()) << cut.status().ToString();
  if (!cut.ok()) return {};
  *where = *cut;
  EXPECT_EQ(cut->x % mcu, 0);
  EXPECT_EQ(cut->y % mcu, 0);
  EXPECT_LE(cut->x, region.x);
  EXPECT_GT(cut->x + mcu, region.x);
  EXPECT_LE(cut->y, region.y);
  EXPECT_GT(cut->y + mcu, region.y);
  EXPECT_EQ(cut->x + cut->width, region.x + region.width);
  EXPECT_EQ(cut->y + cut->height, region.y + region.height);
  EXPECT_TRUE(HasFrameMarker(out.data(), cut->bytes, 0xC0)) << "the cut is not a baseline Huffman JPEG";
  Rgb pixels = Decode(out.data(), cut->bytes, flags);
  EXPECT_EQ(pixels.width, cut->width);
  EXPECT_EQ(pixels.height, cut->height);
  return pixels;
}

TEST(JpegCutter, A444CutHasTheFullDecodesPixels) {
  const std::string jpeg = Jpeg(3);
  const Rgb full = Decode(Bytes(jpeg).data(), jpeg.size());
  for (const CropRect region : {CropRect{37, 21, 150, 201}, CropRect{0, 0, 64, 64}, CropRect{8, 8, 1, 1},
                                CropRect{100, 50, full.width - 100, full.height - 50}}) {
    JpegCut where;
    const Rgb cut = CutAndCheck(jpeg, region, 8, &where);
    EXPECT_EQ(MaxDifference(full, cut, where, 0), 0) << region.x << "," << region.y;
  }
}

TEST(JpegCutter, A420CutIsExactWithBoxUpsamplingAndInsideItsEdgesOtherwise) {
  const std::string jpeg = Jpeg(4, {.chroma_444 = false});
  const CropRect region{45, 29, 211, 170};
  JpegCut where;
  const Rgb box = CutAndCheck(jpeg, region, 16, &where, TJFLAG_FASTUPSAMPLE);
  EXPECT_EQ(MaxDifference(Decode(Bytes(jpeg).data(), jpeg.size(), TJFLAG_FASTUPSAMPLE), box, where, 0), 0);
  const Rgb fancy = CutAndCheck(jpeg, region, 16, &where);
  EXPECT_EQ(MaxDifference(Decode(Bytes(jpeg).data(), jpeg.size()), fancy, where, 2), 0);
}

TEST(JpegCutter, ProgressiveArithmeticAndGreyInputsBecomeBaselineWithTheSamePixels) {
  const JpegEncodeOptions kinds[] = {
      {.progression = JpegEncodeOptions::Progression::kProgressive},
      {.arithmetic = true},
      {.colour_space = JpegEncodeOptions::ColourSpace::kGrey},
  };
  for (const JpegEncodeOptions& options : kinds) {
    const std::string jpeg = Jpeg(5, options);
    const Rgb full = Decode(Bytes(jpeg).data(), jpeg.size());
    JpegCut where;
    const Rgb cut = CutAndCheck(jpeg, CropRect{19, 33, 120, 90}, 8, &where);
    EXPECT_EQ(MaxDifference(full, cut, where, 0), 0);
  }
  EXPECT_TRUE(HasFrameMarker(Bytes(Jpeg(5, kinds[0])).data(), Jpeg(5, kinds[0]).size(), 0xC2));
  EXPECT_TRUE(HasFrameMarker(Bytes(Jpeg(5, kinds[1])).data(), Jpeg(5, kinds[1]).size(), 0xC9));
}

TEST(JpegCutter, RefusesWhatItCannotCut) {
  JpegCutter cutter;
  std::vector<uint8_t> out(1 << 20);
  const CropRect region{0, 0, 64, 64};
  auto code = [&](const std::string& jpeg, const CropRect& r, GpuDecode mode, size_t capacity) {
    return cutter.Prepare(Bytes(jpeg), r, mode, out.data(), capacity).status().code();
  };
  for (auto colour : {JpegEncodeOptions::ColourSpace::kCmyk, JpegEncodeOptions::ColourSpace::kYcck}) {
    for (GpuDecode mode : {GpuDecode::kCut, GpuDecode::kFile}) {
      EXPECT_EQ(code(Jpeg(6, {.colour_space = colour}), region, mode, out.size()), StatusCode::kFailedPrecondition);
    }
  }
  const std::string jpeg = Jpeg(6);
  EXPECT_EQ(code(jpeg.substr(0, jpeg.size() / 2), region, GpuDecode::kCut, out.size()), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("not a jpeg at all", region, GpuDecode::kFile, out.size()), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(jpeg, CropRect{400, 300, 200, 200}, GpuDecode::kCut, out.size()), StatusCode::kInvalidArgument);
  // Too large for its buffer, whether the file or a cut.
  for (size_t capacity : {size_t{100}, size_t{5000}}) {
    for (GpuDecode mode : {GpuDecode::kCut, GpuDecode::kFile}) {
      EXPECT_EQ(code(jpeg, CropRect{0, 0, 300, 300}, mode, capacity), StatusCode::kResourceExhausted);
    }
  }
  // The cutter still cuts after refusals.
  EXPECT_TRUE(cutter.Prepare(Bytes(jpeg), region, GpuDecode::kCut, out.data(), out.size()).ok());
}

TEST(JpegCutter, KeepsToTheWorkersLimitsForOneImage) {
  std::vector<uint8_t> out(1 << 20);
  const CropRect region{0, 0, 64, 64};
  auto code = [&](const JpegLimits& limits, const std::string& jpeg, GpuDecode mode, const CropRect& r) {
    return JpegCutter(limits).Prepare(Bytes(jpeg), r, mode, out.data(), out.size()).status().code();
  };
  // 375x500 4:4:4: 47 x 63 blocks of 3 components, 128 bytes each: 1,137,024 bytes of coefficients.
  const std::string jpeg = Jpeg(7);
  for (GpuDecode mode : {GpuDecode::kCut, GpuDecode::kFile}) {
    EXPECT_EQ(code({.max_memory_bytes = 1137023}, jpeg, mode, region), StatusCode::kResourceExhausted);
    EXPECT_EQ(code({.max_pixels = 500 * 375 - 1}, jpeg, mode, region), StatusCode::kResourceExhausted);
    // libjpeg's usual progression has ten scans for three components.
    const std::string progressive = Jpeg(7, {.progression = JpegEncodeOptions::Progression::kProgressive});
    EXPECT_EQ(code({.max_scans = 9}, progressive, mode, region), StatusCode::kResourceExhausted);
    EXPECT_EQ(code({.max_scans = 10}, progressive, mode, region), StatusCode::kOk);
  }
  // The source's coefficients fit; a cut of most of the image needs its own coefficients and scratch besides.
  const JpegLimits tight{.max_memory_bytes = 1137024 + 200000};
  EXPECT_EQ(code(tight, jpeg, GpuDecode::kFile, region), StatusCode::kOk);  // the file: no transform
  EXPECT_EQ(code(tight, jpeg, GpuDecode::kCut, region), StatusCode::kOk);
  EXPECT_EQ(code(tight, jpeg, GpuDecode::kCut, CropRect{0, 0, 300, 400}), StatusCode::kResourceExhausted);
  // A cut whose bytes, guessed from the file's, would be far more than the buffer is not tried.
  auto guessed = JpegCutter().Prepare(Bytes(jpeg), CropRect{0, 0, 300, 400}, GpuDecode::kCut, out.data(), 10000);
  EXPECT_EQ(guessed.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(guessed.status().message().find("far larger"), std::string::npos) << guessed.status().message();
}

// Sampling factors larger than the subsampling needs (4:4:4 with every component 2x1, 1x2 or 3x1) make
// the transform start further up and left than the subsampling's MCU says: the cut's origin and size are its own.
TEST(JpegCutter, LargerMcusThanTheSubsamplingSaysStillGiveTheCutsTrueGeometry) {
  for (auto [h, v] : {std::pair{2, 1}, std::pair{1, 2}, std::pair{3, 1}}) {
    const std::string jpeg = Jpeg(9, {.every_component_h = h, .every_component_v = v});
    const CropRect region{40, 40, 200, 150};
    JpegCutter cutter;
    std::vector<uint8_t> out(jpeg.size() * 2);
    auto cut = cutter.Prepare(Bytes(jpeg), region, GpuDecode::kCut, out.data(), out.size());
    ASSERT_TRUE(cut.ok()) << cut.status().ToString();
    EXPECT_EQ(cut->x % (8 * h), 0) << h << "x" << v;
    // 40 is on the subsampling's 8-pixel grid: only the true MCU moves the cut's corner.
    EXPECT_EQ(h > 1 ? cut->x < region.x : cut->y < region.y, true) << h << "x" << v;
    EXPECT_EQ(cut->y % (8 * v), 0);
    EXPECT_LE(cut->x, region.x);
    EXPECT_LE(cut->y, region.y);
    EXPECT_EQ(cut->x + cut->width, region.x + region.width);
    EXPECT_EQ(cut->y + cut->height, region.y + region.height);
    const Rgb pixels = Decode(out.data(), cut->bytes, TJFLAG_FASTUPSAMPLE);
    ASSERT_EQ(pixels.width, cut->width);
    ASSERT_EQ(pixels.height, cut->height);
    EXPECT_EQ(MaxDifference(Decode(Bytes(jpeg).data(), jpeg.size(), TJFLAG_FASTUPSAMPLE), pixels, *cut, 0), 0);
  }
}

// A cut whose scratch is over what the cutter keeps (4 MiB: a region of ~700 K pixels at 4:4:4) is copied out
// before the scratch is given back, and the next cut grows it again.
TEST(JpegCutter, ALargeCutIsCopiedOutBeforeItsScratchIsGivenBack) {
  const std::vector<uint8_t> flat(size_t{1000} * 1000 * 3, 128);  // compresses to almost nothing
  auto jpeg = datagen::EncodeJpeg(flat.data(), 1000, 1000, {.quality = 50});
  ASSERT_TRUE(jpeg.ok()) << jpeg.status().ToString();
  JpegCutter cutter;
  std::vector<uint8_t> out(1 << 20);
  for (int round = 0; round < 2; ++round) {
    auto cut = cutter.Prepare(Bytes(*jpeg), CropRect{8, 8, 900, 900}, GpuDecode::kCut, out.data(), out.size());
    ASSERT_TRUE(cut.ok()) << cut.status().ToString();
    const Rgb pixels = Decode(out.data(), cut->bytes);
    ASSERT_EQ(pixels.width, 900);
    EXPECT_EQ(pixels.pixels, std::vector<uint8_t>(size_t{900} * 900 * 3, 128));
  }
}

// GpuDecode::kFile: the file as it is where every nvJPEG backend takes it (baseline or progressive Huffman), else
// the cut (arithmetic coding, or a file larger than the output's pixels).
TEST(JpegCutter, AFileTheGpuTakesGoesAsItIsAndTheRestIsCut) {
  JpegCutter cutter;
  std::vector<uint8_t> out(1 << 20);
  const CropRect region{19, 33, 120, 90};
  for (const JpegEncodeOptions& options : {JpegEncodeOptions{}, JpegEncodeOptions{.chroma_444 = false},
                                           JpegEncodeOptions{.progression = JpegEncodeOptions::Progression::kProgressive},
                                           JpegEncodeOptions{.colour_space = JpegEncodeOptions::ColourSpace::kGrey}}) {
    const std::string jpeg = Jpeg(8, options);
    auto sent = cutter.Prepare(Bytes(jpeg), region, GpuDecode::kFile, out.data(), out.size());
    ASSERT_TRUE(sent.ok()) << sent.status().ToString();
    EXPECT_TRUE(sent->whole);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(out.data()), sent->bytes), jpeg);
    EXPECT_EQ(sent->x, 0);
    EXPECT_EQ(sent->width, Decode(Bytes(jpeg).data(), jpeg.size()).width);
  }
  const std::string arithmetic = Jpeg(8, {.arithmetic = true});
  auto transcoded = cutter.Prepare(Bytes(arithmetic), region, GpuDecode::kFile, out.data(), out.size());
  ASSERT_TRUE(transcoded.ok()) << transcoded.status().ToString();
  EXPECT_FALSE(transcoded->whole);
  EXPECT_TRUE(HasFrameMarker(out.data(), transcoded->bytes, 0xC0));
  // A marker without a length (TEM, here) before the frame header makes the file go cut: read as a length, this TEM
  // jumped into the second comment, onto a baseline frame header written there, and the arithmetic JPEG behind
  // went to the GPU as its file.
  std::string crafted("\xFF\xD8\xFF\x01\xFF\xFE\xFD\xE8", 8);  // SOI, TEM, a comment of 65,000 bytes
  crafted += std::string(64998, 'c') + std::string("\xFF\xFE\x03\xE8", 4);  // and one of 1,000
  std::string second(998, 'c');
  const size_t fake_at = 65538 - crafted.size();  // where the TEM read as a length of 0xFFFE lands
  second.replace(fake_at, 5, std::string("\xFF\xC0\x00\x11\x08", 5));
  crafted += second + arithmetic.substr(2);
  auto sneaked = cutter.Prepare(Bytes(crafted), region, GpuDecode::kFile, out.data(), out.size());
  ASSERT_TRUE(sneaked.ok()) << sneaked.status().ToString();
  EXPECT_FALSE(sneaked->whole);
  const std::string jpeg = Jpeg(8);
  auto cut = cutter.Prepare(Bytes(jpeg), region, GpuDecode::kFile, out.data(), jpeg.size() - 1);
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  EXPECT_FALSE(cut->whole);
  EXPECT_LT(cut->bytes, jpeg.size());
}

}  // namespace
}  // namespace cutter_test
}  // namespace stoker::worker
