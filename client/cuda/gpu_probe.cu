// GPU discovery and the CUDA stall probe (gpu_probe.h): devices and UUIDs from the runtime, idle time from events.
#include <cuda_runtime.h>

#include <cstdio>

#include "client/cuda/gpu_probe.h"

namespace stoker::client {

bool BuiltWithCuda() { return true; }

std::vector<GpuDevice> ListGpus(std::string* why) {
  std::vector<GpuDevice> devices;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why != nullptr) *why = std::string("no usable CUDA device: ") + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return devices;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    GpuDevice d;
    d.ordinal = i;
    d.name = prop.name;
    char uuid[64];
    const unsigned char* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
    std::snprintf(uuid, sizeof(uuid), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                  b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    d.uuid = uuid;
    d.total_memory = prop.totalGlobalMem;
    d.compute_major = prop.major;
    d.compute_minor = prop.minor;
    devices.push_back(d);
  }
  if (devices.empty() && why != nullptr) *why = "no CUDA device";
  return devices;
}

}  // namespace stoker::client
