// Test kernels (see test_kernels.h).
#include <cuda_runtime.h>

#include "client/cuda/test_kernels.h"

namespace stoker::cuda::testing {
namespace {

__global__ void Spin(unsigned long long cycles) {
  const unsigned long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

__global__ void Checksum(const uint8_t* bytes, size_t count, const int64_t* labels, const uint64_t* ids, uint32_t n,
                         unsigned long long* out) {
  unsigned long long sum = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    sum += static_cast<unsigned long long>(bytes[i]) * (i % 251 + 1);
  }
  atomicAdd(&out[0], sum);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    unsigned long long l = 0, s = 0;
    for (uint32_t i = 0; i < n; ++i) {
      l += static_cast<unsigned long long>(labels[i]);
      s += ids[i];
    }
    out[1] = l;
    out[2] = s;
  }
}

}  // namespace

int LaunchSpin(void* stream, uint32_t microseconds) {
  int device = 0, khz = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device);
  Spin<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<unsigned long long>(khz) * microseconds / 1000);
  return cudaGetLastError();
}

int LaunchChecksum(const uint8_t* bytes, size_t count, const int64_t* labels, const uint64_t* ids, uint32_t n,
                   unsigned long long* out, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  cudaMemsetAsync(out, 0, 3 * sizeof(unsigned long long), s);
  Checksum<<<256, 256, 0, s>>>(bytes, count, labels, ids, n, out);
  return cudaGetLastError();
}

uint64_t HostChecksum(const uint8_t* bytes, size_t count) {
  uint64_t sum = 0;
  for (size_t i = 0; i < count; ++i) sum += uint64_t{bytes[i]} * (i % 251 + 1);
  return sum;
}

}  // namespace stoker::cuda::testing
