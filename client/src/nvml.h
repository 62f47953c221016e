// Nvml: NVIDIA's management library, loaded at run time. libnvidia-ml.so.1 ships with the driver, not with the
// CUDA toolkit (and there is no nvml.h to build against), so the client dlopens it and declares the few entry
// points it uses. Where it is absent — no driver, CI, a CPU-only machine — Load() says why and the client simply
// exports no stoker_gpu_* metrics.
//
// The library path is $STOKER_NVML_LIBRARY if set (tests point it at a stand-in), else libnvidia-ml.so.1.
//
// Thread safety: NVML itself is thread-safe; this wrapper holds no mutable state after Load().
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "stoker/status.h"

namespace stoker::client {

struct NvmlDeviceReading {
  std::string uuid;            // "GPU-…": joins dcgm-exporter's UUID label
  double utilization = 0;      // fraction of the last sample period in which a kernel ran (coarse: "busy")
  uint64_t memory_used = 0;    // bytes
  uint64_t memory_total = 0;
};

class Nvml {
 public:
  // Loads and initialises NVML. Errors: Unavailable with the loader's or NVML's own words.
  static StatusOr<std::unique_ptr<Nvml>> Load();
  // The process-wide instance, loaded on first use; null if unavailable (the reason is logged once).
  static Nvml* Shared();
  ~Nvml();

  StatusOr<unsigned> DeviceCount() const;
  StatusOr<NvmlDeviceReading> ReadIndex(unsigned index) const;
  StatusOr<NvmlDeviceReading> ReadUuid(const std::string& uuid) const;
  // The UUID of the device a CUDA ordinal names in this process, honouring CUDA_VISIBLE_DEVICES (indices or
  // UUIDs). NVML numbers devices by PCI bus; CUDA does too when CUDA_DEVICE_ORDER=PCI_BUS_ID, and on the usual
  // single-model machine the orders agree either way.
  StatusOr<std::string> UuidForCudaOrdinal(int ordinal) const;

  struct Api;

 private:
  explicit Nvml(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace stoker::client
