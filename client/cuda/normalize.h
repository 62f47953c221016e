// The CUDA conversion kernel's launcher: uint8 NHWC RGB pixels on the device -> the model's dtype and layout,
// (pixel - mean[c]) * inv_std[c] in float32, rounded to nearest even for float16/bfloat16. Bit-identical to
// ConvertOnHost (client/src/convert_host.h), which the tests hold it to.
//
// This header is plain C++ (no CUDA types), so the C++20 library code can call into the C++17 .cu file.
//
// Thread safety: LaunchConvert may be called from any thread; it only queues work on `stream`.
#pragma once

#include <cstdint>

namespace stoker::cuda {

// dtype: 0 uint8, 1 float32, 2 float16, 3 bfloat16 (stoker::DType); nchw: layout. `in` holds n*h*w*3 bytes,
// `out` n*3*h*w elements; both device pointers aligned to 16 bytes. Returns a cudaError_t (0: queued).
int LaunchConvert(const uint8_t* in, void* out, uint32_t n, uint32_t h, uint32_t w, int dtype, bool nchw,
                  const float mean[3], const float inv_std[3], void* stream);

}  // namespace stoker::cuda
