// The Loader's value types (stoker/loader_types.h): the names and sizes of dtypes and layouts, OutputFormat's
// checks, BatchView's size.
#include <cmath>

#include "stoker/loader_types.h"

namespace stoker {

const char* DTypeName(DType d) {
  switch (d) {
    case DType::kUInt8: return "uint8";
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
  }
  return "?";
}

const char* LayoutName(Layout l) { return l == Layout::kNCHW ? "nchw" : "nhwc"; }

size_t DTypeSize(DType d) {
  switch (d) {
    case DType::kUInt8: return 1;
    case DType::kFloat32: return 4;
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
  }
  return 0;
}

Status OutputFormat::Validate() const {
  for (int c = 0; c < 3; ++c) {
    if (!std::isfinite(mean[c])) return InvalidArgumentError("mean[" + std::to_string(c) + "] is not finite");
    if (!std::isfinite(std[c]) || std[c] <= 0) {
      return InvalidArgumentError("std[" + std::to_string(c) + "] must be a positive number");
    }
  }
  return Status::Ok();
}

uint64_t BatchView::bytes() const {
  return static_cast<uint64_t>(shape[0] * shape[1] * shape[2] * shape[3]) * DTypeSize(dtype);
}

}  // namespace stoker
