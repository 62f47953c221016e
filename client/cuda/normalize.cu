// The conversion kernel (see normalize.h). Memory-bound: per pixel it reads 3 bytes and writes 3 outputs. The fast
// kernel gives each thread 4 consecutive pixels of one image: three 4-byte loads (12 bytes, coalesced across the
// warp) and, for NCHW, one 4-wide vector store per channel plane (16 bytes for float32); for NHWC, the 12 outputs
// as 3 vector stores. It needs h*w divisible by 4 (224x224 is); other sizes take the one-pixel-per-thread kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "client/cuda/normalize.h"

namespace stoker::cuda {
namespace {

struct Constants {
  float mean[3];
  float inv_std[3];
};

template <typename T>
__device__ __forceinline__ T Convert(uint8_t x, int c, const Constants& k);
template <>
__device__ __forceinline__ uint8_t Convert<uint8_t>(uint8_t x, int, const Constants&) {
  return x;
}
template <>
__device__ __forceinline__ float Convert<float>(uint8_t x, int c, const Constants& k) {
  // Written as a subtraction then a product (no contraction into an FMA is possible), as the host does it.
  return (static_cast<float>(x) - k.mean[c]) * k.inv_std[c];
}
template <>
__device__ __forceinline__ __half Convert<__half>(uint8_t x, int c, const Constants& k) {
  return __float2half_rn(Convert<float>(x, c, k));
}
template <>
__device__ __forceinline__ __nv_bfloat16 Convert<__nv_bfloat16>(uint8_t x, int c, const Constants& k) {
  return __float2bfloat16_rn(Convert<float>(x, c, k));
}

// Four values of T as one aligned vector store.
template <typename T>
struct Vec4;
template <>
struct Vec4<float> {
  using type = float4;
  __device__ static float4 Make(float a, float b, float c, float d) { return make_float4(a, b, c, d); }
};
__device__ __forceinline__ uint16_t Bits(__half v) { return __half_as_ushort(v); }
__device__ __forceinline__ uint16_t Bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
template <typename T>
__device__ __forceinline__ uint32_t Pack2(T lo, T hi) {
  return uint32_t{Bits(lo)} | (uint32_t{Bits(hi)} << 16);
}
template <>
struct Vec4<__half> {
  using type = uint2;
  __device__ static uint2 Make(__half a, __half b, __half c, __half d) { return make_uint2(Pack2(a, b), Pack2(c, d)); }
};
template <>
struct Vec4<__nv_bfloat16> {
  using type = uint2;
  __device__ static uint2 Make(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c, __nv_bfloat16 d) {
    return make_uint2(Pack2(a, b), Pack2(c, d));
  }
};
template <>
struct Vec4<uint8_t> {
  using type = uint32_t;
  __device__ static uint32_t Make(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
    return uint32_t{a} | (uint32_t{b} << 8) | (uint32_t{c} << 16) | (uint32_t{d} << 24);
  }
};

template <typename T, bool kNchw>
__global__ void ConvertQuads(const uint32_t* __restrict__ in, T* __restrict__ out, uint64_t quads, uint64_t hw_quads,
                             Constants k) {
  using V = Vec4<T>;
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  for (uint64_t q = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; q < quads; q += stride) {
    const uint32_t w0 = in[q * 3], w1 = in[q * 3 + 1], w2 = in[q * 3 + 2];
    uint8_t p[12];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      p[i] = static_cast<uint8_t>(w0 >> (8 * i));
      p[4 + i] = static_cast<uint8_t>(w1 >> (8 * i));
      p[8 + i] = static_cast<uint8_t>(w2 >> (8 * i));
    }
    if constexpr (kNchw) {
      const uint64_t image = q / hw_quads;
      const uint64_t quad_in_image = q - image * hw_quads;
      auto* planes = reinterpret_cast<typename V::type*>(out);
#pragma unroll
      for (int c = 0; c < 3; ++c) {
        planes[(image * 3 + c) * hw_quads + quad_in_image] =
            V::Make(Convert<T>(p[c], c, k), Convert<T>(p[3 + c], c, k), Convert<T>(p[6 + c], c, k),
                    Convert<T>(p[9 + c], c, k));
      }
    } else {
      auto* dst = reinterpret_cast<typename V::type*>(out) + q * 3;
#pragma unroll
      for (int j = 0; j < 3; ++j) {
        dst[j] = V::Make(Convert<T>(p[4 * j], (4 * j) % 3, k), Convert<T>(p[4 * j + 1], (4 * j + 1) % 3, k),
                         Convert<T>(p[4 * j + 2], (4 * j + 2) % 3, k), Convert<T>(p[4 * j + 3], (4 * j + 3) % 3, k));
      }
    }
  }
}

template <typename T, bool kNchw>
__global__ void ConvertPixels(const uint8_t* __restrict__ in, T* __restrict__ out, uint64_t pixels, uint64_t hw,
                              Constants k) {
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < pixels; i += stride) {
    const uint64_t image = i / hw;
    const uint64_t p = i - image * hw;
#pragma unroll
    for (int c = 0; c < 3; ++c) {
      const T v = Convert<T>(in[i * 3 + c], c, k);
      if constexpr (kNchw) {
        out[(image * 3 + c) * hw + p] = v;
      } else {
        out[i * 3 + c] = v;
      }
    }
  }
}

constexpr int kThreads = 256;
constexpr uint64_t kMaxBlocks = 8192;  // a grid-stride loop covers the rest

template <typename T, bool kNchw>
cudaError_t Launch(const uint8_t* in, void* out, uint64_t n, uint64_t hw, const Constants& k, cudaStream_t stream) {
  const uint64_t pixels = n * hw;
  if (pixels == 0) return cudaSuccess;
  if (hw % 4 == 0) {
    const uint64_t quads = pixels / 4;
    const unsigned blocks = static_cast<unsigned>(std::min(kMaxBlocks, (quads + kThreads - 1) / kThreads));
    ConvertQuads<T, kNchw><<<blocks, kThreads, 0, stream>>>(reinterpret_cast<const uint32_t*>(in),
                                                            static_cast<T*>(out), quads, hw / 4, k);
  } else {
    const unsigned blocks = static_cast<unsigned>(std::min(kMaxBlocks, (pixels + kThreads - 1) / kThreads));
    ConvertPixels<T, kNchw><<<blocks, kThreads, 0, stream>>>(in, static_cast<T*>(out), pixels, hw, k);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchLayout(const uint8_t* in, void* out, uint64_t n, uint64_t hw, bool nchw, const Constants& k,
                         cudaStream_t stream) {
  return nchw ? Launch<T, true>(in, out, n, hw, k, stream) : Launch<T, false>(in, out, n, hw, k, stream);
}

}  // namespace

int LaunchConvert(const uint8_t* in, void* out, uint32_t n, uint32_t h, uint32_t w, int dtype, bool nchw,
                  const float mean[3], const float inv_std[3], void* stream) {
  Constants k{};
  for (int c = 0; c < 3; ++c) {
    k.mean[c] = mean[c];
    k.inv_std[c] = inv_std[c];
  }
  const uint64_t hw = uint64_t{h} * w;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0: return LaunchLayout<uint8_t>(in, out, n, hw, nchw, k, s);
    case 1: return LaunchLayout<float>(in, out, n, hw, nchw, k, s);
    case 2: return LaunchLayout<__half>(in, out, n, hw, nchw, k, s);
    case 3: return LaunchLayout<__nv_bfloat16>(in, out, n, hw, nchw, k, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace stoker::cuda
