// Move-only owners of CUDA runtime handles (streams, events, pinned and device memory), and the bridge from
// cudaError_t to Status. Only the CUDA build includes this header.
//
// Thread safety: a handle is a value; the CUDA calls behind it are thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "stoker/status.h"

namespace stoker::cuda {

inline Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return InternalError(std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

#define STOKER_CUDA_RETURN_IF_ERROR(call) STOKER_RETURN_IF_ERROR(::stoker::cuda::CudaStatus((call), #call))

template <typename T, typename Deleter>
class Handle {
 public:
  Handle() = default;
  explicit Handle(T value) : value_(value) {}
  Handle(Handle&& other) noexcept : value_(std::exchange(other.value_, T{})) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      Reset();
      value_ = std::exchange(other.value_, T{});
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { Reset(); }
  T get() const { return value_; }
  explicit operator bool() const { return value_ != T{}; }
  void Reset() {
    if (value_ != T{}) Deleter{}(value_);
    value_ = T{};
  }

 private:
  T value_{};
};

struct StreamDeleter {
  void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
};
struct EventDeleter {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
struct PinnedDeleter {
  void operator()(void* p) const { cudaFreeHost(p); }
};
struct DeviceDeleter {
  void operator()(void* p) const { cudaFree(p); }
};
using Stream = Handle<cudaStream_t, StreamDeleter>;
using Event = Handle<cudaEvent_t, EventDeleter>;
using PinnedMemory = Handle<void*, PinnedDeleter>;
using DeviceMemory = Handle<void*, DeviceDeleter>;

inline StatusOr<Stream> MakeStream() {
  cudaStream_t s = nullptr;
  STOKER_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}
// Timed events cost a little more to record; only the ones measured need it.
inline StatusOr<Event> MakeEvent(bool timed) {
  cudaEvent_t e = nullptr;
  STOKER_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, timed ? cudaEventDefault : cudaEventDisableTiming));
  return Event(e);
}
inline StatusOr<PinnedMemory> AllocatePinned(size_t bytes) {
  void* p = nullptr;
  STOKER_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  return PinnedMemory(p);
}
inline StatusOr<DeviceMemory> AllocateDevice(size_t bytes) {
  void* p = nullptr;
  STOKER_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  return DeviceMemory(p);
}

// For threads that stoker owns (the client's staging thread): makes `device` current for good. Unlike
// ScopedDevice it never restores: restoring a fresh thread's "current" device 0 would create a context on GPU 0
// (cudaSetDevice initialises the device's primary context), hundreds of MB there for every rank of the node.
inline Status BindThreadToDevice(int device) {
  thread_local int bound = -1;
  if (bound == device) return Status::Ok();
  STOKER_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  bound = device;
  return Status::Ok();
}

// Makes `device` current for a scope and restores the previous device after. Only where a call depends on the
// current device (allocations, the legacy default stream): event and stream calls name their device themselves.
// For the caller's threads (stoker's own threads use BindThreadToDevice).
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) {
      status_ = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
    } else {
      previous_ = -1;
    }
  }
  ~ScopedDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;
  Status status_;
};

}  // namespace stoker::cuda
