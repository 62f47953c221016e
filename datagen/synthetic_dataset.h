// Synthetic ImageNet-like data for the demo, the tests and the benchmarks: images with smooth colour gradients,
// discs and pixel noise (so they compress like photographs, ~110-120 KB at quality 96), encoded as JPEG with
// libjpeg-turbo at quality 96 and 4:4:4 chroma (what most ImageNet training files are), 500x375 or 375x500.
// Everything is a deterministic function of the image index, so two runs write identical bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/env.h"
#include "stoker/status.h"

namespace stoker::datagen {

struct JpegEncodeOptions {
  int quality = 96;
  bool chroma_444 = true;  // false: 4:2:0
  // Baseline; libjpeg's usual progression (about ten scans); or every bit of every coefficient of every component
  // in a scan of its own (2,090 scans, each legitimate): the scan bomb the worker's limits refuse.
  enum class Progression { kBaseline, kProgressive, kEveryBit } progression = Progression::kBaseline;
  // The JPEG's colour space: YCbCr (what cameras write); CMYK or YCCK (what print workflows and Photoshop write),
  // from the RGB pixels as Adobe stores CMYK (inverted, K = 255 - max(R, G, B)), so that decoding gives them back.
  // chroma_444 = false subsamples the first and last components (CMYK) or the two chroma ones (YCCK) 2x2.
  // kGrey stores the RGB pixels' luma only.
  enum class ColourSpace { kYCbCr, kCmyk, kYcck, kGrey } colour_space = ColourSpace::kYCbCr;
  bool arithmetic = false;  // arithmetic entropy coding instead of Huffman (rare in the wild; nvJPEG lacks it)
  // Above 0: every component gets these sampling factors: 4:4:4 with MCUs larger than 8x8, as some encoders write.
  int every_component_h = 0;
  int every_component_v = 0;
};

// Encodes interleaved RGB pixels as a JPEG.
StatusOr<std::string> EncodeJpeg(const uint8_t* rgb, int width, int height, const JpegEncodeOptions& options);

// The RGB pixels of synthetic image `index` (size chosen from the index: 2 of 3 are 500x375, 1 of 3 375x500).
std::vector<uint8_t> SyntheticImage(uint64_t index, int* width, int* height, double noise_sigma = 3.0);

// The JPEG file of synthetic image `index`.
StatusOr<std::string> SyntheticJpeg(uint64_t index, const JpegEncodeOptions& options = {});

struct GenerateOptions {
  uint64_t images = 2048;
  uint32_t per_shard = 256;
  uint32_t classes = 10;
  uint32_t threads = 0;  // 0: one per core
  JpegEncodeOptions jpeg;
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// Writes shard-000000.tar, shard-000001.tar, ... under `directory`: members %08d.jpg and %08d.cls (label =
// index % classes). Shards already present with the expected name are rewritten.
Status GenerateTarDataset(Env& env, const std::string& directory, const GenerateOptions& options);

}  // namespace stoker::datagen
