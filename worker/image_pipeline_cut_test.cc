// A gpu_decode job's samples (ImagePipeline::RunCut): a JPEG sent as its file or cut, decoded and resized with
// its box as a client does, gives the CPU path's pixels exactly (4:4:4, train and eval, flipped or not, where the
// CPU path decodes at full size); what cannot be cut (CMYK, a cut larger than the output's pixels, another format) goes as the CPU
// path's pixels; damage is quarantined with no bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <cstdlib>

#include "datagen/synthetic_dataset.h"
#include "worker/image_pipeline.h"

namespace stoker::worker {
// A namespace of its own: the unity build compiles this file with the other tests', whose helpers share names.
namespace pipeline_cut_test {
namespace {

std::span<const uint8_t> Bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

// What a client makes of a cut sample: decode the whole cut, resize the box with the job's kernel, flip.
std::vector<uint8_t> AsAClientWould(const PipelineSpec& spec, const uint8_t* jpeg, const CutSample& cut) {
  JpegRegionDecoder decoder;
  int width = 0, height = 0;
  EXPECT_TRUE(decoder.ReadHeader(jpeg, cut.bytes, &width, &height).ok());
  RegionView pixels;
  EXPECT_TRUE(decoder.DecodeFull(&pixels).ok());
  ResampleAxis ax, ay;
  PlanResizeAxes(spec, CropRect{cut.x, cut.y, cut.width, cut.height}, 1, width, height, &ax, &ay);
  EXPECT_GE(ax.lowest, 0);
  EXPECT_LE(ax.highest, width);
  EXPECT_GE(ay.lowest, 0);
  EXPECT_LE(ay.highest, height);
  std::vector<uint8_t> out(size_t{spec.output_height} * spec.output_width * 3);
  Resampler().Resize(pixels.data, pixels.stride, 0, 0, ax, ay, cut.flip, out.data());
  return out;
}

// Train crops small enough, and an eval resize mild enough, that the CPU path decodes at full size (d = 1).
PipelineSpec Spec(PipelineMode mode, GpuDecode gpu = GpuDecode::kCut) {
  PipelineSpec spec;
  spec.mode = mode;
  spec.scale_min = 0.08f;
  spec.scale_max = 0.25f;
  spec.gpu_decode = gpu;
  return spec;
}

TEST(ImagePipelineCut, AJpegResizedWithItsBoxIsTheCpuPathsOutput) {
  for (auto [mode, gpu] : {std::pair{PipelineMode::kTrain, GpuDecode::kCut}, std::pair{PipelineMode::kEval, GpuDecode::kCut},
                           std::pair{PipelineMode::kTrain, GpuDecode::kFile}, std::pair{PipelineMode::kEval, GpuDecode::kFile}}) {
    const PipelineSpec spec = Spec(mode, gpu);
    ImagePipeline pipeline(spec);
    int flipped = 0;
    for (uint64_t seed = 0; seed < 12; ++seed) {
      const std::string jpeg = *datagen::SyntheticJpeg(seed);
      std::vector<uint8_t> cpu(pipeline.output_bytes()), sent(pipeline.output_bytes());
      ASSERT_TRUE(pipeline.Run(Bytes(jpeg), seed, cpu.data()).ok);
      ASSERT_EQ(pipeline.last_reduction(), 1);
      CutSample cut;
      ASSERT_TRUE(pipeline.RunCut(Bytes(jpeg), seed, sent.data(), &cut).ok);
      ASSERT_TRUE(cut.encoded) << cut.fallback;
      EXPECT_EQ(cut.whole, gpu == GpuDecode::kFile);
      EXPECT_EQ(cut.bytes < jpeg.size(), gpu == GpuDecode::kCut);
      EXPECT_EQ(AsAClientWould(spec, sent.data(), cut), cpu) << "seed " << seed;
      flipped += cut.flip;
      if (mode == PipelineMode::kEval) {
        EXPECT_FALSE(cut.flip);
        EXPECT_LE(cut.x, 0);  // the whole image, placed in the cut's pixels
      }
      if (gpu == GpuDecode::kFile) {
        EXPECT_GE(cut.x, 0);
      }
    }
    if (mode == PipelineMode::kTrain) {
      EXPECT_GT(flipped, 0);
    }
  }
}

TEST(ImagePipelineCut, A420CutIsCloseToTheCpuPath) {
  const PipelineSpec spec = Spec(PipelineMode::kTrain);
  ImagePipeline pipeline(spec);
  const std::string jpeg = *datagen::SyntheticJpeg(2, {.chroma_444 = false});
  std::vector<uint8_t> cpu(pipeline.output_bytes()), sent(pipeline.output_bytes());
  ASSERT_TRUE(pipeline.Run(Bytes(jpeg), 5, cpu.data()).ok);
  CutSample cut;
  ASSERT_TRUE(pipeline.RunCut(Bytes(jpeg), 5, sent.data(), &cut).ok);
  ASSERT_TRUE(cut.encoded);
  const std::vector<uint8_t> client = AsAClientWould(spec, sent.data(), cut);
  double sum = 0;
  for (size_t i = 0; i < cpu.size(); ++i) sum += std::abs(int(cpu[i]) - int(client[i]));
  EXPECT_LT(sum / cpu.size(), 0.5);  // chroma upsampled without its neighbours along the cut's edges
}

TEST(ImagePipelineCut, WhatCannotBeCutGoesAsTheCpuPathsPixels) {
  PipelineSpec spec = Spec(PipelineMode::kTrain);
  ImagePipeline pipeline(spec);
  std::vector<uint8_t> cpu(pipeline.output_bytes()), sent(pipeline.output_bytes());
  const std::string cmyk = *datagen::SyntheticJpeg(1, {.colour_space = datagen::JpegEncodeOptions::ColourSpace::kCmyk});
  CutSample cut;
  ASSERT_TRUE(pipeline.RunCut(Bytes(cmyk), 3, sent.data(), &cut).ok);
  EXPECT_FALSE(cut.encoded);
  EXPECT_EQ(cut.bytes, pipeline.output_bytes());
  EXPECT_NE(cut.fallback.find("colour space"), std::string::npos) << cut.fallback;
  ASSERT_TRUE(pipeline.Run(Bytes(cmyk), 3, cpu.data()).ok);
  EXPECT_EQ(sent, cpu);

  // A 16x16 output: any cut of a q96 crop is larger than its 768 bytes of pixels.
  spec.output_height = spec.output_width = 16;
  ImagePipeline tiny(spec);
  std::vector<uint8_t> small(tiny.output_bytes()), small_cpu(tiny.output_bytes());
  const std::string jpeg = *datagen::SyntheticJpeg(1);
  ASSERT_TRUE(tiny.RunCut(Bytes(jpeg), 3, small.data(), &cut).ok);
  EXPECT_FALSE(cut.encoded);
  EXPECT_EQ(cut.bytes, 768u);
  ASSERT_TRUE(tiny.Run(Bytes(jpeg), 3, small_cpu.data()).ok);
  EXPECT_EQ(small, small_cpu);
}

TEST(ImagePipelineCut, DamageIsQuarantinedWithNoBytes) {
  ImagePipeline pipeline(Spec(PipelineMode::kTrain));
  std::vector<uint8_t> out(pipeline.output_bytes(), 0xAB);
  const std::string jpeg = *datagen::SyntheticJpeg(1);
  CutSample cut;
  SampleOutcome o = pipeline.RunCut(Bytes(jpeg.substr(0, 200)), 3, out.data(), &cut);
  EXPECT_FALSE(o.ok);
  EXPECT_FALSE(cut.encoded);
  EXPECT_EQ(cut.bytes, 0u);
  o = pipeline.RunCut(Bytes(std::string(1000, 'x')), 3, out.data(), &cut);
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(cut.bytes, 0u);
}

}  // namespace
}  // namespace pipeline_cut_test
}  // namespace stoker::worker
