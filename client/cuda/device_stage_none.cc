// DeviceStage in a build without CUDA: a Loader asked for a device fails to open with a clear reason, and the
// host path is all there is.
#include "client/cuda/device_stage.h"

namespace stoker::client {

struct DeviceStage::Impl {};

StatusOr<std::shared_ptr<DeviceStage>> DeviceStage::Create(int device, Shape, uint32_t, const OutputFormat&,
                                                            uint32_t) {
  return FailedPreconditionError("device " + std::to_string(device) +
                                 " asked for, but this build of stoker has no CUDA (STOKER_WITH_CUDA=OFF): use "
                                 "device -1 for host batches");
}

DeviceStage::DeviceStage(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceStage::~DeviceStage() = default;

// Never reached: no DeviceStage exists without CUDA.
uint32_t DeviceStage::depth() const { return 0; }
Status DeviceStage::Stage(size_t, client::ReceivedBatch&, client::StageReport*) { return UnimplementedError("no CUDA"); }
Status DeviceStage::Transfer(size_t) { return UnimplementedError("no CUDA"); }
std::shared_ptr<HostBufferPool> DeviceStage::spare_buffers() const { return nullptr; }
Status CheckConsumerStream(int, void*) { return UnimplementedError("no CUDA"); }
Status DeviceStage::ConsumerWaitsFor(size_t, void*) { return UnimplementedError("no CUDA"); }
Status DeviceStage::RecordRelease(size_t, void*) { return UnimplementedError("no CUDA"); }
BatchView DeviceStage::View(size_t) const { return {}; }
const uint8_t* DeviceStage::HostPixels(size_t) const { return nullptr; }
void* DeviceStage::DeviceRaw(size_t) const { return nullptr; }
Status DeviceStage::StreamWaitsCopied(size_t, void*) { return UnimplementedError("no CUDA"); }
Status DeviceStage::StreamWaitsReleased(size_t, void*) { return UnimplementedError("no CUDA"); }
Status DeviceStage::ConvertAfter(size_t, void*) { return UnimplementedError("no CUDA"); }
int DeviceStage::device() const { return -1; }
uint64_t DeviceStage::slot_bytes() const { return 0; }
uint64_t DeviceStage::pinned_bytes() const { return 0; }
uint64_t DeviceStage::device_bytes() const { return 0; }

StatusOr<std::shared_ptr<StallProbe>> MakeCudaStallProbe(int) { return UnimplementedError("no CUDA"); }
Status ArmCudaStallProbe(StallProbe&, int, void*) { return UnimplementedError("no CUDA"); }

}  // namespace stoker::client
