// libFuzzer target: a JPEG through the worker's region decoder (worker/jpeg_decoder.h) with a crop and an output
// size taken from the input's last bytes, under tighter limits than a worker's so the fuzzer stays fast; or, by
// one more byte, through the whole image pipeline (train or eval, the Pillow or the OpenCV resize kernel) into a
// small output, which also runs the resampler's taps on whatever size the header claims; or, for a job that decodes
// on the GPU (bit 4; bit 5 the file where it can go as it is), through the lossless cut (worker/jpeg_cutter.h)
// and, where it refuses, the CPU path.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <tuple>
#include <vector>

#include "worker/crop_geometry.h"
#include "worker/image_pipeline.h"
#include "worker/jpeg_decoder.h"

// What a client relies on of a JPEG sent for the GPU: it fits the slot, it is a JPEG inside the source image, and
// its box's resize reads, in its pixels, exactly the taps the CPU path's resize reads in the source's. A breach
// traps (a finding).
static void CheckCut(const stoker::PipelineSpec& spec, std::span<const uint8_t> jpeg, uint64_t seed,
                     const stoker::worker::CutSample& cut, const uint8_t* out, size_t capacity,
                     const stoker::worker::JpegLimits& limits) {
  using namespace stoker::worker;
  if (cut.bytes == 0 || cut.bytes > capacity) __builtin_trap();
  JpegRegionDecoder source(limits), sent(limits);
  int width = 0, height = 0, cut_width = 0, cut_height = 0;
  if (!source.ReadHeader(jpeg.data(), jpeg.size(), &width, &height).ok()) __builtin_trap();
  if (!sent.ReadHeader(out, cut.bytes, &cut_width, &cut_height).ok()) __builtin_trap();
  const Augmentation aug = PlanAugmentation(spec, width, height, seed);
  const CropRect box = spec.mode == stoker::PipelineMode::kEval ? CropRect{0, 0, width, height} : aug.crop;
  const int x0 = box.x - cut.x, y0 = box.y - cut.y;  // where the sent JPEG starts in the source
  if (cut.width != box.width || cut.height != box.height || cut.flip != aug.flip || x0 < 0 || y0 < 0 ||
      x0 + cut_width > width || y0 + cut_height > height) {
    __builtin_trap();
  }
  ResampleAxis fx, fy, cx, cy;
  PlanResizeAxes(spec, box, 1, width, height, &fx, &fy);
  PlanResizeAxes(spec, {cut.x, cut.y, cut.width, cut.height}, 1, cut_width, cut_height, &cx, &cy);
  for (auto [full, in_cut, origin] : {std::tuple{&fx, &cx, x0}, std::tuple{&fy, &cy, y0}}) {
    if (full->count != in_cut->count || in_cut->lowest < 0) __builtin_trap();
    for (size_t i = 0; i < full->first.size(); ++i) {
      if (full->first[i] - origin != in_cut->first[i]) __builtin_trap();
    }
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const uint16_t x = in.ConsumeIntegral<uint16_t>(), y = in.ConsumeIntegral<uint16_t>();
  const uint16_t w = in.ConsumeIntegral<uint16_t>(), h = in.ConsumeIntegral<uint16_t>();
  const int out = in.ConsumeIntegralInRange<int>(1, 256);
  const uint8_t route = in.ConsumeIntegral<uint8_t>();
  const std::vector<uint8_t> jpeg = in.ConsumeRemainingBytes<uint8_t>();
  const stoker::worker::JpegLimits limits{.max_pixels = uint64_t{4} << 20,
                                  .max_scans = 64,
                                  .max_memory_bytes = size_t{64} << 20,
                                  .max_cpu_time = std::chrono::milliseconds(500)};
  if (route & 1) {
    stoker::PipelineSpec spec;
    spec.mode = route & 2 ? stoker::PipelineMode::kEval : stoker::PipelineMode::kTrain;
    spec.resize_kernel = route & 4 ? stoker::ResizeKernel::kOpenCv : stoker::ResizeKernel::kPillow;
    spec.antialias = !(route & 8);
    spec.output_width = spec.output_height = static_cast<uint32_t>(1 + out % 64);
    spec.resize_shorter = spec.output_width + (x % 64);
    static std::vector<uint8_t> pixels(64 * 64 * 3);
    if ((route & 16) != 0 && spec.resize_kernel == stoker::ResizeKernel::kPillow) {
      spec.gpu_decode = route & 32 ? stoker::GpuDecode::kFile : stoker::GpuDecode::kCut;
    }
    stoker::worker::ImagePipeline pipeline(spec, limits);
    if (spec.DecodesOnGpu()) {
      stoker::worker::CutSample cut;
      (void)pipeline.RunCut({jpeg.data(), jpeg.size()}, y, pixels.data(), &cut);
      if (cut.encoded) CheckCut(spec, {jpeg.data(), jpeg.size()}, y, cut, pixels.data(), pipeline.output_bytes(), limits);
      return 0;
    }
    (void)pipeline.Run({jpeg.data(), jpeg.size()}, y, pixels.data());
    return 0;
  }
  static stoker::worker::JpegRegionDecoder decoder(limits);
  int width = 0, height = 0;
  if (!decoder.ReadHeader(jpeg.data(), jpeg.size(), &width, &height).ok()) return 0;
  stoker::worker::CropRect crop;
  crop.x = width > 1 ? x % width : 0;
  crop.y = height > 1 ? y % height : 0;
  crop.width = 1 + w % (width - crop.x);
  crop.height = 1 + h % (height - crop.y);
  stoker::worker::RegionView view;
  (void)decoder.DecodeRegion(crop, out, out, &view);
  return 0;
}
