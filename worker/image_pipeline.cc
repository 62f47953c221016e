// ImagePipeline (image_pipeline.h): decode the crop region, resize straight into the batch slot, flip.
#include "worker/image_pipeline.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string_view>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#if STOKER_WITH_IMGCODECS
#include <opencv2/imgcodecs.hpp>
#endif

namespace stoker::worker {
namespace {

using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

bool LooksLikeJpeg(std::span<const uint8_t> b) { return b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF; }

#if STOKER_WITH_IMGCODECS
bool StartsWith(std::span<const uint8_t> b, std::string_view prefix, size_t at = 0) {
  return b.size() >= at + prefix.size() && std::memcmp(b.data() + at, prefix.data(), prefix.size()) == 0;
}

// The formats `stoker index` takes besides JPEG (png, webp, bmp, tif/tiff, ppm/pgm/pbm, jp2), by their signatures.
// Only these reach OpenCV's imdecode: it gives the bytes to the first of its decoders whose own signature check
// passes, and Debian's build has decoders never meant for untrusted bytes (GDCM, for DICOM, failed an assertion
// and aborted the process on 135 bytes; the jpeg fuzz target found it). Every decoder checks its signature at the
// start of the bytes except GDCM, which looks for "DICM" after a 128-byte preamble: a valid-looking start with
// that behind it went to GDCM too, so it is refused as well.
bool IsAcceptedOtherFormat(std::span<const uint8_t> b) {
  using namespace std::string_view_literals;
  if (StartsWith(b, "DICM"sv, 128)) return false;
  return StartsWith(b, "\x89PNG\r\n\x1a\n"sv) || (StartsWith(b, "RIFF"sv) && StartsWith(b, "WEBP"sv, 8)) ||
         StartsWith(b, "BM"sv) || StartsWith(b, "II*\0"sv) || StartsWith(b, "MM\0*"sv) ||
         (b.size() >= 3 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6' && std::isspace(b[2])) ||
         StartsWith(b, "\0\0\0\x0cjP  \r\n\x87\n"sv) || StartsWith(b, "\xff\x4f\xff\x51"sv);
}
#endif

}  // namespace

void FlipHorizontalInPlace(uint8_t* pixels, int width, int height) {
  for (int y = 0; y < height; ++y) {
    uint8_t* row = pixels + static_cast<size_t>(y) * width * 3;
    for (int left = 0, right = width - 1; left < right; ++left, --right) {
      uint8_t* a = row + left * 3;
      uint8_t* b = row + right * 3;
      std::swap(a[0], b[0]);
      std::swap(a[1], b[1]);
      std::swap(a[2], b[2]);
    }
  }
}

ImagePipeline::ImagePipeline(const PipelineSpec& spec, const JpegLimits& limits)
    : spec_(spec), out_bytes_(size_t{spec.output_height} * spec.output_width * 3), jpeg_(limits), cutter_(limits) {}

namespace {

// A JpegLimits refusal reads "decode_limit" (the image asked for more than a worker gives one image); damage
// reads "decode_error".
SampleOutcome Refused(const Status& status) {
  return {false, status.code() == StatusCode::kResourceExhausted ? "decode_limit" : "decode_error",
          status.message()};
}

}  // namespace

bool ImagePipeline::SupportsNonJpeg() { return STOKER_WITH_IMGCODECS != 0; }

SampleOutcome ImagePipeline::Run(std::span<const uint8_t> encoded, uint64_t sample_seed, uint8_t* out) {
  SampleOutcome outcome;
  try {
    outcome = LooksLikeJpeg(encoded) ? RunJpeg(encoded, sample_seed, out) : RunOther(encoded, sample_seed, out);
  } catch (const cv::Exception& e) {
    // OpenCV's own size limits (OPENCV_IO_MAX_IMAGE_PIXELS and friends, which stoker-worker sets to its
    // --max-image-megapixels) are a limit, like the JPEG decoder's; anything else is damage.
    const bool limit = std::string_view(e.what()).find("CV_IO_MAX_IMAGE") != std::string_view::npos;
    outcome = {false, limit ? "decode_limit" : "decode_error", std::string("OpenCV: ") + e.what()};
  } catch (const std::bad_alloc&) {
    outcome = {false, "decode_error", "out of memory decoding the image"};
  }
  if (!outcome.ok) std::memset(out, 0, out_bytes_);
  return outcome;
}

namespace {

// torchvision's Resize(shorter) output size: the shorter side becomes `shorter`, the longer int(shorter * long /
// short).
void ResizedSize(int width, int height, uint32_t shorter, int* resized_w, int* resized_h) {
  if (width <= height) {
    *resized_w = static_cast<int>(shorter);
    *resized_h = static_cast<int>(std::floor(static_cast<double>(shorter) * height / width));
  } else {
    *resized_h = static_cast<int>(shorter);
    *resized_w = static_cast<int>(std::floor(static_cast<double>(shorter) * width / height));
  }
}

}  // namespace

// Train resizes the crop [x, x + w) x [y, y + h) to the output, its taps inside the crop, as torchvision's
// resized_crop (crop, then resize) does. Eval resizes the whole image to Resize(shorter)'s size and computes only
// the outputs CenterCrop keeps: top and left are int(round((resized - output) / 2)). When the image is decoded at
// 1/d the same spans are taken in reduced pixels (fractional), so the output is close to, not equal to, Pillow's.
void PlanResizeAxes(const PipelineSpec& spec, const CropRect& box, int d, int src_width, int src_height,
                    ResampleAxis* ax, ResampleAxis* ay) {
  const int out_w = static_cast<int>(spec.output_width);
  const int out_h = static_cast<int>(spec.output_height);
  const double x0 = static_cast<double>(box.x) / d, x1 = static_cast<double>(box.x + box.width) / d;
  const double y0 = static_cast<double>(box.y) / d, y1 = static_cast<double>(box.y + box.height) / d;
  if (spec.mode == PipelineMode::kEval) {
    int resized_w = 0, resized_h = 0;
    ResizedSize(box.width, box.height, spec.resize_shorter, &resized_w, &resized_h);
    const int left = static_cast<int>(std::nearbyint((resized_w - out_w) / 2.0));  // Python's round: half to even
    const int top = static_cast<int>(std::nearbyint((resized_h - out_h) / 2.0));
    *ax = BuildResampleAxis(x0, x1, resized_w, left, out_w, 0, src_width, spec.antialias);
    *ay = BuildResampleAxis(y0, y1, resized_h, top, out_h, 0, src_height, spec.antialias);
    return;
  }
  *ax = BuildResampleAxis(x0, x1, out_w, 0, out_w, static_cast<int>(std::floor(x0)),
                          std::min(src_width, static_cast<int>(std::ceil(x1))), spec.antialias);
  *ay = BuildResampleAxis(y0, y1, out_h, 0, out_h, static_cast<int>(std::floor(y0)),
                          std::min(src_height, static_cast<int>(std::ceil(y1))), spec.antialias);
}

void ImagePipeline::PlanAxes(int width, int height, const Augmentation& aug, int d, ResampleAxis* ax,
                             ResampleAxis* ay) const {
  const CropRect box = spec_.mode == PipelineMode::kEval ? CropRect{0, 0, width, height} : aug.crop;
  PlanResizeAxes(spec_, box, d, (width + d - 1) / d, (height + d - 1) / d, ax, ay);
}

SampleOutcome ImagePipeline::RunJpeg(std::span<const uint8_t> encoded, uint64_t sample_seed, uint8_t* out) {
  auto start = SteadyClock::now();
  int width = 0, height = 0;
  Status header = jpeg_.ReadHeader(encoded.data(), encoded.size(), &width, &height);
  if (!header.ok()) return Refused(header);
  Augmentation aug = PlanAugmentation(spec_, width, height, sample_seed);
  const int out_w = static_cast<int>(spec_.output_width);
  const int out_h = static_cast<int>(spec_.output_height);
  RegionView region;
  if (spec_.resize_kernel == ResizeKernel::kOpenCv) {
    Status decoded = jpeg_.DecodeRegion(aug.crop, out_w, out_h, &region);
    if (!decoded.ok()) return Refused(decoded);
    last_reduction_ = region.scale_denominator;
    auto decoded_at = SteadyClock::now();
    stage_seconds_.decode += std::chrono::duration<double>(decoded_at - start).count();
    ResizeInto(region.data, region.stride, region.width, region.height, /*bgr=*/false, aug.flip, out);
    stage_seconds_.augment += SecondsSince(decoded_at);
    return {};
  }
  // The largest DCT reduction that keeps the resize a reduction: the crop (train) or the image against its
  // Resize(shorter) size (eval) at least d times as large.
  int d = ChooseScaleDenominator(aug.crop, out_w, out_h);
  if (spec_.mode == PipelineMode::kEval) {
    int resized_w = 0, resized_h = 0;
    ResizedSize(width, height, spec_.resize_shorter, &resized_w, &resized_h);
    d = ChooseScaleDenominator(CropRect{0, 0, width, height}, resized_w, resized_h);
  }
  last_reduction_ = d;
  ResampleAxis ax, ay;
  PlanAxes(width, height, aug, d, &ax, &ay);
  Status decoded = jpeg_.DecodeScaled(d, ax.lowest, ay.lowest, ax.highest, ay.highest, &region);
  if (!decoded.ok()) return Refused(decoded);
  auto decoded_at = SteadyClock::now();
  stage_seconds_.decode += std::chrono::duration<double>(decoded_at - start).count();
  resampler_.Resize(region.data, region.stride, ax.lowest, ay.lowest, ax, ay, aug.flip, out);
  stage_seconds_.augment += SecondsSince(decoded_at);
  return {};
}

SampleOutcome ImagePipeline::RunCut(std::span<const uint8_t> encoded, uint64_t sample_seed, uint8_t* out,
                                    CutSample* cut) {
  *cut = CutSample{};
  const auto start = SteadyClock::now();
  StatusOr<JpegHeader> header = LooksLikeJpeg(encoded) ? cutter_.ReadHeader(encoded)
                                                       : StatusOr<JpegHeader>(InvalidArgumentError("not a JPEG"));
  if (header.ok()) {
    const int width = header->width, height = header->height;
    const Augmentation aug = PlanAugmentation(spec_, width, height, sample_seed);
    // The resize's taps at full size, the region the client's resize reads: only a cut needs them.
    auto region_of = [&] {
      ResampleAxis ax, ay;
      PlanAxes(width, height, aug, /*d=*/1, &ax, &ay);
      return CropRect{ax.lowest, ay.lowest, ax.highest - ax.lowest, ay.highest - ay.lowest};
    };
    StatusOr<JpegCut> done = cutter_.Prepare(encoded, *header, region_of, spec_.gpu_decode, out, out_bytes_);
    stage_seconds_.decode += SecondsSince(start);
    if (done.ok()) {
      const bool eval = spec_.mode == PipelineMode::kEval;
      const CropRect box = eval ? CropRect{0, 0, width, height} : aug.crop;
      *cut = CutSample{true, done->bytes, done->whole, aug.flip, box.x - done->x, box.y - done->y, box.width,
                       box.height, ""};
      return {};
    }
    header = done.status();
  }
  cut->fallback = header.status().message();
  SampleOutcome outcome = Run(encoded, sample_seed, out);
  cut->bytes = outcome.ok ? out_bytes_ : 0;
  return outcome;
}

SampleOutcome ImagePipeline::RunOther(std::span<const uint8_t> encoded, uint64_t sample_seed, uint8_t* out) {
#if STOKER_WITH_IMGCODECS
  auto start = SteadyClock::now();
  if (encoded.empty()) return {false, "decode_error", "empty image"};
  if (!IsAcceptedOtherFormat(encoded)) {
    return {false, "unsupported_format",
            "neither JPEG, PNG, WebP, BMP, TIFF, PNM nor JPEG 2000 by its first bytes (" +
                std::to_string(encoded.size()) + " bytes)"};
  }
  cv::Mat buffer(1, static_cast<int>(encoded.size()), CV_8UC1, const_cast<uint8_t*>(encoded.data()));
  cv::Mat image = cv::imdecode(buffer, cv::IMREAD_COLOR);
  if (image.empty() || image.type() != CV_8UC3) {
    return {false, "decode_error", "OpenCV could not decode the image (corrupt or unknown format)"};
  }
  auto decoded_at = SteadyClock::now();
  stage_seconds_.decode += std::chrono::duration<double>(decoded_at - start).count();
  Augmentation aug = PlanAugmentation(spec_, image.cols, image.rows, sample_seed);
  if (spec_.resize_kernel == ResizeKernel::kOpenCv) {
    cv::Mat roi = image(cv::Rect(aug.crop.x, aug.crop.y, aug.crop.width, aug.crop.height));
    ResizeInto(roi.data, roi.step[0], roi.cols, roi.rows, /*bgr=*/true, aug.flip, out);
  } else {
    ResampleAxis ax, ay;
    PlanAxes(image.cols, image.rows, aug, /*d=*/1, &ax, &ay);
    resampler_.Resize(image.data, image.step[0], 0, 0, ax, ay, aug.flip, out);
    cv::Mat target(static_cast<int>(spec_.output_height), static_cast<int>(spec_.output_width), CV_8UC3, out);
    cv::cvtColor(target, target, cv::COLOR_BGR2RGB);
  }
  stage_seconds_.augment += SecondsSince(decoded_at);
  return {};
#else
  (void)sample_seed;
  (void)out;
  return {false, "unsupported_format",
          "not a JPEG, and this build has no OpenCV imgcodecs for other formats (" +
              std::to_string(encoded.size()) + " bytes)"};
#endif
}

void ImagePipeline::ResizeInto(const uint8_t* src, size_t stride, int width, int height, bool bgr, bool flip,
                               uint8_t* out) {
  const int out_w = static_cast<int>(spec_.output_width);
  const int out_h = static_cast<int>(spec_.output_height);
  cv::Mat source(height, width, CV_8UC3, const_cast<uint8_t*>(src), stride);
  cv::Mat target(out_h, out_w, CV_8UC3, out);
  if (width == out_w && height == out_h) {
    source.copyTo(target);
  } else {
    bool shrinking = width > out_w && height > out_h;
    int interpolation = (spec_.antialias && shrinking) ? cv::INTER_AREA : cv::INTER_LINEAR;
    cv::resize(source, target, target.size(), 0, 0, interpolation);
  }
  STOKER_CHECK(target.data == out, "resize reallocated its output instead of writing into the batch");
  if (bgr) cv::cvtColor(target, target, cv::COLOR_BGR2RGB);
  if (flip) FlipHorizontalInPlace(out, out_w, out_h);
}

}  // namespace stoker::worker
