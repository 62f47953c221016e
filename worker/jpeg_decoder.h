// JpegRegionDecoder: decodes only the part of a JPEG that a crop needs, through libjpeg-turbo's libjpeg API.
//
// Three savings over decoding the whole image and cropping afterwards:
//  - DCT-domain scaling: when the crop is at least 2x (4x, 8x) the output size on both sides, the IDCT produces
//    the image at 1/2 (1/4, 1/8) size directly, which is much cheaper than full-size IDCT plus a resize;
//  - jpeg_crop_scanline: IDCT, upsampling and colour conversion run only for the iMCU columns the crop touches;
//  - jpeg_skip_scanlines / early abort: rows above the crop skip IDCT and colour conversion, rows below it are
//    never decoded at all.
// Entropy decoding of the rows above the crop still runs: JPEG's Huffman stream cannot be entered mid-way.
//
// Errors: libjpeg reports fatal errors through a longjmp that we catch here; the message is libjpeg's own.
// Corrupt-data warnings (truncation, bad Huffman codes) are treated as errors so a damaged image is quarantined
// rather than delivered with grey blocks; the one benign warning (extraneous bytes before a marker) is ignored.
//
// Thread safety: none. One decoder per thread; it keeps its buffers between images to avoid allocation.
#pragma once

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "common/status.h"
#include "worker/crop_geometry.h"

namespace stoker {

// Pixels of a decoded region: RGB, `stride` bytes per row. Valid until the decoder's next call.
struct RegionView {
  const uint8_t* data = nullptr;
  size_t stride = 0;
  int width = 0;
  int height = 0;
  int scale_denominator = 1;  // 1, 2, 4 or 8: the region is the crop at this reduction
};

class JpegRegionDecoder {
 public:
  JpegRegionDecoder();
  ~JpegRegionDecoder();
  JpegRegionDecoder(const JpegRegionDecoder&) = delete;
  JpegRegionDecoder& operator=(const JpegRegionDecoder&) = delete;

  // Parses the headers of `data` (kept by reference until DecodeRegion or the next ReadHeader returns).
  // DataLoss with libjpeg's message for a file that is not a JPEG or is damaged in its headers;
  // Unimplemented for colour spaces libjpeg-turbo cannot convert to RGB (CMYK, YCCK).
  Status ReadHeader(const uint8_t* data, size_t size, int* width, int* height);

  // Decodes `crop` (source pixels, within the image) after ReadHeader, at the largest reduction 1/d (d = 2, 4, 8)
  // that keeps the region at least min_width x min_height, or at full size.
  Status DecodeRegion(const CropRect& crop, int min_width, int min_height, RegionView* out);

  // Decodes the whole image at full size (the decode-only baseline in benchmarks).
  Status DecodeFull(RegionView* out);

  // Images with more pixels than this are refused at the header (a few hundred bytes of JPEG can claim
  // 65000x65000 and make libjpeg allocate gigabytes). ImageNet's largest are about 10 MP.
  static constexpr uint64_t kDefaultMaxPixels = uint64_t{64} << 20;
  void set_max_pixels(uint64_t max_pixels) { max_pixels_ = max_pixels; }

 private:
  struct ErrorManager {
    jpeg_error_mgr pub;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    bool corrupt_warning;
  };
  static void OnError(j_common_ptr cinfo);
  static void OnMessage(j_common_ptr cinfo, int level);
  Status Failure(const char* stage);

  jpeg_decompress_struct cinfo_;
  ErrorManager errors_;
  bool header_read_ = false;
  uint64_t max_pixels_ = kDefaultMaxPixels;
  std::vector<uint8_t> scratch_;
  std::vector<JSAMPROW> rows_;
};

// Chooses the DCT reduction for a crop: the largest d in {1, 2, 4, 8} with crop >= d * min on both sides.
int ChooseScaleDenominator(const CropRect& crop, int min_width, int min_height);

}  // namespace stoker
