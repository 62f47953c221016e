// The conversion from received pixels (uint8 NHWC RGB) to the model's input, on the host: the host path's
// implementation, and the reference the CUDA kernel (client/cuda/normalize.h) is tested against, bit for bit.
// Float outputs are (pixel - mean[c]) * (1 / std[c]) in float32, then rounded to nearest even for float16 and
// bfloat16, exactly as the kernel computes them.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "stoker/loader_types.h"

namespace stoker::client {

// `in` holds n x h x w x 3 bytes; `out` has room for n x 3 x h x w elements of format.dtype.
void ConvertOnHost(const uint8_t* in, uint32_t n, uint32_t h, uint32_t w, const OutputFormat& format, void* out);

// The per-channel constants the host and the kernel both use.
struct NormalizeConstants {
  float mean[3];
  float inv_std[3];
};
NormalizeConstants MakeNormalizeConstants(const OutputFormat& format);

// float32 -> IEEE half / bfloat16 bits, round to nearest even (NaN stays NaN, overflow goes to infinity).
uint16_t FloatToHalfBits(float f);
uint16_t FloatToBFloat16Bits(float f);
float HalfBitsToFloat(uint16_t h);
float BFloat16BitsToFloat(uint16_t b);

}  // namespace stoker::client
