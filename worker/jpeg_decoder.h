// JpegRegionDecoder: decodes only the part of a JPEG that a crop needs, through libjpeg-turbo's libjpeg API.
//
// Three savings over decoding the whole image and cropping afterwards:
//  - DCT-domain scaling: when the crop is at least 2x (4x, 8x) the output size on both sides, the IDCT produces
//    the image at 1/2 (1/4, 1/8) size directly, which is much cheaper than full-size IDCT plus a resize;
//  - jpeg_crop_scanline: IDCT, upsampling and colour conversion run only for the iMCU columns the crop touches;
//  - jpeg_skip_scanlines / early abort: rows above the crop skip IDCT and colour conversion, rows below it are
//    never decoded at all.
// Entropy decoding of the rows above the crop still runs: JPEG's Huffman stream cannot be entered mid-way.
// CMYK and YCCK JPEGs take the same path: libjpeg-turbo decodes them to CMYK, and each decoded row is converted to
// RGB the way Pillow converts a CMYK JPEG, so their pixels match torchvision's PIL path as other JPEGs' do.
//
// Errors: libjpeg reports fatal errors through a longjmp that we catch here; the message is libjpeg's own.
// Corrupt-data warnings (truncation, bad Huffman codes, an inconsistent progression) end the decode at once, so a
// damaged image is quarantined rather than delivered with grey blocks or decoded further; the one benign warning
// (extraneous bytes before a marker) is ignored.
//
// Limits (JpegLimits), so that no image can hold a worker thread or its memory: pixels, checked at the header (a
// few hundred bytes can claim 65000x65000); progressive scans (a 691 KB image of 3,000 duplicated scans once held a
// thread for 101 s); libjpeg's working memory (a 64 MP progressive image needs ~200 MB of coefficients); and CPU
// time per image, in the decoding thread's own CPU clock so a busy machine does not trip it. Scans and time are
// checked by libjpeg's progress monitor, which it calls for every row group of every pass. A limit is
// ResourceExhausted, so the pipeline can say "decode_limit" rather than "decode_error".
//
// Thread safety: none. One decoder per thread; it keeps its buffers between images to avoid allocation.
#pragma once

#include <chrono>
#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "stoker/status.h"
#include "worker/crop_geometry.h"

namespace stoker::worker {

// Pixels of a decoded region: RGB, rows `stride` bytes apart (at least 3 x width). Valid until the decoder's next call.
struct RegionView {
  const uint8_t* data = nullptr;
  size_t stride = 0;
  int width = 0;
  int height = 0;
  int scale_denominator = 1;  // 1, 2, 4 or 8: the region is the crop at this reduction
};

struct JpegLimits {
  // ImageNet's largest are about 10 MP.
  uint64_t max_pixels = uint64_t{64} << 20;
  // Progressive JPEGs have about ten scans, 190 at the very most without repeating one (a scan per coefficient and
  // component); repeated refinement scans are a bomb.
  int max_scans = 200;
  // libjpeg's memory for one image, its whole-image coefficient buffers above all (a progressive 10 MP 4:4:4 image
  // needs 60 MB).
  size_t max_memory_bytes = size_t{128} << 20;
  // The decoding thread's CPU time for one image (a 10 MP baseline image takes ~0.1 s).
  std::chrono::nanoseconds max_cpu_time = std::chrono::seconds(2);
};

class JpegRegionDecoder {
 public:
  explicit JpegRegionDecoder(const JpegLimits& limits = {});
  ~JpegRegionDecoder();
  JpegRegionDecoder(const JpegRegionDecoder&) = delete;
  JpegRegionDecoder& operator=(const JpegRegionDecoder&) = delete;

  // Parses the headers of `data` (kept by reference until DecodeRegion or the next ReadHeader returns).
  // DataLoss with libjpeg's message for a file that is not a JPEG or is damaged in its headers.
  Status ReadHeader(const uint8_t* data, size_t size, int* width, int* height);

  // Decodes `crop` (source pixels, within the image) after ReadHeader, at the largest reduction 1/d (d = 2, 4, 8)
  // that keeps the region at least min_width x min_height, or at full size.
  Status DecodeRegion(const CropRect& crop, int min_width, int min_height, RegionView* out);

  // Decodes columns [x0, x1) and rows [y0, y1) of the image reduced to 1/d (d = 1, 2, 4 or 8; the reduced image is
  // ScaledSize(d)) after ReadHeader. The region's pixels are exactly those of the whole reduced image.
  Status DecodeScaled(int d, int x0, int y0, int x1, int y1, RegionView* out);

  // The size of the image reduced to 1/d, after ReadHeader: ceil(width / d) x ceil(height / d).
  void ScaledSize(int d, int* width, int* height) const;

  // Decodes the whole image at full size (the decode-only baseline in benchmarks).
  Status DecodeFull(RegionView* out);

  void set_max_pixels(uint64_t max_pixels) { limits_.max_pixels = max_pixels; }

 private:
  struct ErrorManager {
    jpeg_error_mgr pub;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    bool limit;  // the failure is one of our limits, not damage
  };
  struct Progress {
    jpeg_progress_mgr pub;
    JpegRegionDecoder* decoder;
  };
  static void OnError(j_common_ptr cinfo);
  static void OnMessage(j_common_ptr cinfo, int level);
  static void OnProgress(j_common_ptr cinfo);
  void StartClock();
  Status Decode(int d, int x0, int y0, int x1, int y1, int margin, RegionView* out);
  Status Failure(const char* stage);

  jpeg_decompress_struct cinfo_;
  ErrorManager errors_;
  Progress progress_;
  JpegLimits limits_;
  int64_t cpu_deadline_ns_ = 0;   // the thread CPU clock's reading past which this image is over budget
  int64_t wall_deadline_ns_ = 0;  // the monotonic clock's reading before which it cannot be
  bool header_read_ = false;
  std::vector<uint8_t> scratch_;
  std::vector<JSAMPROW> rows_;
};

// Converts `width` CMYK pixels as libjpeg-turbo outputs them (CMYK and YCCK JPEGs) to RGB in place, as Pillow does
// for a JPEG: the first 3 x width bytes of `row` become RGB.
void CmykToRgbInPlace(uint8_t* row, int width);

// Chooses the DCT reduction for a crop: the largest d in {1, 2, 4, 8} with crop >= d * min on both sides.
int ChooseScaleDenominator(const CropRect& crop, int min_width, int min_height);

}  // namespace stoker::worker
