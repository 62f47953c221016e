// ImagePipeline (image_pipeline.h): decode the crop region, resize straight into the batch slot, flip.
#include "worker/image_pipeline.h"

#include <chrono>
#include <cstring>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#if STOKER_WITH_IMGCODECS
#include <opencv2/imgcodecs.hpp>
#endif

namespace stoker {
namespace {

using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

bool LooksLikeJpeg(std::span<const uint8_t> b) { return b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF; }

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
    : spec_(spec), out_bytes_(size_t{spec.output_height} * spec.output_width * 3), jpeg_(limits) {}

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
    outcome = {false, "decode_error", std::string("OpenCV: ") + e.what()};
  } catch (const std::bad_alloc&) {
    outcome = {false, "decode_error", "out of memory decoding the image"};
  }
  if (!outcome.ok) std::memset(out, 0, out_bytes_);
  return outcome;
}

SampleOutcome ImagePipeline::RunJpeg(std::span<const uint8_t> encoded, uint64_t sample_seed, uint8_t* out) {
  auto start = SteadyClock::now();
  int width = 0, height = 0;
  Status header = jpeg_.ReadHeader(encoded.data(), encoded.size(), &width, &height);
  if (header.code() == StatusCode::kUnimplemented) return RunOther(encoded, sample_seed, out);  // e.g. CMYK
  if (!header.ok()) return Refused(header);
  Augmentation aug = PlanAugmentation(spec_, width, height, sample_seed);
  RegionView region;
  Status decoded = jpeg_.DecodeRegion(aug.crop, static_cast<int>(spec_.output_width),
                                      static_cast<int>(spec_.output_height), &region);
  if (!decoded.ok()) return Refused(decoded);
  auto decoded_at = SteadyClock::now();
  stage_seconds_.decode += std::chrono::duration<double>(decoded_at - start).count();
  ResizeInto(region.data, region.stride, region.width, region.height, /*bgr=*/false, aug.flip, out);
  stage_seconds_.augment += SecondsSince(decoded_at);
  return {};
}

SampleOutcome ImagePipeline::RunOther(std::span<const uint8_t> encoded, uint64_t sample_seed, uint8_t* out) {
#if STOKER_WITH_IMGCODECS
  auto start = SteadyClock::now();
  if (encoded.empty()) return {false, "decode_error", "empty image"};
  cv::Mat buffer(1, static_cast<int>(encoded.size()), CV_8UC1, const_cast<uint8_t*>(encoded.data()));
  cv::Mat image = cv::imdecode(buffer, cv::IMREAD_COLOR);
  if (image.empty() || image.type() != CV_8UC3) {
    return {false, "decode_error", "OpenCV could not decode the image (corrupt or unknown format)"};
  }
  auto decoded_at = SteadyClock::now();
  stage_seconds_.decode += std::chrono::duration<double>(decoded_at - start).count();
  Augmentation aug = PlanAugmentation(spec_, image.cols, image.rows, sample_seed);
  cv::Mat roi = image(cv::Rect(aug.crop.x, aug.crop.y, aug.crop.width, aug.crop.height));
  ResizeInto(roi.data, roi.step[0], roi.cols, roi.rows, /*bgr=*/true, aug.flip, out);
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

}  // namespace stoker
