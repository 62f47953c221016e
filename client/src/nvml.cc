// Nvml (nvml.h): libnvidia-ml.so.1 loaded at run time, no header needed; readings by GPU UUID.
#include "client/src/nvml.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <sstream>
#include <vector>

#include "base/logging.h"
#include "client/src/nvml_abi.h"

namespace stoker::client {
namespace {

using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr unsigned kUuidBufferSize = 96;

}  // namespace

struct Nvml::Api {
  void* handle = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*device_count)(unsigned int*) = nullptr;
  nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*by_uuid)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;

  Status Check(nvmlReturn_t rc, const char* what) const {
    if (rc == kNvmlSuccess) return Status::Ok();
    return UnavailableError(std::string(what) + ": " + (error_string ? error_string(rc) : "NVML error") + " (" +
                            std::to_string(rc) + ")");
  }

  StatusOr<NvmlDeviceReading> Read(nvmlDevice_t device) const {
    NvmlDeviceReading r;
    char uuid_buffer[kUuidBufferSize] = {};
    STOKER_RETURN_IF_ERROR(Check(uuid(device, uuid_buffer, kUuidBufferSize), "nvmlDeviceGetUUID"));
    r.uuid = uuid_buffer;
    nvmlUtilization_t u{};
    STOKER_RETURN_IF_ERROR(Check(utilization(device, &u), "nvmlDeviceGetUtilizationRates"));
    r.utilization = u.gpu / 100.0;
    nvmlMemory_t m{};
    STOKER_RETURN_IF_ERROR(Check(memory(device, &m), "nvmlDeviceGetMemoryInfo"));
    r.memory_used = m.used;
    r.memory_total = m.total;
    return r;
  }
};

Nvml::Nvml(std::unique_ptr<Api> api) : api_(std::move(api)) {}

Nvml::~Nvml() {
  if (api_->shutdown) api_->shutdown();
  if (api_->handle) ::dlclose(api_->handle);
}

StatusOr<std::unique_ptr<Nvml>> Nvml::Load() {
  const char* configured = std::getenv("STOKER_NVML_LIBRARY");
  std::string path = configured && *configured ? configured : "libnvidia-ml.so.1";
  auto api = std::make_unique<Api>();
  api->handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->handle == nullptr) {
    const char* why = ::dlerror();
    return UnavailableError("cannot load " + path + " (no NVIDIA driver here?): " + (why ? why : "dlopen failed"));
  }
  auto bind = [&](auto& fn, const char* name) -> Status {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(api->handle, name));
    return fn ? Status::Ok() : UnavailableError(path + " has no " + name + " (too old a driver?)");
  };
  Status bound = Status::Ok();
  for (Status s : {bind(api->init, "nvmlInit_v2"), bind(api->shutdown, "nvmlShutdown"),
                   bind(api->error_string, "nvmlErrorString"), bind(api->device_count, "nvmlDeviceGetCount_v2"),
                   bind(api->by_index, "nvmlDeviceGetHandleByIndex_v2"),
                   bind(api->by_uuid, "nvmlDeviceGetHandleByUUID"), bind(api->uuid, "nvmlDeviceGetUUID"),
                   bind(api->utilization, "nvmlDeviceGetUtilizationRates"),
                   bind(api->memory, "nvmlDeviceGetMemoryInfo")}) {
    if (bound.ok() && !s.ok()) bound = s;
  }
  if (!bound.ok()) {
    ::dlclose(api->handle);
    return bound;
  }
  Status init = api->Check(api->init(), "nvmlInit_v2");
  if (!init.ok()) {
    api->shutdown = nullptr;  // nothing to shut down
    ::dlclose(api->handle);
    api->handle = nullptr;
    return init;
  }
  return std::unique_ptr<Nvml>(new Nvml(std::move(api)));
}

Nvml* Nvml::Shared() {
  static std::once_flag once;
  static Nvml* shared = nullptr;
  std::call_once(once, [] {
    auto loaded = Load();
    if (loaded.ok()) {
      shared = loaded->release();  // lives as long as the process
      STOKER_LOG(kInfo) << "NVML loaded: per-GPU utilisation and memory are exported";
    } else {
      STOKER_LOG(kInfo) << "no GPU metrics from NVML: " << loaded.status().message();
    }
  });
  return shared;
}

StatusOr<unsigned> Nvml::DeviceCount() const {
  unsigned n = 0;
  STOKER_RETURN_IF_ERROR(api_->Check(api_->device_count(&n), "nvmlDeviceGetCount_v2"));
  return n;
}

StatusOr<NvmlDeviceReading> Nvml::ReadIndex(unsigned index) const {
  nvmlDevice_t device = nullptr;
  STOKER_RETURN_IF_ERROR(api_->Check(api_->by_index(index, &device), "nvmlDeviceGetHandleByIndex_v2"));
  return api_->Read(device);
}

StatusOr<NvmlDeviceReading> Nvml::ReadUuid(const std::string& uuid) const {
  nvmlDevice_t device = nullptr;
  STOKER_RETURN_IF_ERROR(api_->Check(api_->by_uuid(uuid.c_str(), &device), "nvmlDeviceGetHandleByUUID"));
  return api_->Read(device);
}

StatusOr<std::string> Nvml::UuidForCudaOrdinal(int ordinal) const {
  if (ordinal < 0) return InvalidArgumentError("no GPU ordinal");
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr || *visible == '\0') {
    STOKER_ASSIGN_OR_RETURN(NvmlDeviceReading r, ReadIndex(static_cast<unsigned>(ordinal)));
    return r.uuid;
  }
  std::vector<std::string> entries;
  std::stringstream list(visible);
  for (std::string item; std::getline(list, item, ',');) entries.push_back(item);
  if (static_cast<size_t>(ordinal) >= entries.size()) {
    return InvalidArgumentError("CUDA ordinal " + std::to_string(ordinal) + " is not in CUDA_VISIBLE_DEVICES=" +
                                visible);
  }
  const std::string& entry = entries[static_cast<size_t>(ordinal)];
  if (entry.rfind("GPU-", 0) == 0) {
    STOKER_ASSIGN_OR_RETURN(NvmlDeviceReading r, ReadUuid(entry));  // NVML wants the full UUID
    return r.uuid;
  }
  char* end = nullptr;
  unsigned long index = std::strtoul(entry.c_str(), &end, 10);
  if (end == entry.c_str() || *end != '\0') {
    return InvalidArgumentError("CUDA_VISIBLE_DEVICES entry '" + entry + "' is neither an index nor a GPU- UUID");
  }
  STOKER_ASSIGN_OR_RETURN(NvmlDeviceReading r, ReadIndex(static_cast<unsigned>(index)));
  return r.uuid;
}

}  // namespace stoker::client
