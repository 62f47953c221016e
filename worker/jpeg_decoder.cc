// JpegDecoder (jpeg_decoder.h): libjpeg-turbo's libjpeg API, decoding only the crop's region, DCT-scaled.
#include "worker/jpeg_decoder.h"

#include <jerror.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

namespace stoker::worker {

int ChooseScaleDenominator(const CropRect& crop, int min_width, int min_height) {
  for (int d : {8, 4, 2}) {
    if (crop.width >= d * min_width && crop.height >= d * min_height) return d;
  }
  return 1;
}

namespace {

int64_t ClockNanos(clockid_t clock) {
  timespec t{};
  ::clock_gettime(clock, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

// The thread's CPU clock is a system call (about 0.5 us here) and the progress monitor runs for every row group,
// so it is read only once the monotonic clock (vDSO, no system call) says the budget could have been spent: a
// thread cannot use more CPU time than the time that passed.
int64_t ThreadCpuNanos() { return ClockNanos(CLOCK_THREAD_CPUTIME_ID); }
int64_t MonotonicNanos() { return ClockNanos(CLOCK_MONOTONIC); }

}  // namespace

// Pillow opens every CMYK JPEG as "CMYK;I" (Adobe's convention: the stored values are inverted) and converts to RGB
// with cmyk2rgb: with k = 255 - K and c = 255 - C as Pillow sees them, R = clip(k - c * k / 255), the division
// rounded as its MULDIV255 does. Written forwards, each RGB pixel lands at or before the CMYK pixel it came from.
void CmykToRgbInPlace(uint8_t* row, int width) {
  for (int x = 0; x < width; ++x) {
    const uint8_t* in = row + 4 * x;
    const int k = in[3];  // Pillow's 255 - K after its inversion, which is the stored value
    uint8_t rgb[3];
    for (int i = 0; i < 3; ++i) {
      const int t = (255 - in[i]) * k + 128;
      rgb[i] = static_cast<uint8_t>(std::clamp(k - (((t >> 8) + t) >> 8), 0, 255));
    }
    std::memcpy(row + 3 * x, rgb, 3);
  }
}

JpegRegionDecoder::JpegRegionDecoder(const JpegLimits& limits) : limits_(limits) {
  std::memset(&cinfo_, 0, sizeof(cinfo_));
  std::memset(&errors_, 0, sizeof(errors_));
  cinfo_.err = jpeg_std_error(&errors_.pub);
  errors_.pub.error_exit = &JpegRegionDecoder::OnError;
  errors_.pub.emit_message = &JpegRegionDecoder::OnMessage;
  jpeg_create_decompress(&cinfo_);
  // Whole-image buffers (a progressive image's coefficients) past this ask for a backing store, which this build
  // of libjpeg-turbo does not have: the decode fails instead of growing (jmemnobs.c honours max_memory_to_use).
  cinfo_.mem->max_memory_to_use = static_cast<long>(limits_.max_memory_bytes);
  std::memset(&progress_, 0, sizeof(progress_));
  progress_.pub.progress_monitor = &JpegRegionDecoder::OnProgress;
  progress_.decoder = this;
  cinfo_.progress = &progress_.pub;
}

JpegRegionDecoder::~JpegRegionDecoder() { jpeg_destroy_decompress(&cinfo_); }

void JpegRegionDecoder::OnError(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  // Running out of the memory we allowed is a limit, not damage.
  errors->limit = cinfo->err->msg_code == JERR_NO_BACKING_STORE || cinfo->err->msg_code == JERR_OUT_OF_MEMORY;
  if (errors->limit) {
    std::snprintf(errors->message, sizeof(errors->message), "needs more than the %zu MiB of memory allowed per image",
                  static_cast<size_t>(cinfo->mem->max_memory_to_use) >> 20);
  }
  std::longjmp(errors->jump, 1);
}

void JpegRegionDecoder::OnMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  ++cinfo->err->num_warnings;
  if (cinfo->err->msg_code == JWRN_EXTRANEOUS_DATA) return;  // stray bytes between markers: image intact
  // Corrupt data: stop now (libjpeg would go on, decoding grey blocks, or every repeated scan of a bomb).
  auto* errors = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  errors->limit = false;
  std::longjmp(errors->jump, 1);
}

// libjpeg calls this between row groups; a limit longjmps out, so nothing here may own memory (no std::string: its
// destructor would never run).
void JpegRegionDecoder::OnProgress(j_common_ptr cinfo) {
  JpegRegionDecoder* self = reinterpret_cast<Progress*>(cinfo->progress)->decoder;
  const auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  ErrorManager& errors = self->errors_;
  if (d->input_scan_number > self->limits_.max_scans) {
    std::snprintf(errors.message, sizeof(errors.message), "more than %d scans", self->limits_.max_scans);
  } else if (self->cpu_deadline_ns_ != 0 && MonotonicNanos() > self->wall_deadline_ns_ &&
             ThreadCpuNanos() > self->cpu_deadline_ns_) {
    std::snprintf(errors.message, sizeof(errors.message), "over its budget of %lld ms of CPU time",
                  static_cast<long long>(
                      std::chrono::duration_cast<std::chrono::milliseconds>(self->limits_.max_cpu_time).count()));
  } else {
    return;
  }
  errors.limit = true;
  std::longjmp(errors.jump, 1);
}

void JpegRegionDecoder::StartClock() {
  const int64_t budget = limits_.max_cpu_time.count();
  cpu_deadline_ns_ = budget > 0 ? ThreadCpuNanos() + budget : 0;
  wall_deadline_ns_ = budget > 0 ? MonotonicNanos() + budget : 0;
}

Status JpegRegionDecoder::Failure(const char* stage) {
  std::string message = std::string("JPEG ") + stage + ": " + errors_.message;
  jpeg_abort_decompress(&cinfo_);
  header_read_ = false;
  return errors_.limit ? ResourceExhaustedError(message) : DataLossError(message);
}

Status JpegRegionDecoder::ReadHeader(const uint8_t* data, size_t size, int* width, int* height) {
  if (header_read_) jpeg_abort_decompress(&cinfo_);
  header_read_ = false;
  errors_.limit = false;
  errors_.message[0] = '\0';
  if (size == 0) return DataLossError("JPEG header: empty input");
  if (scratch_.capacity() > (size_t{64} << 20)) {  // one huge image must not pin its buffer for good
    scratch_ = std::vector<uint8_t>();
    rows_ = std::vector<JSAMPROW>();
  }
  StartClock();
  if (setjmp(errors_.jump) != 0) return Failure("header");
  jpeg_mem_src(&cinfo_, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo_, TRUE);
  header_read_ = true;
  const uint64_t pixels = uint64_t{cinfo_.image_width} * cinfo_.image_height;
  if (pixels > limits_.max_pixels) {
    jpeg_abort_decompress(&cinfo_);
    header_read_ = false;
    return ResourceExhaustedError("JPEG of " + std::to_string(cinfo_.image_width) + "x" +
                                  std::to_string(cinfo_.image_height) + " pixels is above the limit of " +
                                  std::to_string(limits_.max_pixels >> 20) + " MP");
  }
  *width = static_cast<int>(cinfo_.image_width);
  *height = static_cast<int>(cinfo_.image_height);
  return Status::Ok();
}

Status JpegRegionDecoder::DecodeRegion(const CropRect& crop, int min_width, int min_height, RegionView* out) {
  STOKER_CHECK(header_read_, "DecodeRegion without a successful ReadHeader");
  STOKER_CHECK(crop.x >= 0 && crop.y >= 0 && crop.width > 0 && crop.height > 0 &&
                   crop.x + crop.width <= static_cast<int>(cinfo_.image_width) &&
                   crop.y + crop.height <= static_cast<int>(cinfo_.image_height),
               "crop outside the image");
  const int d = ChooseScaleDenominator(crop, min_width, min_height);
  int reduced_w = 0, reduced_h = 0;
  ScaledSize(d, &reduced_w, &reduced_h);
  // The crop in reduced coordinates: floor of the start, ceiling of the end, within the reduced image.
  return Decode(d, crop.x / d, crop.y / d, std::min(reduced_w, (crop.x + crop.width + d - 1) / d),
                std::min(reduced_h, (crop.y + crop.height + d - 1) / d), /*margin=*/0, out);
}

void JpegRegionDecoder::ScaledSize(int d, int* width, int* height) const {
  *width = static_cast<int>((cinfo_.image_width + d - 1) / d);
  *height = static_cast<int>((cinfo_.image_height + d - 1) / d);
}

Status JpegRegionDecoder::DecodeScaled(int d, int x0, int y0, int x1, int y1, RegionView* out) {
  return Decode(d, x0, y0, x1, y1, /*margin=*/1, out);
}

Status JpegRegionDecoder::Decode(int d, int x0, int y0, int x1, int y1, int margin, RegionView* out) {
  STOKER_CHECK(header_read_, "decoding without a successful ReadHeader");
  STOKER_CHECK(d == 1 || d == 2 || d == 4 || d == 8, "DCT reduction must be 1, 2, 4 or 8");
  int reduced_w = 0, reduced_h = 0;
  ScaledSize(d, &reduced_w, &reduced_h);
  STOKER_CHECK(x0 >= 0 && y0 >= 0 && x1 > x0 && y1 > y0 && x1 <= reduced_w && y1 <= reduced_h,
               "region outside the reduced image");
  // Everything below may longjmp back here; no C++ object with a destructor is created past this point.
  if (setjmp(errors_.jump) != 0) return Failure("decode");
  // libjpeg-turbo converts YCCK to CMYK but neither to RGB: those come out as CMYK and are converted row by row.
  const bool cmyk = cinfo_.jpeg_color_space == JCS_CMYK || cinfo_.jpeg_color_space == JCS_YCCK;
  cinfo_.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  cinfo_.scale_num = 1;
  cinfo_.scale_denom = static_cast<unsigned>(d);
  cinfo_.dct_method = JDCT_ISLOW;
  jpeg_start_decompress(&cinfo_);
  STOKER_CHECK(static_cast<int>(cinfo_.output_width) == reduced_w && static_cast<int>(cinfo_.output_height) ==
               reduced_h, "libjpeg's reduced size differs from ceil(size / d)");

  // `margin` columns more on each side than asked: chroma upsampling (4:2:0, 4:2:2) reads its neighbours, and at
  // the edge of a cropped scanline libjpeg replicates the edge instead, which differs from a full decode.
  const JDIMENSION want_x0 = static_cast<JDIMENSION>(std::max(0, x0 - margin));
  const JDIMENSION want_x1 = static_cast<JDIMENSION>(std::min(reduced_w, x1 + margin));
  JDIMENSION column = want_x0;
  JDIMENSION columns = want_x1 - want_x0;
  if (columns < cinfo_.output_width) jpeg_crop_scanline(&cinfo_, &column, &columns);  // widens to iMCU boundaries
  const size_t stride = static_cast<size_t>(cinfo_.output_width) * (cmyk ? 4 : 3);
  const JDIMENSION rows = static_cast<JDIMENSION>(y1 - y0);
  if (scratch_.size() < stride * rows) scratch_.resize(stride * rows);
  if (rows_.size() < rows) rows_.resize(rows);
  for (JDIMENSION r = 0; r < rows; ++r) rows_[r] = scratch_.data() + r * stride;

  if (y0 > 0) jpeg_skip_scanlines(&cinfo_, static_cast<JDIMENSION>(y0));
  JDIMENSION done = 0;
  while (done < rows) {
    done += jpeg_read_scanlines(&cinfo_, rows_.data() + done, rows - done);
  }
  if (cmyk) {
    for (JDIMENSION r = 0; r < rows; ++r) CmykToRgbInPlace(rows_[r], static_cast<int>(cinfo_.output_width));
  }
  // The rows below the region are never decoded.
  jpeg_abort_decompress(&cinfo_);
  header_read_ = false;

  out->data = scratch_.data() + (static_cast<JDIMENSION>(x0) - column) * 3;
  out->stride = stride;
  out->width = x1 - x0;
  out->height = static_cast<int>(rows);
  out->scale_denominator = d;
  return Status::Ok();
}

Status JpegRegionDecoder::DecodeFull(RegionView* out) {
  STOKER_CHECK(header_read_, "DecodeFull without a successful ReadHeader");
  CropRect all{0, 0, static_cast<int>(cinfo_.image_width), static_cast<int>(cinfo_.image_height)};
  return DecodeRegion(all, all.width, all.height, out);
}

}  // namespace stoker::worker
