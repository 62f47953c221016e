// JpegCutter: a JPEG cut losslessly to a region, for jobs that decode on the client's GPU (PipelineSpec::gpu_decode).
//
// The cut is libjpeg-turbo's TurboJPEG transform (tjTransform with TJXOPT_CROP): the region's DCT blocks are copied
// and entropy-coded again, with no pixel decoded. Its top-left corner moves up and left to the nearest MCU boundary
// (8 or 16 pixels), so the cut holds the region and at most one MCU less one pixel more on those sides; the
// bottom-right corner stays where it is. The output is always a baseline Huffman JPEG without markers (no EXIF, no
// ICC), whatever the input's coding (baseline, progressive or arithmetic), which every nvJPEG backend decodes.
//
// Refused (the caller makes the sample the CPU way instead): anything but 8-bit YCbCr or greyscale JPEG (CMYK,
// YCCK, RGB-coded, 12-bit), damage, a cut larger than `capacity`, and whatever else the library refuses. The
// transform reads every coefficient of the image, which TurboJPEG gives no memory limit: an image whose
// coefficients would take more than the JpegLimits' memory, or with more scans than they allow, is not cut (the
// CPU path then applies the same limits and refuses it as decode_limit).
//
// Thread safety: none; one cutter per pipeline thread (it owns a TurboJPEG handle).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "stoker/status.h"
#include "worker/crop_geometry.h"
#include "worker/jpeg_decoder.h"

namespace stoker::worker {

struct JpegCut {
  size_t bytes = 0;  // of the cut JPEG, written at `out`
  int x = 0;         // where the cut starts in the source image's pixels (MCU-aligned)
  int y = 0;
  int width = 0;     // the cut's size in pixels
  int height = 0;
};

class JpegCutter {
 public:
  explicit JpegCutter(const JpegLimits& limits = {});
  ~JpegCutter();
  JpegCutter(const JpegCutter&) = delete;
  JpegCutter& operator=(const JpegCutter&) = delete;

  // Cuts `jpeg` to the smallest MCU-aligned region holding `region` (source pixels, within the image) into
  // out[0, capacity). FailedPrecondition for a format the cut does not take, ResourceExhausted when the cut would not
  // fit, InvalidArgument for damage or anything else the library refuses; `out` is untouched then.
  StatusOr<JpegCut> Cut(std::span<const uint8_t> jpeg, const CropRect& region, uint8_t* out, size_t capacity);

 private:
  JpegLimits limits_;
  void* handle_ = nullptr;  // tjhandle
  std::vector<unsigned char> scratch_;  // the cut as TurboJPEG writes it (see Cut)
};

}  // namespace stoker::worker
