// JpegCutter (jpeg_cutter.h): a JPEG for the GPU, as its file or cut losslessly by TurboJPEG.
#include "worker/jpeg_cutter.h"

#include <turbojpeg.h>

#include <cstring>
#include <string>

namespace stoker::worker {
namespace {

// Warnings (a truncated or damaged stream the decoder would fill with grey) are errors here: the CPU path decides
// what such an image becomes. Progressive inputs are held to the decoder's scan limit.
constexpr int kFlags = TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS;
// The largest scratch a cut may ask for (tjBufSize of the cut: about its pixels' bytes), so that one huge crop of
// a huge image cannot hold a pipeline thread's memory; such a cut could not fit an output's pixels anyway unless
// compressed more than 100 to 1.
constexpr unsigned long kMaxScratchBytes = 64ul << 20;
// Scratch beyond this is given back after the cut that needed it (a 224 x 224 output's cuts need well under 1 MiB).
constexpr size_t kKeptScratchBytes = 4u << 20;
// The largest MCU a JPEG can have: sampling factors go up to 4, so 4 x 8 pixels.
constexpr int kLargestMcu = 32;

std::string LibraryError(void* handle) { return std::string("TurboJPEG: ") + tjGetErrorStr2(handle); }

// Start-of-scan markers: in entropy-coded data a 0xFF byte is followed by a stuffed 0x00 or a restart marker, so
// every FF DA starts a scan (an EXIF thumbnail's count too, which errs on the safe side).
int CountScans(std::span<const uint8_t> jpeg) {
  int scans = 0;
  for (const uint8_t* p = jpeg.data(), *end = jpeg.data() + jpeg.size(); p + 1 < end; ++p) {
    p = static_cast<const uint8_t*>(std::memchr(p, 0xFF, static_cast<size_t>(end - p - 1)));
    if (p == nullptr) break;
    if (p[1] == 0xDA) ++scans;
  }
  return scans;
}

// The whole image's DCT coefficients, which the transform holds: 64 two-byte coefficients per 8x8 block of each
// component, the chroma blocks fewer by the subsampling.
uint64_t CoefficientBytes(int width, int height, int subsamp, int colorspace) {
  const uint64_t luma_blocks = ((uint64_t(width) + 7) / 8) * ((uint64_t(height) + 7) / 8);
  if (colorspace == TJCS_GRAY) return luma_blocks * 128;
  const uint64_t chroma_blocks = luma_blocks * 64 / (uint64_t(tjMCUWidth[subsamp]) * tjMCUHeight[subsamp]);
  return (luma_blocks + 2 * chroma_blocks) * 128;
}

// Whether the frame is Huffman-coded with 8-bit samples (SOF0 baseline, SOF1 extended, SOF2 progressive): what
// every nvJPEG backend decodes. Walks the marker segments up to the first frame header.
bool HuffmanEightBit(std::span<const uint8_t> jpeg) {
  size_t at = 2;  // after SOI
  while (at + 4 <= jpeg.size()) {
    if (jpeg[at] != 0xFF) return false;
    const uint8_t marker = jpeg[at + 1];
    if (marker == 0xFF) {  // fill byte
      ++at;
      continue;
    }
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) {
      return false;  // TEM, RSTn or SOI before the frame: libjpeg steps over them, nothing says nvJPEG does
    }
    if (marker == 0xC0 || marker == 0xC1 || marker == 0xC2) return at + 4 < jpeg.size() && jpeg[at + 4] == 8;
    if ((marker >= 0xC3 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) || marker == 0xDA) {
      return false;  // lossless, hierarchical or arithmetic frames; or a scan before any frame
    }
    at += 2 + (size_t{jpeg[at + 2]} << 8 | jpeg[at + 3]);
  }
  return false;
}

}  // namespace

JpegCutter::JpegCutter(const JpegLimits& limits) : limits_(limits), handle_(tjInitTransform()) {}

JpegCutter::~JpegCutter() {
  if (handle_ != nullptr) tjDestroy(handle_);
}

StatusOr<JpegHeader> JpegCutter::ReadHeader(std::span<const uint8_t> jpeg) {
  if (handle_ == nullptr) return InternalError("TurboJPEG could not make a transform handle");
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(handle_, jpeg.data(), jpeg.size(), &width, &height, &subsamp, &colorspace) != 0) {
    return InvalidArgumentError(LibraryError(handle_));
  }
  if ((colorspace != TJCS_YCbCr && colorspace != TJCS_GRAY) || subsamp < 0 || subsamp >= TJ_NUMSAMP) {
    return FailedPreconditionError("a JPEG of colour space " + std::to_string(colorspace) + ", subsampling " +
                                   std::to_string(subsamp) + ": only YCbCr and greyscale go to the GPU");
  }
  if (CoefficientBytes(width, height, subsamp, colorspace) > limits_.max_memory_bytes ||
      uint64_t(width) * height > limits_.max_pixels) {
    return ResourceExhaustedError("a " + std::to_string(width) + "x" + std::to_string(height) +
                                  " image's coefficients are more than the worker gives one image");
  }
  if (CountScans(jpeg) > limits_.max_scans) {
    return ResourceExhaustedError("more than " + std::to_string(limits_.max_scans) + " scans");
  }
  return JpegHeader{width, height, subsamp, colorspace};
}

StatusOr<JpegCut> JpegCutter::Prepare(std::span<const uint8_t> jpeg, const JpegHeader& header,
                                      const std::function<CropRect()>& region_of, GpuDecode mode, uint8_t* out,
                                      size_t capacity) {
  if (mode == GpuDecode::kFile && jpeg.size() <= capacity && uint64_t(header.width) * header.height <= kMaxGpuPixels &&
      HuffmanEightBit(jpeg)) {
    std::memcpy(out, jpeg.data(), jpeg.size());
    return JpegCut{jpeg.size(), true, 0, 0, header.width, header.height};
  }
  const CropRect region = region_of();
  if (region.width <= 0 || region.height <= 0 || region.x < 0 || region.y < 0 ||
      region.x + region.width > header.width || region.y + region.height > header.height) {
    return InvalidArgumentError("the region to cut is not inside the " + std::to_string(header.width) + "x" +
                                std::to_string(header.height) + " image");
  }
  return Cut(jpeg, region, header, out, capacity);
}

StatusOr<JpegCut> JpegCutter::Prepare(std::span<const uint8_t> jpeg, const CropRect& region, GpuDecode mode,
                                      uint8_t* out, size_t capacity) {
  STOKER_ASSIGN_OR_RETURN(JpegHeader header, ReadHeader(jpeg));
  return Prepare(jpeg, header, [&] { return region; }, mode, out, capacity);
}

StatusOr<JpegCut> JpegCutter::Cut(std::span<const uint8_t> jpeg, const CropRect& region, const JpegHeader& header,
                                  uint8_t* out, size_t capacity) {
  // Where the cut should start, by the subsampling's MCU. An image whose components' sampling factors are larger
  // than its subsampling needs (4:4:4 written 2x1 on every component) has larger MCUs, and the transform then starts
  // further up and left: the cut's size is read back from its own header below, its origin derived from the
  // bottom-right corner, which stays where the region ends.
  const int x = region.x - region.x % tjMCUWidth[header.subsamp];
  const int y = region.y - region.y % tjMCUHeight[header.subsamp];
  const int width = region.x + region.width - x, height = region.y + region.height - y;
  if (uint64_t(width) * height > kMaxGpuPixels) {
    return ResourceExhaustedError("a cut of " + std::to_string(width) + "x" + std::to_string(height) +
                                  " pixels is more than a GPU decodes for one image");
  }
  // The cut's bytes, guessed from the file's bytes per pixel: one far larger than the output's pixels is not tried.
  const double guess = double(jpeg.size()) * width * height / (double(header.width) * header.height);
  if (guess > 2.0 * double(capacity)) {
    return ResourceExhaustedError("a cut of " + std::to_string(width) + "x" + std::to_string(height) + " pixels of a " +
                                  std::to_string(jpeg.size()) + "-byte file would be far larger than the output's " +
                                  std::to_string(capacity) + " bytes");
  }
  // TurboJPEG 2.1's own buffer handling cannot be used safely here: given a buffer it may not grow, it assumes
  // tjBufSize() bytes of it for the region asked for; given one it may grow, it frees and reuses its own
  // allocations across calls. So the cut goes into scratch of at least that (sized, with room to spare, for the
  // largest cut the transform can make: its origin moved up and left by less than the largest MCU, 32 pixels); a
  // cut that outgrows the assumed size fails (JERR_BUFFER_SIZE) rather than writing past it. It is copied out when
  // it fits.
  const unsigned long bound = tjBufSize(width + kLargestMcu, height + kLargestMcu, header.subsamp);
  const uint64_t memory = CoefficientBytes(header.width, header.height, header.subsamp, header.colorspace) +
                          CoefficientBytes(width + kLargestMcu, height + kLargestMcu, header.subsamp, header.colorspace) +
                          bound;
  if (bound == static_cast<unsigned long>(-1) || bound > kMaxScratchBytes || memory > limits_.max_memory_bytes) {
    return ResourceExhaustedError("a cut of " + std::to_string(width) + "x" + std::to_string(height) +
                                  " pixels needs more memory than the worker gives one image");
  }
  if (scratch_.size() < bound) scratch_.resize(bound);
  StatusOr<JpegCut> cut = Transform(jpeg, x, y, width, height);
  if (cut.ok() && (cut->x < 0 || cut->x > region.x || cut->y < 0 || cut->y > region.y)) {
    cut = InternalError("the transform's cut does not hold the region");
  } else if (cut.ok() && cut->bytes > capacity) {
    cut = ResourceExhaustedError("the cut JPEG (" + std::to_string(cut->bytes) + " bytes) is larger than the output's " +
                                 std::to_string(capacity));
  } else if (cut.ok()) {
    std::memcpy(out, scratch_.data(), cut->bytes);
  }
  if (scratch_.size() > kKeptScratchBytes) std::vector<unsigned char>().swap(scratch_);  // after a rare large cut
  return cut;
}

StatusOr<JpegCut> JpegCutter::Transform(std::span<const uint8_t> jpeg, int x, int y, int width, int height) {
  tjtransform transform{};
  transform.r = tjregion{x, y, width, height};
  transform.op = TJXOP_NONE;
  transform.options = TJXOPT_CROP | TJXOPT_COPYNONE;
  unsigned char* dst = scratch_.data();
  unsigned long dst_size = scratch_.size();
  if (tjTransform(handle_, jpeg.data(), jpeg.size(), 1, &dst, &dst_size, &transform, kFlags | TJFLAG_NOREALLOC) != 0) {
    return InvalidArgumentError(LibraryError(handle_));
  }
  if (dst != scratch_.data() || dst_size > scratch_.size()) {
    return InternalError("TurboJPEG wrote outside the cutter's scratch");
  }
  JpegCut cut;
  int out_subsamp = 0, out_colorspace = 0;
  if (tjDecompressHeader3(handle_, dst, dst_size, &cut.width, &cut.height, &out_subsamp, &out_colorspace) != 0) {
    return InternalError("the cut's own header does not read: " + LibraryError(handle_));
  }
  cut.bytes = dst_size;
  cut.x = x + width - cut.width;  // the bottom-right corner stays
  cut.y = y + height - cut.height;
  return cut;
}

}  // namespace stoker::worker
