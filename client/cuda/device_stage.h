// DeviceStage: the GPU half of a Loader, for one device. It owns `depth` slots, each a pinned host buffer of the
// batch's raw bytes (pixels, labels, sample ids), a device copy of them and a device buffer of the converted
// output, plus two non-blocking streams (copies, conversions) and per-slot events; and `spare` more pinned buffers
// that sealed batches are opened into as they arrive (spare_buffers()). Everything is allocated once.
//
// A batch goes through a slot like this:
//   Stage (the client's staging thread)  wait until the slot's last host->device copy is done (it normally is),
//       copy the received bytes once into the pinned slot, let the ZeroMQ message go (a batch that arrived in a
//       spare pinned buffer is not copied: that buffer becomes the slot's, the slot's old one a spare); on the
//       copy stream wait for
//       the consumer's release of the slot's previous batch, cudaMemcpyAsync, record `copied`; on the conversion
//       stream wait for `copied`, run the kernel, record `ready`.
//   ConsumerWaitsFor (Next)              the consumer's stream waits on `ready`: no host synchronisation.
//   RecordRelease (batch released)       record `released` on the consumer's stream; the next Stage of the slot
//                                        makes the copy stream wait on it.
// The client stages position g into slot g % depth only after the consumer released position g - depth, so a
// slot is never written while a kernel may still read it.
//
// Without CUDA in the build (device_stage_none.cc) Create fails with FailedPrecondition.
//
// Thread safety: Stage from one thread (the staging thread); the consumer calls from one other thread; RecordRelease
// from any thread; the accessors from any thread.
#pragma once

#include <cstdint>
#include <memory>

#include "client/src/received_batch.h"
#include "stoker/client_types.h"
#include "stoker/loader_types.h"
#include "stoker/status.h"

namespace stoker::client {

class DeviceStage final : public client::BatchStager {
 public:
  struct Shape {
    uint32_t batch = 0, height = 0, width = 0;
  };
  static StatusOr<std::shared_ptr<DeviceStage>> Create(int device, Shape shape, uint32_t depth,
                                                       const OutputFormat& format, uint32_t spare = 0);
  ~DeviceStage() override;
  DeviceStage(const DeviceStage&) = delete;
  DeviceStage& operator=(const DeviceStage&) = delete;

  uint32_t depth() const override;
  Status Stage(size_t slot, client::ReceivedBatch& batch, client::StageReport* report) override;
  std::shared_ptr<client::HostBufferPool> spare_buffers() const override;  // null without spares
  // Stage's device half, on what the slot's pinned buffer holds: after the consumer's release of the slot, the
  // host->device copy and the conversion. Stage calls it; bench/gpu_feed_bench times it alone against raw copies.
  Status Transfer(size_t slot);

  // The consumer's side. `stream` is a cudaStream_t; nullptr is the device's legacy default stream.
  Status ConsumerWaitsFor(size_t slot, void* stream);
  Status RecordRelease(size_t slot, void* stream);
  BatchView View(size_t slot) const;
  const uint8_t* HostPixels(size_t slot) const;  // the pinned copy of the received pixels (not while Stage runs)

  // Tensor parallelism (client/nccl/): the device copy of a slot's raw bytes, broadcast by the leader and received
  // into by the followers.
  void* DeviceRaw(size_t slot) const;
  Status StreamWaitsCopied(size_t slot, void* stream);    // before the leader broadcasts the slot
  Status StreamWaitsReleased(size_t slot, void* stream);  // before a follower receives into the slot
  Status ConvertAfter(size_t slot, void* stream);         // a follower: convert once `stream`'s work is done

  int device() const;
  uint64_t slot_bytes() const;    // pixels + labels + sample ids
  uint64_t pinned_bytes() const;  // (depth + spare) x slot_bytes
  uint64_t device_bytes() const;

  struct Impl;

 private:
  explicit DeviceStage(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Input stall on the GPU path (Client's StallProbe): ArmCudaStallProbe marks, on the consumer's stream, the end of
// the work queued before a Next(); if that wait had to block, the probe reports how long the stream had been idle
// when it ended. Made before the Client (which takes it in its options).
StatusOr<std::shared_ptr<StallProbe>> MakeCudaStallProbe(int device);

// InvalidArgument unless `stream` (a cudaStream_t; nullptr: the legacy default) belongs to `device`: the slots'
// events are recorded on the consumer's stream, which therefore must be of the Loader's device.
Status CheckConsumerStream(int device, void* stream);
Status ArmCudaStallProbe(StallProbe& probe, int device, void* stream);

}  // namespace stoker::client
