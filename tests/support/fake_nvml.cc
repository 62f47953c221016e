// A stand-in for libnvidia-ml.so.1 with two devices and fixed readings, for machines without an NVIDIA driver
// (CI): the client's NVML code path — dlopen, symbol lookup, CUDA_VISIBLE_DEVICES mapping, the stoker_gpu_*
// metrics — runs against it when STOKER_NVML_LIBRARY points here. The real library is exercised on the GPU
// machine (bench/gpu_machine.sh). Exports the C entry points with NVML's names and signatures.
#include <cstring>

#include "client/src/nvml_abi.h"

extern "C" {

struct nvmlDevice_st {
  int index;
};

namespace {
nvmlDevice_st devices[2] = {{0}, {1}};
const char* kUuids[2] = {"GPU-0fa4e000-0000-4000-8000-000000000000", "GPU-0fa4e000-0000-4000-8000-000000000001"};
bool initialised = false;
constexpr int kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotFound = 6;
}  // namespace

int nvmlInit_v2() {
  initialised = true;
  return kSuccess;
}
int nvmlShutdown() {
  initialised = false;
  return kSuccess;
}
const char* nvmlErrorString(int rc) { return rc == kNotFound ? "Not Found" : "Fake NVML error"; }
int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!initialised) return kUninitialized;
  *count = 2;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (!initialised) return kUninitialized;
  if (index >= 2) return kInvalidArgument;
  *device = &devices[index];
  return kSuccess;
}
int nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  for (int i = 0; i < 2; ++i) {
    if (std::strcmp(uuid, kUuids[i]) == 0) {
      *device = &devices[i];
      return kSuccess;
    }
  }
  return kNotFound;
}
int nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  if (length < std::strlen(kUuids[device->index]) + 1) return kInvalidArgument;
  std::strcpy(uuid, kUuids[device->index]);
  return kSuccess;
}
int nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* u) {
  u->gpu = device->index == 0 ? 37 : 62;
  u->memory = 10;
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* m) {
  m->total = 80ull << 30;
  m->used = (1ull + static_cast<unsigned long long>(device->index)) << 30;
  m->free = m->total - m->used;
  return kSuccess;
}

}  // extern "C"
