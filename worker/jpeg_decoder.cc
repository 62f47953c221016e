// JpegDecoder (jpeg_decoder.h): libjpeg-turbo's libjpeg API, decoding only the crop's region, DCT-scaled.
#include "worker/jpeg_decoder.h"

#include <jerror.h>

#include <algorithm>
#include <cstring>

namespace stoker {

int ChooseScaleDenominator(const CropRect& crop, int min_width, int min_height) {
  for (int d : {8, 4, 2}) {
    if (crop.width >= d * min_width && crop.height >= d * min_height) return d;
  }
  return 1;
}

JpegRegionDecoder::JpegRegionDecoder() {
  std::memset(&cinfo_, 0, sizeof(cinfo_));
  std::memset(&errors_, 0, sizeof(errors_));
  cinfo_.err = jpeg_std_error(&errors_.pub);
  errors_.pub.error_exit = &JpegRegionDecoder::OnError;
  errors_.pub.emit_message = &JpegRegionDecoder::OnMessage;
  jpeg_create_decompress(&cinfo_);
}

JpegRegionDecoder::~JpegRegionDecoder() { jpeg_destroy_decompress(&cinfo_); }

void JpegRegionDecoder::OnError(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

void JpegRegionDecoder::OnMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  auto* errors = reinterpret_cast<ErrorManager*>(cinfo->err);
  ++cinfo->err->num_warnings;
  if (cinfo->err->msg_code == JWRN_EXTRANEOUS_DATA) return;  // stray bytes between markers: image intact
  if (!errors->corrupt_warning) {
    (*cinfo->err->format_message)(cinfo, errors->message);
    errors->corrupt_warning = true;
  }
}

Status JpegRegionDecoder::Failure(const char* stage) {
  std::string message = std::string("JPEG ") + stage + ": " + errors_.message;
  jpeg_abort_decompress(&cinfo_);
  header_read_ = false;
  return DataLossError(message);
}

Status JpegRegionDecoder::ReadHeader(const uint8_t* data, size_t size, int* width, int* height) {
  if (header_read_) jpeg_abort_decompress(&cinfo_);
  header_read_ = false;
  errors_.corrupt_warning = false;
  errors_.message[0] = '\0';
  if (size == 0) return DataLossError("JPEG header: empty input");
  if (scratch_.capacity() > (size_t{64} << 20)) {  // one huge image must not pin its buffer for good
    scratch_ = std::vector<uint8_t>();
    rows_ = std::vector<JSAMPROW>();
  }
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
  if (pixels > max_pixels_) {
    jpeg_abort_decompress(&cinfo_);
    header_read_ = false;
    return DataLossError("JPEG of " + std::to_string(cinfo_.image_width) + "x" + std::to_string(cinfo_.image_height) +
                         " pixels is above the limit of " + std::to_string(max_pixels_ >> 20) + " MP");
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
  if (errors_.corrupt_warning) return DataLossError(std::string("JPEG data corrupt: ") + errors_.message);

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
