// JpegCutter: what a worker sends a client that decodes on its GPU (PipelineSpec::gpu_decode) for one JPEG: the
// file as it is, or the JPEG cut losslessly to the region its resize reads.
//
// The file (GpuDecode::kFile) costs the worker nothing beyond reading the header; it is sent when nvJPEG can take
// it as it is (8-bit Huffman-coded YCbCr or greyscale: baseline, which its hardware decoder takes, or progressive,
// which its GPU-hybrid backend does) and it fits. Otherwise, and always
// for GpuDecode::kCut, the cut: libjpeg-turbo's TurboJPEG transform (tjTransform with TJXOPT_CROP), which copies
// the region's DCT blocks and entropy-codes them again, with no pixel decoded. Its top-left corner moves up and
// left to the nearest MCU boundary (8 or 16 pixels; up to 32 where the sampling factors are larger than the
// subsampling needs); its bottom-right corner stays. A cut is always a baseline
// Huffman JPEG without markers (no EXIF, no ICC), whatever the input's coding (baseline, progressive, arithmetic).
// The transform entropy-decodes the whole image, so a cut costs about what decoding the crop the CPU way does
// (bench/RESULTS.md, cut_bench); it saves bytes on the wire, not worker time.
//
// Refused (the caller makes the sample the CPU way instead): anything but 8-bit YCbCr or greyscale JPEG (CMYK,
// YCCK, RGB-coded, 12-bit), damage, more than `capacity` bytes, more than kMaxGpuPixels to decode, and whatever else
// the library refuses. The transform reads every coefficient of the image, which TurboJPEG gives no memory limit:
// an image whose coefficients (the source's and the cut's) and scratch would take more than the JpegLimits' memory,
// or with more scans than they allow, is neither sent nor cut, and goes the CPU way (which decodes it within its
// own limits, or refuses it as decode_limit). A cut whose bytes, guessed from the file's bytes per pixel, would be
// far more than `capacity` is not tried. There is no CPU-time limit on the transform itself (a 40 MP progressive
// image within the scan limit takes about a second).
//
// Thread safety: none; one cutter per pipeline thread (it owns a TurboJPEG handle and scratch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "stoker/job_spec.h"
#include "stoker/status.h"
#include "worker/crop_geometry.h"
#include "worker/jpeg_decoder.h"

namespace stoker::worker {

// The most pixels a JPEG sent to a GPU may decode to (48 MiB of RGB): the client's decode buffers stay bounded.
constexpr uint64_t kMaxGpuPixels = uint64_t{4096} * 4096;

struct JpegHeader {
  int width = 0, height = 0;
  int subsamp = 0, colorspace = 0;  // TurboJPEG's TJSAMP_* and TJCS_*
};

struct JpegCut {
  size_t bytes = 0;    // of the JPEG written at `out`
  bool whole = false;  // the file as it is (x = y = 0, the image's size); else a cut
  int x = 0;           // where it starts in the source image's pixels (MCU-aligned)
  int y = 0;
  int width = 0;       // its size in pixels
  int height = 0;
};

class JpegCutter {
 public:
  explicit JpegCutter(const JpegLimits& limits = {});
  ~JpegCutter();
  JpegCutter(const JpegCutter&) = delete;
  JpegCutter& operator=(const JpegCutter&) = delete;

  // Writes into out[0, capacity) the JPEG to send for `region` (source pixels, within the image): with kFile the
  // file where it can go as it is, else (and with kCut) the smallest MCU-aligned cut holding `region`.
  // FailedPrecondition for a format neither takes, ResourceExhausted over a limit or `capacity`, InvalidArgument
  // for damage or anything else the library refuses; `out` is untouched then.
  StatusOr<JpegCut> Prepare(std::span<const uint8_t> jpeg, const CropRect& region, GpuDecode mode, uint8_t* out,
                            size_t capacity);
  // The same in two steps, so that a caller learns the image's size first and computes the region only when it is
  // cut: ReadHeader (the format and limit refusals), then Prepare with `region_of`, called at most once.
  StatusOr<JpegHeader> ReadHeader(std::span<const uint8_t> jpeg);
  StatusOr<JpegCut> Prepare(std::span<const uint8_t> jpeg, const JpegHeader& header,
                            const std::function<CropRect()>& region_of, GpuDecode mode, uint8_t* out,
                            size_t capacity);

 private:
  StatusOr<JpegCut> Cut(std::span<const uint8_t> jpeg, const CropRect& region, const JpegHeader& header,
                        uint8_t* out, size_t capacity);
  // tjTransform of [x, x + width) x [y, y + height) into scratch_; the cut's size read from its own header.
  StatusOr<JpegCut> Transform(std::span<const uint8_t> jpeg, int x, int y, int width, int height);

  JpegLimits limits_;
  void* handle_ = nullptr;  // tjhandle
  std::vector<unsigned char> scratch_;  // the cut as TurboJPEG writes it (see Cut); a large one is given back
};

}  // namespace stoker::worker
