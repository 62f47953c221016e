// Collective in a build without CUDA or without nccl.h: every Loader that asks for tensor parallelism or
// agreement fails to open, with the reason.
#include "client/nccl/collective.h"

namespace stoker::client {

namespace {
Status NoNccl() {
  return FailedPreconditionError("this build of stoker has no NCCL support (it needs CUDA and nccl.h at build time)");
}
}  // namespace

struct Collective::Impl {};
StatusOr<std::unique_ptr<Collective>> Collective::Join(const CollectiveOptions&, int) { return NoNccl(); }
Collective::Collective(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Collective::~Collective() = default;
uint32_t Collective::size() const { return 1; }
uint32_t Collective::rank() const { return 0; }
void* Collective::stream() const { return nullptr; }
StatusOr<uint32_t> Collective::AgreeMax(uint32_t) { return NoNccl(); }
Status Collective::Broadcast(void*, size_t) { return NoNccl(); }
Status Collective::CopyToDevice(void*, const void*, size_t) { return NoNccl(); }
Status Collective::CopyToHost(void*, const void*, size_t) { return NoNccl(); }
Status Collective::WaitQueued() { return NoNccl(); }
Status Collective::WaitEvent(void*) { return NoNccl(); }
Status Collective::OrderBefore(void*) { return NoNccl(); }
void Collective::Abort() {}
bool Collective::broken() const { return true; }

struct CollectiveBuffers::Impl {};
StatusOr<std::unique_ptr<CollectiveBuffers>> CollectiveBuffers::Allocate(int, size_t, uint32_t) { return NoNccl(); }
CollectiveBuffers::CollectiveBuffers(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CollectiveBuffers::~CollectiveBuffers() = default;
uint8_t* CollectiveBuffers::host(uint32_t) const { return nullptr; }
void* CollectiveBuffers::device(uint32_t) const { return nullptr; }
size_t CollectiveBuffers::bytes() const { return 0; }
Status CollectiveBuffers::MarkUsed(uint32_t, void*) { return NoNccl(); }
Status CollectiveBuffers::WaitUnused(uint32_t, Collective&) { return NoNccl(); }

StatusOr<std::string> NewNcclIdHex() { return NoNccl(); }

}  // namespace stoker::client
