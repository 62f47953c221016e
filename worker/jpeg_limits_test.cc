// JpegLimits against hostile images made here with libjpeg itself: a progressive image of 190 legitimate scans
// (accepted under the default, refused under a lower scan limit), the scan bomb of repeated refinement scans (its
// corrupt-data warning ends the decode at once), a progressive image whose coefficients need more memory than a
// decoder is allowed, and an image over its CPU budget. Each refusal leaves the decoder usable.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "datagen/synthetic_dataset.h"
#include "worker/image_pipeline.h"
#include "worker/jpeg_decoder.h"

namespace stoker::worker {
namespace {

// A w x h RGB image of gradients and noise, as JPEG (4:4:4, or libjpeg's default 4:2:0 when `subsampled`):
// baseline, jpeg_simple_progression (`progressive`), or with the scan script `scans`.
std::string Encode(int w, int h, bool progressive, const std::vector<jpeg_scan_info>& scans = {},
                   bool subsampled = false) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buffer, &size);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 90, TRUE);
  if (!subsampled) {
    for (int i = 0; i < 3; ++i) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;  // 4:4:4
  }
  if (!scans.empty()) {
    c.scan_info = scans.data();
    c.num_scans = static_cast<int>(scans.size());
  } else if (progressive) {
    jpeg_simple_progression(&c);
  }
  jpeg_start_compress(&c, TRUE);
  std::vector<unsigned char> row(static_cast<size_t>(w) * 3);
  uint32_t noise = 12345;
  while (c.next_scanline < c.image_height) {
    for (int x = 0; x < w; ++x) {
      noise = noise * 1664525u + 1013904223u;
      row[x * 3] = static_cast<unsigned char>(x * 255 / w);
      row[x * 3 + 1] = static_cast<unsigned char>(c.next_scanline * 255 / c.image_height);
      row[x * 3 + 2] = static_cast<unsigned char>(noise >> 24);
    }
    JSAMPROW rows[] = {row.data()};
    jpeg_write_scanlines(&c, rows, 1);
  }
  jpeg_finish_compress(&c);
  std::string out(reinterpret_cast<char*>(buffer), size);
  jpeg_destroy_compress(&c);
  std::free(buffer);
  return out;
}

// The longest progression without repeating anything: all DC, then every AC coefficient of every component alone.
std::vector<jpeg_scan_info> OneScanPerCoefficient() {
  std::vector<jpeg_scan_info> scans;
  scans.push_back({3, {0, 1, 2, 0}, 0, 0, 0, 0});
  for (int component = 0; component < 3; ++component) {
    for (int k = 1; k < 64; ++k) scans.push_back({1, {component, 0, 0, 0}, k, k, 0, 0});
  }
  return scans;
}

Status Decode(JpegRegionDecoder& decoder, const std::string& jpeg) {
  int w = 0, h = 0;
  STOKER_RETURN_IF_ERROR(decoder.ReadHeader(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), &w, &h));
  RegionView v;
  return decoder.DecodeRegion({0, 0, w, h}, w, h, &v);
}

TEST(JpegLimits, ALegitimateProgressionOf190ScansDecodesAndALowerScanLimitRefusesIt) {
  const std::string jpeg = Encode(64, 48, true, OneScanPerCoefficient());
  JpegRegionDecoder lenient;
  EXPECT_TRUE(Decode(lenient, jpeg).ok());
  JpegRegionDecoder strict(JpegLimits{.max_scans = 100});
  Status s = Decode(strict, jpeg);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("more than 100 scans"), std::string::npos) << s.message();
  EXPECT_TRUE(Decode(strict, Encode(64, 48, true)).ok()) << "the decoder is usable after a refusal";
}

// datagen's scan bomb: every coefficient of every component sent one bit at a time (successive approximation from
// bit 10 down), 2,090 scans, each a legitimate refinement, so libjpeg warns about none of them.
std::string EveryBitOfEveryCoefficient() {
  std::vector<uint8_t> rgb(64 * 48 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 7 + i / 192);
  auto jpeg = datagen::EncodeJpeg(rgb.data(), 64, 48,
                                  {.quality = 90, .progression = datagen::JpegEncodeOptions::Progression::kEveryBit});
  EXPECT_TRUE(jpeg.ok()) << jpeg.status().ToString();
  return jpeg.ok() ? *jpeg : std::string();
}

// Regression: a JPEG of 3,000 progressive scans held a worker thread for 101 s, and was decoded again every epoch.
// Scans that repeat one another draw a corrupt-data warning, which now ends the decode at once (before, warnings
// were only looked at after the whole decode); scans that are each legitimate, like these 2,090, meet the scan
// limit (before, all were decoded and the image delivered).
TEST(JpegLimits, ThousandsOfScansAreRefused) {
  const std::string legitimate = EveryBitOfEveryCoefficient();
  JpegRegionDecoder decoder;
  Status s = Decode(decoder, legitimate);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("more than 200 scans"), std::string::npos) << s.message();
  JpegRegionDecoder unlimited(JpegLimits{.max_scans = 1 << 20});
  EXPECT_TRUE(Decode(unlimited, legitimate).ok()) << "a valid image, which a decoder without the limit delivers";

  const std::string progressive = Encode(256, 192, true);
  const size_t last_sos = progressive.rfind("\xff\xda");
  const size_t eoi = progressive.rfind("\xff\xd9");
  ASSERT_NE(last_sos, std::string::npos);
  ASSERT_NE(eoi, std::string::npos);
  const std::string scan = progressive.substr(last_sos, eoi - last_sos);
  std::string repeated = progressive.substr(0, eoi);
  for (int i = 0; i < 3000; ++i) repeated += scan;
  repeated += "\xff\xd9";
  s = Decode(decoder, repeated);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("progression"), std::string::npos) << s.message();
  EXPECT_TRUE(Decode(decoder, progressive).ok()) << "the decoder is usable after refusals";
}

TEST(JpegLimits, AProgressiveImageNeedingMoreMemoryThanAllowedIsRefused) {
  const std::string big = Encode(1536, 1536, true);  // coefficients: 1536^2 x 3 x 2 bytes = 13.5 MiB
  JpegRegionDecoder small(JpegLimits{.max_memory_bytes = size_t{4} << 20});
  Status s = Decode(small, big);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("4 MiB"), std::string::npos) << s.message();
  JpegRegionDecoder roomy;
  EXPECT_TRUE(Decode(roomy, big).ok());
}

TEST(JpegLimits, AnImageOverItsCpuBudgetIsRefusedAndThePipelineSaysDecodeLimit) {
  const std::string jpeg = Encode(1024, 768, true);
  JpegLimits limits;
  limits.max_cpu_time = std::chrono::microseconds(1);
  JpegRegionDecoder decoder(limits);
  Status s = Decode(decoder, jpeg);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("budget"), std::string::npos) << s.message();

  PipelineSpec spec;
  spec.output_width = spec.output_height = 32;
  ImagePipeline pipeline(spec, limits);
  std::vector<uint8_t> out(32 * 32 * 3, 0xAB);
  SampleOutcome outcome =
      pipeline.Run({reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size()}, 1, out.data());
  EXPECT_FALSE(outcome.ok);
  EXPECT_EQ(outcome.reason, "decode_limit");
  EXPECT_EQ(out[0], 0) << "a refused sample's slot is zeroed";
}

}  // namespace
}  // namespace stoker::worker
