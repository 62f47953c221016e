// libFuzzer target: a JPEG through the worker's region decoder (worker/jpeg_decoder.h) with a crop and an output
// size taken from the input's last bytes, under tighter limits than a worker's so the fuzzer stays fast.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "worker/jpeg_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const uint16_t x = in.ConsumeIntegral<uint16_t>(), y = in.ConsumeIntegral<uint16_t>();
  const uint16_t w = in.ConsumeIntegral<uint16_t>(), h = in.ConsumeIntegral<uint16_t>();
  const int out = in.ConsumeIntegralInRange<int>(1, 256);
  const std::vector<uint8_t> jpeg = in.ConsumeRemainingBytes<uint8_t>();
  static stoker::JpegRegionDecoder decoder(stoker::JpegLimits{.max_pixels = uint64_t{4} << 20,
                                                              .max_scans = 64,
                                                              .max_memory_bytes = size_t{64} << 20,
                                                              .max_cpu_time = std::chrono::milliseconds(500)});
  int width = 0, height = 0;
  if (!decoder.ReadHeader(jpeg.data(), jpeg.size(), &width, &height).ok()) return 0;
  stoker::CropRect crop;
  crop.x = width > 1 ? x % width : 0;
  crop.y = height > 1 ? y % height : 0;
  crop.width = 1 + w % (width - crop.x);
  crop.height = 1 + h % (height - crop.y);
  stoker::RegionView view;
  (void)decoder.DecodeRegion(crop, out, out, &view);
  return 0;
}
