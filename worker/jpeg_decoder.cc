// JpegDecoder (jpeg_decoder.h): libjpeg-turbo's libjpeg API, decoding only the crop's region, DCT-scaled.
#include "worker/jpeg_decoder.h"

#include <jerror.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

namespace stoker {

int ChooseScaleDenominator(const CropRect& crop, int min_width, int min_height) {
  for (int d : {8, 4, 2}) {
    if (crop.width >= d * min_width && crop.height >= d * min_height) return d;
  }
  return 1;
}

namespace {

int64_t ThreadCpuNanos() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

}  // namespace

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

void JpegRegionDecoder::OnProgress(j_common_ptr cinfo) {
  JpegRegionDecoder* self = reinterpret_cast<Progress*>(cinfo->progress)->decoder;
  const auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > self->limits_.max_scans) {
    self->Abort("more than " + std::to_string(self->limits_.max_scans) + " scans", true);
  }
  if (self->cpu_deadline_ns_ != 0 && ThreadCpuNanos() > self->cpu_deadline_ns_) {
    self->Abort("over its budget of " +
                    std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(self->limits_.max_cpu_time)
                                       .count()) +
                    " ms of CPU time",
                true);
  }
}

void JpegRegionDecoder::Abort(const std::string& message, bool limit) {
  std::snprintf(errors_.message, sizeof(errors_.message), "%s", message.c_str());
  errors_.limit = limit;
  std::longjmp(errors_.jump, 1);
}

void JpegRegionDecoder::StartClock() {
  cpu_deadline_ns_ = limits_.max_cpu_time.count() > 0 ? ThreadCpuNanos() + limits_.max_cpu_time.count() : 0;
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
  if (cinfo_.jpeg_color_space == JCS_CMYK || cinfo_.jpeg_color_space == JCS_YCCK) {
    jpeg_abort_decompress(&cinfo_);
    header_read_ = false;
    return UnimplementedError("JPEG in CMYK/YCCK colour space");
  }
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
  // Everything below may longjmp back here; no C++ object with a destructor is created past this point.
  if (setjmp(errors_.jump) != 0) return Failure("decode");
  cinfo_.out_color_space = JCS_RGB;
  cinfo_.scale_num = 1;
  cinfo_.scale_denom = static_cast<unsigned>(d);
  cinfo_.dct_method = JDCT_ISLOW;
  jpeg_start_decompress(&cinfo_);

  // The crop in reduced coordinates: floor of the start, ceiling of the end, within the reduced image.
  const JDIMENSION reduced_w = cinfo_.output_width;
  const JDIMENSION reduced_h = cinfo_.output_height;
  JDIMENSION x0 = static_cast<JDIMENSION>(crop.x / d);
  JDIMENSION x1 = std::min<JDIMENSION>(reduced_w, static_cast<JDIMENSION>((crop.x + crop.width + d - 1) / d));
  JDIMENSION y0 = static_cast<JDIMENSION>(crop.y / d);
  JDIMENSION y1 = std::min<JDIMENSION>(reduced_h, static_cast<JDIMENSION>((crop.y + crop.height + d - 1) / d));

  JDIMENSION column = x0;
  JDIMENSION columns = x1 - x0;
  if (columns < reduced_w) jpeg_crop_scanline(&cinfo_, &column, &columns);  // widens to iMCU boundaries
  const size_t stride = static_cast<size_t>(cinfo_.output_width) * 3;
  const JDIMENSION rows = y1 - y0;
  if (scratch_.size() < stride * rows) scratch_.resize(stride * rows);
  if (rows_.size() < rows) rows_.resize(rows);
  for (JDIMENSION r = 0; r < rows; ++r) rows_[r] = scratch_.data() + r * stride;

  if (y0 > 0) jpeg_skip_scanlines(&cinfo_, y0);
  JDIMENSION done = 0;
  while (done < rows) {
    done += jpeg_read_scanlines(&cinfo_, rows_.data() + done, rows - done);
  }
  // The rows below the crop are never decoded.
  jpeg_abort_decompress(&cinfo_);
  header_read_ = false;

  out->data = scratch_.data() + (x0 - column) * 3;
  out->stride = stride;
  out->width = static_cast<int>(x1 - x0);
  out->height = static_cast<int>(rows);
  out->scale_denominator = d;
  return Status::Ok();
}

Status JpegRegionDecoder::DecodeFull(RegionView* out) {
  STOKER_CHECK(header_read_, "DecodeFull without a successful ReadHeader");
  CropRect all{0, 0, static_cast<int>(cinfo_.image_width), static_cast<int>(cinfo_.image_height)};
  return DecodeRegion(all, all.width, all.height, out);
}

}  // namespace stoker
