// The subset of nvml.h the client uses (NVML's ABI is stable: these are the _v2 entry points of 2013 onwards),
// declared as nvml.h declares them, at global scope with C linkage: a call through a pointer whose parameter types
// are other types of the same name is undefined behaviour (UBSan's function check caught it with the test NVML).
// The client (nvml.cc) and the test stand-in for the library (tests/support/fake_nvml.cc) share these declarations.
#pragma once

extern "C" {
struct nvmlDevice_st;
typedef struct nvmlDevice_st* nvmlDevice_t;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
}  // extern "C"
