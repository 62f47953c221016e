// libFuzzer target: a JPEG through the worker's region decoder (worker/jpeg_decoder.h) with a crop and an output
// size taken from the input's last bytes, under tighter limits than a worker's so the fuzzer stays fast; or, by
// one more byte, through the whole image pipeline (train or eval, the Pillow or the OpenCV resize kernel) into a
// small output, which also runs the resampler's taps on whatever size the header claims; or, for a job that decodes
// on the GPU (bit 4; bit 5 the file where it can go as it is), through the lossless cut (worker/jpeg_cutter.h)
// and, where it refuses, the CPU path.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "worker/image_pipeline.h"
#include "worker/jpeg_decoder.h"

// What a client relies on of a JPEG sent for the GPU: it fits the slot, it is a JPEG, and every tap its box's
// resize reads lies inside it. A breach traps (a finding).
static void CheckCut(const stoker::PipelineSpec& spec, const stoker::worker::CutSample& cut, const uint8_t* out,
                     size_t capacity, const stoker::worker::JpegLimits& limits) {
  if (cut.bytes == 0 || cut.bytes > capacity) __builtin_trap();
  stoker::worker::JpegRegionDecoder decoder(limits);
  int width = 0, height = 0;
  if (!decoder.ReadHeader(out, cut.bytes, &width, &height).ok()) __builtin_trap();
  stoker::worker::ResampleAxis ax, ay;
  stoker::worker::PlanResizeAxes(spec, {cut.x, cut.y, cut.width, cut.height}, 1, width, height, &ax, &ay);
  if (ax.lowest < 0 || ay.lowest < 0 || ax.highest > width || ay.highest > height) __builtin_trap();
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
      if (cut.encoded) CheckCut(spec, cut, pixels.data(), pipeline.output_bytes(), limits);
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
