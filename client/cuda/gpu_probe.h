// GPU discovery for the client: which CUDA devices this process can use. This is where the client's CUDA path
// (pinned slots, per-device copy streams, normalisation kernels) hangs off; without CUDA in the build, or without
// a GPU on the machine, it reports no devices and the client delivers host batches.
//
// Thread safety: all functions may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stoker::client {

struct GpuDevice {
  int ordinal = 0;
  std::string name;
  std::string uuid;            // "GPU-xxxxxxxx-...", joins dcgm-exporter's UUID label
  uint64_t total_memory = 0;
  int compute_major = 0;
  int compute_minor = 0;
};

// True when this build has the CUDA path.
bool BuiltWithCuda();
// The devices visible to this process; empty without CUDA or without a GPU (the reason goes to *why).
std::vector<GpuDevice> ListGpus(std::string* why = nullptr);

}  // namespace stoker::client
