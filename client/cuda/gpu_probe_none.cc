// The probe in a build without CUDA: no devices, and a reason that says so.
#include "client/cuda/gpu_probe.h"

namespace stoker::client {

bool BuiltWithCuda() { return false; }

std::vector<GpuDevice> ListGpus(std::string* why) {
  if (why != nullptr) *why = "this build has no CUDA (STOKER_WITH_CUDA=OFF)";
  return {};
}

}  // namespace stoker::client
