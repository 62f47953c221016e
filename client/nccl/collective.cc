// Collective over NCCL loaded at run time (see collective.h).
#include "client/nccl/collective.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "client/cuda/cuda_handles.h"
#include "base/logging.h"

namespace stoker::client {

using cuda::CudaStatus;

namespace {

// The NCCL entry points stoker uses, resolved from the shared library once per process.
struct NcclApi {
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&ncclCommFinalize) CommFinalize = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclBroadcast) Broadcast = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
};

StatusOr<const NcclApi*> LoadNccl() {
  static std::once_flag once;
  static NcclApi api;
  static Status loaded;
  std::call_once(once, [] {
    std::string tried;
    void* lib = nullptr;
    std::vector<std::string> names;
    if (const char* path = std::getenv("STOKER_NCCL_LIBRARY")) names.emplace_back(path);
    names.emplace_back("libnccl.so.2");
    names.emplace_back("libnccl.so");
    for (const std::string& name : names) {
      lib = ::dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (lib != nullptr) break;
      tried += (tried.empty() ? "" : "; ") + std::string(::dlerror());
    }
    if (lib == nullptr) {
      loaded = FailedPreconditionError("NCCL could not be loaded (" + tried +
                                       "): install NCCL, set STOKER_NCCL_LIBRARY, or import torch first");
      return;
    }
    auto resolve = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, symbol));
      if (fn == nullptr && loaded.ok()) loaded = FailedPreconditionError(std::string("NCCL lacks ") + symbol);
    };
    resolve(api.GetVersion, "ncclGetVersion");
    resolve(api.GetUniqueId, "ncclGetUniqueId");
    resolve(api.CommInitRankConfig, "ncclCommInitRankConfig");
    resolve(api.CommFinalize, "ncclCommFinalize");
    resolve(api.CommDestroy, "ncclCommDestroy");
    resolve(api.CommAbort, "ncclCommAbort");
    resolve(api.CommGetAsyncError, "ncclCommGetAsyncError");
    resolve(api.GetErrorString, "ncclGetErrorString");
    resolve(api.Broadcast, "ncclBroadcast");
    resolve(api.AllReduce, "ncclAllReduce");
    if (loaded.ok()) {
      int version = 0;
      api.GetVersion(&version);
      STOKER_LOG(kInfo) << "NCCL " << version << " loaded";
    }
  });
  if (!loaded.ok()) return loaded;
  return &api;
}

Status NcclStatus(const NcclApi& api, ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::Ok();
  return InternalError(std::string(what) + ": " + api.GetErrorString(r));
}

StatusOr<ncclUniqueId> ParseId(const std::string& hex) {
  ncclUniqueId id{};
  if (hex.size() != 2 * sizeof(id.internal)) {
    return InvalidArgumentError("an NCCL id is " + std::to_string(2 * sizeof(id.internal)) + " hex digits, not " +
                                std::to_string(hex.size()));
  }
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    unsigned value = 0;
    if (std::sscanf(hex.c_str() + 2 * i, "%2x", &value) != 1) return InvalidArgumentError("the NCCL id is not hex");
    id.internal[i] = static_cast<char>(value);
  }
  return id;
}

}  // namespace

StatusOr<std::string> NewNcclIdHex() {
  STOKER_ASSIGN_OR_RETURN(const NcclApi* api, LoadNccl());
  ncclUniqueId id{};
  STOKER_RETURN_IF_ERROR(NcclStatus(*api, api->GetUniqueId(&id), "ncclGetUniqueId"));
  std::string hex;
  char two[3];
  for (char c : id.internal) {
    std::snprintf(two, sizeof(two), "%02x", static_cast<unsigned char>(c));
    hex += two;
  }
  return hex;
}

struct Collective::Impl {
  const NcclApi* api = nullptr;
  CollectiveOptions options;
  int device = 0;
  ncclComm_t comm = nullptr;
  bool broken = false;  // aborted after a failure or a deadline: every later call fails at once
  cuda::Stream stream;
  cuda::Event queued;
  cuda::DeviceMemory vote_device;
  cuda::PinnedMemory vote_host;

  // The communicator is non-blocking (so that no call can hang past the deadline): a call may answer
  // ncclInProgress, and the next one may only be made once ncclCommGetAsyncError says it is done.
  Status Check(ncclResult_t r, const char* what) {
    if (r == ncclInProgress) {
      return Poll(what, [&]() -> std::optional<Status> {
        ncclResult_t state = ncclInProgress;
        if (api->CommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
        if (state == ncclInProgress) return std::nullopt;
        return NcclStatus(*api, state, what);
      });
    }
    Status s = NcclStatus(*api, r, what);
    if (!s.ok()) Abort();
    return s;
  }

  // Host wait for `event` with the deadline, watching NCCL's asynchronous errors meanwhile (a peer gone).
  Status WaitEvent(cudaEvent_t event) {
    return Poll("a collective", [&]() -> std::optional<Status> {
      cudaError_t done = cudaEventQuery(event);
      if (done == cudaSuccess) return Status::Ok();
      if (done != cudaErrorNotReady) return CudaStatus(done, "waiting for NCCL");
      ncclResult_t async = ncclSuccess;
      api->CommGetAsyncError(comm, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        return NcclStatus(*api, async, "NCCL failed while this member waited");
      }
      return std::nullopt;
    });
  }

  // Calls `step` until it answers (nullopt: not yet), with the deadline; a failure or the deadline aborts the
  // communicator so that no kernel keeps waiting for a member that is not coming. Short sleeps, growing to 200 us:
  // the wait is usually one step of the peers.
  Status Poll(const char* what, const std::function<std::optional<Status>()>& step) {
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    auto pause = std::chrono::microseconds(5);
    while (true) {
      if (std::optional<Status> done = step()) {
        if (!done->ok()) Abort();
        return *done;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        Abort();
        return DeadlineExceededError(std::string(what) + " of " + std::to_string(options.size) +
                                     " members did not complete within " + std::to_string(options.timeout.count()) +
                                     " ms: a member never arrived");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(200));
    }
  }

  void Abort() {
    if (comm != nullptr && !broken) api->CommAbort(comm);
    broken = true;
  }

  Status Wait() {
    STOKER_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(queued.get(), stream.get()), "cudaEventRecord"));
    return WaitEvent(queued.get());
  }
};

StatusOr<std::unique_ptr<Collective>> Collective::Join(const CollectiveOptions& options, int device) {
  if (options.size < 2) return InvalidArgumentError("a collective needs at least 2 members");
  if (options.rank >= options.size) {
    return InvalidArgumentError("member " + std::to_string(options.rank) + " of " + std::to_string(options.size));
  }
  if (device < 0) return InvalidArgumentError("NCCL needs a device: set device >= 0");
  STOKER_ASSIGN_OR_RETURN(ncclUniqueId id, ParseId(options.nccl_id));
  STOKER_ASSIGN_OR_RETURN(const NcclApi* api, LoadNccl());
  cuda::ScopedDevice on(device);
  STOKER_RETURN_IF_ERROR(on.status());
  auto impl = std::make_unique<Impl>();
  impl->api = api;
  impl->options = options;
  impl->device = device;
  STOKER_ASSIGN_OR_RETURN(impl->stream, cuda::MakeStream());
  STOKER_ASSIGN_OR_RETURN(impl->queued, cuda::MakeEvent(/*timed=*/false));
  STOKER_ASSIGN_OR_RETURN(impl->vote_device, cuda::AllocateDevice(sizeof(uint32_t)));
  STOKER_ASSIGN_OR_RETURN(impl->vote_host, cuda::AllocatePinned(sizeof(uint32_t)));
  // Non-blocking, so that a member that never arrives is a DeadlineExceeded after options.timeout, not a hang.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = api->CommInitRankConfig(&impl->comm, static_cast<int>(options.size), id,
                                           static_cast<int>(options.rank), &config);
  if (r != ncclSuccess && r != ncclInProgress) return NcclStatus(*api, r, "ncclCommInitRankConfig");
  STOKER_RETURN_IF_ERROR(impl->Check(r, "joining the NCCL communicator"));
  return std::unique_ptr<Collective>(new Collective(std::move(impl)));
}

Collective::Collective(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Collective::~Collective() {
  if (impl_->comm == nullptr) return;
  cuda::ScopedDevice on(impl_->device);
  Impl& m = *impl_;
  if (m.broken) return;  // aborted already
  // A peer that left early would make a clean finalize wait for it: finish what is queued, with the deadline,
  // then finalize (which completes with the peers, also with the deadline); anything else aborts.
  if (m.Wait().ok() && m.Check(m.api->CommFinalize(m.comm), "ncclCommFinalize").ok()) {
    m.api->CommDestroy(m.comm);
  } else {
    m.Abort();
  }
}

void Collective::Abort() { impl_->Abort(); }
bool Collective::broken() const { return impl_->broken; }

uint32_t Collective::size() const { return impl_->options.size; }
uint32_t Collective::rank() const { return impl_->options.rank; }
void* Collective::stream() const { return impl_->stream.get(); }

StatusOr<uint32_t> Collective::AgreeMax(uint32_t vote) {
  Impl& m = *impl_;
  if (m.broken) return FailedPreconditionError("the collective failed earlier");
  auto* host = static_cast<uint32_t*>(m.vote_host.get());
  *host = vote;
  cudaStream_t s = m.stream.get();
  STOKER_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(m.vote_device.get(), host, sizeof(uint32_t), cudaMemcpyHostToDevice, s), "vote"));
  STOKER_RETURN_IF_ERROR(m.Check(
      m.api->AllReduce(m.vote_device.get(), m.vote_device.get(), 1, ncclUint32, ncclMax, m.comm, s), "ncclAllReduce"));
  STOKER_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(host, m.vote_device.get(), sizeof(uint32_t), cudaMemcpyDeviceToHost, s), "vote"));
  STOKER_RETURN_IF_ERROR(m.Wait());
  return *host;
}

Status Collective::Broadcast(void* device_buffer, size_t bytes) {
  Impl& m = *impl_;
  if (m.broken) return FailedPreconditionError("the collective failed earlier");
  return m.Check(m.api->Broadcast(device_buffer, device_buffer, bytes, ncclUint8, 0, m.comm, m.stream.get()),
                 "ncclBroadcast");
}

Status Collective::CopyToDevice(void* device, const void* pinned, size_t bytes) {
  return CudaStatus(cudaMemcpyAsync(device, pinned, bytes, cudaMemcpyHostToDevice, impl_->stream.get()),
                    "cudaMemcpyAsync(metadata)");
}

Status Collective::CopyToHost(void* pinned, const void* device, size_t bytes) {
  return CudaStatus(cudaMemcpyAsync(pinned, device, bytes, cudaMemcpyDeviceToHost, impl_->stream.get()),
                    "cudaMemcpyAsync(metadata)");
}

Status Collective::WaitQueued() {
  if (impl_->broken) return FailedPreconditionError("the collective failed earlier");
  return impl_->Wait();
}

Status Collective::WaitEvent(void* event) {
  if (impl_->broken) return FailedPreconditionError("the collective failed earlier");
  return impl_->WaitEvent(static_cast<cudaEvent_t>(event));
}

Status Collective::OrderBefore(void* other) {
  Impl& m = *impl_;
  std::optional<cuda::ScopedDevice> on;
  if (other == nullptr) on.emplace(m.device);
  STOKER_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(m.queued.get(), m.stream.get()), "cudaEventRecord"));
  return CudaStatus(cudaStreamWaitEvent(static_cast<cudaStream_t>(other), m.queued.get(), 0), "cudaStreamWaitEvent");
}

struct CollectiveBuffers::Impl {
  size_t bytes = 0;
  std::vector<cuda::PinnedMemory> host;
  std::vector<cuda::DeviceMemory> device;
  std::vector<cuda::Event> used;
};

StatusOr<std::unique_ptr<CollectiveBuffers>> CollectiveBuffers::Allocate(int device, size_t bytes, uint32_t count) {
  cuda::ScopedDevice on(device);
  STOKER_RETURN_IF_ERROR(on.status());
  auto impl = std::make_unique<Impl>();
  impl->bytes = bytes;
  for (uint32_t i = 0; i < count; ++i) {
    STOKER_ASSIGN_OR_RETURN(auto host, cuda::AllocatePinned(bytes));
    STOKER_ASSIGN_OR_RETURN(auto dev, cuda::AllocateDevice(bytes));
    std::memset(host.get(), 0, bytes);
    STOKER_ASSIGN_OR_RETURN(auto used, cuda::MakeEvent(/*timed=*/false));
    impl->host.push_back(std::move(host));
    impl->device.push_back(std::move(dev));
    impl->used.push_back(std::move(used));
  }
  return std::unique_ptr<CollectiveBuffers>(new CollectiveBuffers(std::move(impl)));
}

CollectiveBuffers::CollectiveBuffers(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CollectiveBuffers::~CollectiveBuffers() = default;
uint8_t* CollectiveBuffers::host(uint32_t i) const { return static_cast<uint8_t*>(impl_->host[i].get()); }
void* CollectiveBuffers::device(uint32_t i) const { return impl_->device[i].get(); }
size_t CollectiveBuffers::bytes() const { return impl_->bytes; }
Status CollectiveBuffers::MarkUsed(uint32_t i, void* stream) {
  return CudaStatus(cudaEventRecord(impl_->used[i].get(), static_cast<cudaStream_t>(stream)), "cudaEventRecord");
}
Status CollectiveBuffers::WaitUnused(uint32_t i, Collective& collective) {
  return collective.WaitEvent(impl_->used[i].get());
}

}  // namespace stoker::client
