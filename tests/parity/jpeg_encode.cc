// jpeg_encode: encodes raw RGB pixels as a JPEG through libjpeg-turbo (datagen's EncodeJpeg), in the colour spaces
// Pillow cannot write, for torchvision_parity_test.py: YCCK above all (what Photoshop writes for CMYK), and CMYK.
//
//   jpeg_encode --width W --height H --colour-space ycbcr|cmyk|ycck [--quality Q] [--subsampled] [--progressive]
//               IN.rgb OUT.jpg
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/flags.h"
#include "datagen/synthetic_dataset.h"

namespace stoker {
namespace {

int Main(int argc, char** argv) {
  int64_t width = 0, height = 0, quality = 95;
  datagen::JpegEncodeOptions::ColourSpace colour_space = datagen::JpegEncodeOptions::ColourSpace::kYCbCr;
  bool subsampled = false, progressive = false;
  FlagSet flags("jpeg_encode --width W --height H --colour-space ycbcr|cmyk|ycck [...] IN.rgb OUT.jpg",
                "Raw RGB to a JPEG through libjpeg-turbo, in any of its colour spaces.");
  flags.AddInt("width", &width, "pixels per row of IN.rgb");
  flags.AddInt("height", &height, "rows of IN.rgb");
  flags.AddInt("quality", &quality, "JPEG quality, 1-100");
  flags.AddChoice("colour-space", {"ycbcr", "cmyk", "ycck"}, "ycbcr", [&](const std::string& word) {
    colour_space = word == "cmyk"   ? datagen::JpegEncodeOptions::ColourSpace::kCmyk
                   : word == "ycck" ? datagen::JpegEncodeOptions::ColourSpace::kYcck
                                    : datagen::JpegEncodeOptions::ColourSpace::kYCbCr;
    return true;
  }, "the JPEG's colour space");
  flags.AddBool("subsampled", &subsampled, "2x2 subsampling of the components a subsampling encoder makes large");
  flags.AddBool("progressive", &progressive, "libjpeg's usual progression instead of a baseline file");
  std::vector<std::string> files;
  if (Status s = flags.Parse(argc, argv, 1, &files); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 2;
  }
  datagen::JpegEncodeOptions options{.quality = static_cast<int>(quality), .chroma_444 = !subsampled,
                            .colour_space = colour_space};
  options.progression = progressive ? datagen::JpegEncodeOptions::Progression::kProgressive
                                    : datagen::JpegEncodeOptions::Progression::kBaseline;
  if (files.size() != 2 || width <= 0 || height <= 0) {
    std::fprintf(stderr, "jpeg_encode: --width, --height, IN.rgb and OUT.jpg are required\n");
    return 2;
  }
  std::ifstream in(files[0], std::ios::binary);
  const std::string rgb((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (rgb.size() != static_cast<size_t>(width) * height * 3) {
    std::fprintf(stderr, "jpeg_encode: %s has %zu bytes, not %lld x %lld x 3\n", files[0].c_str(), rgb.size(),
                 static_cast<long long>(width), static_cast<long long>(height));
    return 1;
  }
  auto jpeg = datagen::EncodeJpeg(reinterpret_cast<const uint8_t*>(rgb.data()), static_cast<int>(width),
                         static_cast<int>(height), options);
  if (!jpeg.ok()) {
    std::fprintf(stderr, "jpeg_encode: %s\n", jpeg.status().ToString().c_str());
    return 1;
  }
  std::ofstream(files[1], std::ios::binary).write(jpeg->data(), static_cast<std::streamsize>(jpeg->size()));
  return 0;
}

}  // namespace
}  // namespace stoker

int main(int argc, char** argv) { return stoker::Main(argc, argv); }
