// Host conversion and the float16/bfloat16 rounding (see convert_host.h). Written for clarity over speed: the host
// path serves CI, laptops and the GPU kernel's tests, never a GPU in training.
#include "client/src/convert_host.h"

#include <bit>
#include <cmath>
#include <cstring>

namespace stoker::client {

NormalizeConstants MakeNormalizeConstants(const OutputFormat& format) {
  NormalizeConstants k{};
  for (int c = 0; c < 3; ++c) {
    k.mean[c] = format.mean[c];
    k.inv_std[c] = 1.0f / format.std[c];
  }
  return k;
}

uint16_t FloatToBFloat16Bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(x >> 16);
}

float BFloat16BitsToFloat(uint16_t b) { return std::bit_cast<float>(uint32_t{b} << 16); }

uint16_t FloatToHalfBits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): a subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest subnormal: zero
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24 for the exponents that reach here
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t rebased = abs - 0x38000000u;  // exponent from bias 127 to bias 15
  rebased += 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<uint16_t>(sign | (rebased >> 13));
}

float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

namespace {

template <typename Store>
void ConvertEach(const uint8_t* in, uint32_t n, uint32_t h, uint32_t w, Layout layout, Store store) {
  const uint64_t hw = uint64_t{h} * w;
  for (uint64_t b = 0; b < n; ++b) {
    for (uint64_t p = 0; p < hw; ++p) {
      for (uint64_t c = 0; c < 3; ++c) {
        const uint64_t from = (b * hw + p) * 3 + c;
        const uint64_t to = layout == Layout::kNHWC ? from : (b * 3 + c) * hw + p;
        store(to, in[from], static_cast<int>(c));
      }
    }
  }
}

}  // namespace

void ConvertOnHost(const uint8_t* in, uint32_t n, uint32_t h, uint32_t w, const OutputFormat& format, void* out) {
  if (format.IsIdentity()) {
    std::memcpy(out, in, uint64_t{n} * h * w * 3);
    return;
  }
  const NormalizeConstants k = MakeNormalizeConstants(format);
  auto value = [&](uint8_t x, int c) { return (static_cast<float>(x) - k.mean[c]) * k.inv_std[c]; };
  switch (format.dtype) {
    case DType::kUInt8: {
      auto* o = static_cast<uint8_t*>(out);
      ConvertEach(in, n, h, w, format.layout, [&](uint64_t i, uint8_t x, int) { o[i] = x; });
      break;
    }
    case DType::kFloat32: {
      auto* o = static_cast<float*>(out);
      ConvertEach(in, n, h, w, format.layout, [&](uint64_t i, uint8_t x, int c) { o[i] = value(x, c); });
      break;
    }
    case DType::kFloat16: {
      auto* o = static_cast<uint16_t*>(out);
      ConvertEach(in, n, h, w, format.layout,
                  [&](uint64_t i, uint8_t x, int c) { o[i] = FloatToHalfBits(value(x, c)); });
      break;
    }
    case DType::kBFloat16: {
      auto* o = static_cast<uint16_t*>(out);
      ConvertEach(in, n, h, w, format.layout,
                  [&](uint64_t i, uint8_t x, int c) { o[i] = FloatToBFloat16Bits(value(x, c)); });
      break;
    }
  }
}

}  // namespace stoker::client
