// DeviceStage with CUDA (see device_stage.h for the life of a slot).
#include "client/cuda/device_stage.h"

#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "client/cuda/cuda_handles.h"
#include "client/cuda/normalize.h"
#include "client/src/convert_host.h"
#include "base/sync.h"
#include "stoker/clock.h"

namespace stoker::client {

using cuda::CudaStatus;

namespace {

// How long the consumer's stream had been idle when a wait in Next() ended (see DeviceStage::ArmStallProbe).
class CudaStallProbe final : public StallProbe {
 public:
  static StatusOr<std::shared_ptr<CudaStallProbe>> Create(int device) {
    auto probe = std::make_shared<CudaStallProbe>(device);
    STOKER_ASSIGN_OR_RETURN(probe->drained_, cuda::MakeEvent(/*timed=*/true));
    STOKER_ASSIGN_OR_RETURN(probe->wait_end_, cuda::MakeEvent(/*timed=*/true));
    return probe;
  }

  // Armed by every Next(), re-marked each time. A wait taken in slices (the Python package's, to stay
  // interruptible) adds up right: each slice that times out is judged on its own, and once the stream has run dry
  // a new mark completes at once, so a later slice counts whole.
  explicit CudaStallProbe(int device) : device_(device) {}

  Status Arm(cudaStream_t stream) {
    MutexLock lock(mu_);
    stream_ = stream;
    armed_ = true;
    return CudaStatus(cudaEventRecord(drained_.get(), stream), "cudaEventRecord(drained)");
  }

  double StalledSeconds(std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point) override {
    MutexLock lock(mu_);
    if (!armed_) return 0;
    armed_ = false;
    // Still running what was queued before the wait: the GPU had work the whole time.
    if (cudaEventQuery(drained_.get()) != cudaSuccess) {
      cudaGetLastError();  // cudaErrorNotReady is not an error to keep
      return 0;
    }
    // It ran dry at `drained_`; a second event, queued behind nothing, marks now in the GPU's clock.
    std::optional<cuda::ScopedDevice> on;
    if (stream_ == nullptr) on.emplace(device_);  // the legacy default stream: the Loader's device's
    if (cudaEventRecord(wait_end_.get(), stream_) != cudaSuccess || cudaEventSynchronize(wait_end_.get()) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    float ms = 0;
    if (cudaEventElapsedTime(&ms, drained_.get(), wait_end_.get()) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return ms / 1000.0;  // the caller clamps it to the wait: idle time before Next() is not input stall
  }

 private:
  Mutex mu_;
  cuda::Event drained_;
  cuda::Event wait_end_;
  const int device_;
  cudaStream_t stream_ STOKER_GUARDED_BY(mu_) = nullptr;
  bool armed_ STOKER_GUARDED_BY(mu_) = false;
};

}  // namespace

struct DeviceStage::Impl {
  struct Slot {
    client::HostBufferPool::Buffer pinned;  // its pinned buffer, slot_bytes, from `buffers`
    uint8_t* raw = nullptr;      // its device copy
    void* out = nullptr;         // the converted batch (== raw when the format is the identity)
    cuda::Event copy_start, copied, ready, released;
    bool used = false;           // a transfer was ever queued from it (its events mean something)
  };

  int device = 0;
  Shape shape;
  OutputFormat format;
  NormalizeConstants constants{};
  // A slot's raw bytes: the pixels, then (from tail_offset, 16-byte aligned whatever the image size, so that the
  // model can read them as int64 tensors) the labels and the sample ids.
  uint64_t pixel_bytes = 0, tail_offset = 0, slot_bytes = 0, out_bytes = 0, device_bytes = 0;
  std::shared_ptr<client::HostBufferPool> buffers;  // depth + spare pinned buffers, in one allocation
  cuda::DeviceMemory device_memory;
  cuda::Stream copy_stream, convert_stream;
  std::vector<Slot> slots;

  // Records `copied` on `after` (the raw bytes are on the device once it passes), then converts behind it.
  Status Convert(Slot& s, cudaStream_t after) {
    STOKER_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(s.copied.get(), after), "cudaEventRecord(copied)"));
    if (format.IsIdentity()) return CudaStatus(cudaEventRecord(s.ready.get(), after), "cudaEventRecord(ready)");
    STOKER_RETURN_IF_ERROR(
        CudaStatus(cudaStreamWaitEvent(convert_stream.get(), s.copied.get(), 0), "cudaStreamWaitEvent(copied)"));
    STOKER_RETURN_IF_ERROR(CudaStatus(
        static_cast<cudaError_t>(cuda::LaunchConvert(s.raw, s.out, shape.batch, shape.height, shape.width,
                                                     static_cast<int>(format.dtype), format.layout == Layout::kNCHW,
                                                     constants.mean, constants.inv_std, convert_stream.get())),
        "conversion kernel"));
    return CudaStatus(cudaEventRecord(s.ready.get(), convert_stream.get()), "cudaEventRecord(ready)");
  }
};

namespace {
uint64_t AlignUp(uint64_t n) { return (n + 255) & ~uint64_t{255}; }
}  // namespace

StatusOr<std::shared_ptr<DeviceStage>> DeviceStage::Create(int device, Shape shape, uint32_t depth,
                                                            const OutputFormat& format, uint32_t spare) {
  STOKER_RETURN_IF_ERROR(format.Validate());
  if (depth == 0) return InvalidArgumentError("depth must be at least 1");
  if (shape.batch == 0 || shape.height == 0 || shape.width == 0) return InvalidArgumentError("empty batch shape");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return FailedPreconditionError("device " + std::to_string(device) + " asked for, but no CUDA device is usable");
  }
  if (device < 0 || device >= count) {
    return InvalidArgumentError("device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                                " CUDA devices)");
  }
  cuda::ScopedDevice on(device);
  STOKER_RETURN_IF_ERROR(on.status());
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  impl->shape = shape;
  impl->format = format;
  impl->constants = MakeNormalizeConstants(format);
  const uint64_t samples = uint64_t{shape.height} * shape.width * 3;
  impl->pixel_bytes = samples * shape.batch;
  impl->tail_offset = (impl->pixel_bytes + 15) & ~uint64_t{15};
  impl->slot_bytes = impl->tail_offset + uint64_t{shape.batch} * (sizeof(int64_t) + sizeof(uint64_t));
  impl->out_bytes = format.IsIdentity() ? 0 : impl->pixel_bytes * DTypeSize(format.dtype);
  const uint64_t per_slot = AlignUp(impl->slot_bytes) + AlignUp(impl->out_bytes);
  impl->device_bytes = per_slot * depth;
  {
    STOKER_ASSIGN_OR_RETURN(cuda::PinnedMemory pinned, cuda::AllocatePinned(impl->slot_bytes * (depth + spare)));
    auto memory = std::make_shared<cuda::PinnedMemory>(std::move(pinned));
    std::vector<uint8_t*> buffers;
    for (uint32_t i = 0; i < depth + spare; ++i) {
      buffers.push_back(static_cast<uint8_t*>(memory->get()) + i * impl->slot_bytes);
    }
    impl->buffers = client::HostBufferPool::Create(std::move(buffers), impl->slot_bytes, std::move(memory));
  }
  auto device_memory = cuda::AllocateDevice(impl->device_bytes);
  if (!device_memory.ok()) {
    return device_memory.status().WithContext("allocating " + std::to_string(impl->device_bytes >> 20) +
                                              " MiB for " + std::to_string(depth) + " slots on device " +
                                              std::to_string(device));
  }
  impl->device_memory = std::move(*device_memory);
  // Poison the outputs (all ones: NaN for the float types), so an element a kernel failed to write shows.
  STOKER_RETURN_IF_ERROR(CudaStatus(cudaMemset(impl->device_memory.get(), 0xff, impl->device_bytes), "cudaMemset"));
  STOKER_ASSIGN_OR_RETURN(impl->copy_stream, cuda::MakeStream());
  STOKER_ASSIGN_OR_RETURN(impl->convert_stream, cuda::MakeStream());
  impl->slots.resize(depth);
  auto* base = static_cast<uint8_t*>(impl->device_memory.get());
  for (uint32_t i = 0; i < depth; ++i) {
    Impl::Slot& s = impl->slots[i];
    s.pinned = impl->buffers->Take();
    s.raw = base + i * per_slot;
    s.out = format.IsIdentity() ? static_cast<void*>(s.raw) : s.raw + AlignUp(impl->slot_bytes);
    STOKER_ASSIGN_OR_RETURN(s.copy_start, cuda::MakeEvent(/*timed=*/true));
    STOKER_ASSIGN_OR_RETURN(s.copied, cuda::MakeEvent(/*timed=*/true));
    STOKER_ASSIGN_OR_RETURN(s.ready, cuda::MakeEvent(/*timed=*/false));
    STOKER_ASSIGN_OR_RETURN(s.released, cuda::MakeEvent(/*timed=*/false));
  }
  STOKER_RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize after allocation"));
  return std::shared_ptr<DeviceStage>(new DeviceStage(std::move(impl)));
}

DeviceStage::DeviceStage(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DeviceStage::~DeviceStage() {
  // Nothing may still read or write the slots when they are freed.
  cuda::ScopedDevice on(impl_->device);
  cudaStreamSynchronize(impl_->copy_stream.get());
  cudaStreamSynchronize(impl_->convert_stream.get());
  for (Impl::Slot& s : impl_->slots) {
    if (s.used) cudaEventSynchronize(s.released.get());
  }
}

uint32_t DeviceStage::depth() const { return static_cast<uint32_t>(impl_->slots.size()); }
int DeviceStage::device() const { return impl_->device; }
uint64_t DeviceStage::slot_bytes() const { return impl_->slot_bytes; }
uint64_t DeviceStage::pinned_bytes() const { return impl_->slot_bytes * impl_->buffers->size(); }
std::shared_ptr<client::HostBufferPool> DeviceStage::spare_buffers() const {
  return impl_->buffers->size() > impl_->slots.size() ? impl_->buffers : nullptr;
}
uint64_t DeviceStage::device_bytes() const { return impl_->device_bytes; }
const uint8_t* DeviceStage::HostPixels(size_t slot) const { return impl_->slots[slot].pinned.get(); }
void* DeviceStage::DeviceRaw(size_t slot) const { return impl_->slots[slot].raw; }

Status DeviceStage::Stage(size_t slot, client::ReceivedBatch& batch, client::StageReport* report) {
  Impl& m = *impl_;
  Impl::Slot& s = m.slots[slot];
  if (batch.pixel_bytes != m.pixel_bytes || batch.labels.size() != m.shape.batch ||
      batch.sample_ids.size() != m.shape.batch) {
    return InternalError("a batch of another shape reached the device stage");
  }
  STOKER_RETURN_IF_ERROR(cuda::BindThreadToDevice(m.device));
  // The pinned slot is free once its last transfer is done: normally long ago, as the consumer has since been
  // handed that batch and released it; a host running ahead of its GPU waits here, on the staging thread.
  if (s.used) {
    STOKER_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(s.copied.get()), "waiting for the slot's last copy"));
    float ms = 0;
    if (cudaEventElapsedTime(&ms, s.copy_start.get(), s.copied.get()) == cudaSuccess) {
      report->h2d_seconds = ms / 1000.0;
    } else {
      cudaGetLastError();
    }
  }
  // The pixels, frame by frame (ClientOptions::payload_frame_bytes), into the pinned slot: the one host copy. A
  // batch opened into a spare buffer needs none: that buffer becomes the slot's, and the slot's goes back to the
  // spares (its last transfer is done, and the consumer released its batch).
  if (batch.PayloadBytes() != m.pixel_bytes) {
    return InternalError("a batch's payload frames do not add up to its pixel bytes");
  }
  if (batch.opened) {
    s.pinned = std::move(batch.opened);  // the slot's old buffer goes back to the pool
  } else {
    const auto copy_start = std::chrono::steady_clock::now();
    batch.CopyPayloadTo(s.pinned.get());
    report->copy_seconds = ToSeconds(std::chrono::steady_clock::now() - copy_start);
  }
  uint8_t* tail = s.pinned.get() + m.tail_offset;
  std::memcpy(tail, batch.labels.data(), batch.labels.size() * sizeof(int64_t));
  std::memcpy(tail + batch.labels.size() * sizeof(int64_t), batch.sample_ids.data(),
              batch.sample_ids.size() * sizeof(uint64_t));
  batch.staged_pixels = s.pinned.get();
  batch.payload = zmq::message_t();  // the received copy is no longer needed: host memory stays bounded
  batch.more_payload.clear();
  STOKER_RETURN_IF_ERROR(Transfer(slot));
  report->h2d_bytes = m.slot_bytes;
  return Status::Ok();
}

Status DeviceStage::Transfer(size_t slot) {
  Impl& m = *impl_;
  Impl::Slot& s = m.slots[slot];
  STOKER_RETURN_IF_ERROR(cuda::BindThreadToDevice(m.device));
  cudaStream_t copy = m.copy_stream.get();
  // The device buffers are free once the consumer's stream has passed the release of the slot's last batch.
  STOKER_RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(copy, s.released.get(), 0), "cudaStreamWaitEvent(released)"));
  STOKER_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(s.copy_start.get(), copy), "cudaEventRecord(copy_start)"));
  STOKER_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(s.raw, s.pinned.get(), m.slot_bytes, cudaMemcpyHostToDevice, copy), "cudaMemcpyAsync"));
  STOKER_RETURN_IF_ERROR(m.Convert(s, copy));
  s.used = true;
  return Status::Ok();
}

Status DeviceStage::ConsumerWaitsFor(size_t slot, void* stream) {
  std::optional<cuda::ScopedDevice> on;
  if (stream == nullptr) on.emplace(impl_->device);  // the legacy default stream is the current device's
  return CudaStatus(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), impl_->slots[slot].ready.get(), 0),
                    "cudaStreamWaitEvent(ready)");
}

Status DeviceStage::RecordRelease(size_t slot, void* stream) {
  std::optional<cuda::ScopedDevice> on;
  if (stream == nullptr) on.emplace(impl_->device);
  return CudaStatus(cudaEventRecord(impl_->slots[slot].released.get(), static_cast<cudaStream_t>(stream)),
                    "cudaEventRecord(released)");
}

Status CheckConsumerStream(int device, void* stream) {
  if (stream == nullptr) return Status::Ok();  // the legacy default stream: taken on `device`
  int stream_device = -1;
  STOKER_RETURN_IF_ERROR(
      CudaStatus(cudaStreamGetDevice(static_cast<cudaStream_t>(stream), &stream_device), "cudaStreamGetDevice"));
  if (stream_device != device) {
    return InvalidArgumentError("the consumer stream is on device " + std::to_string(stream_device) +
                                ", the Loader's batches on device " + std::to_string(device) +
                                ": pass a stream of the Loader's device");
  }
  return Status::Ok();
}

StatusOr<std::shared_ptr<StallProbe>> MakeCudaStallProbe(int device) {
  cuda::ScopedDevice on(device);
  STOKER_RETURN_IF_ERROR(on.status());
  STOKER_ASSIGN_OR_RETURN(std::shared_ptr<CudaStallProbe> probe, CudaStallProbe::Create(device));
  return std::shared_ptr<StallProbe>(std::move(probe));
}

Status ArmCudaStallProbe(StallProbe& probe, int device, void* stream) {
  std::optional<cuda::ScopedDevice> on;
  if (stream == nullptr) on.emplace(device);
  return static_cast<CudaStallProbe&>(probe).Arm(static_cast<cudaStream_t>(stream));
}

Status DeviceStage::StreamWaitsCopied(size_t slot, void* stream) {
  return CudaStatus(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), impl_->slots[slot].copied.get(), 0),
                    "cudaStreamWaitEvent(copied)");
}

Status DeviceStage::StreamWaitsReleased(size_t slot, void* stream) {
  return CudaStatus(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), impl_->slots[slot].released.get(), 0),
                    "cudaStreamWaitEvent(released)");
}

Status DeviceStage::ConvertAfter(size_t slot, void* stream) {
  cuda::ScopedDevice on(impl_->device);  // a kernel launches only on a stream of the current device
  STOKER_RETURN_IF_ERROR(on.status());
  Impl::Slot& s = impl_->slots[slot];
  s.used = true;
  return impl_->Convert(s, static_cast<cudaStream_t>(stream));
}

BatchView DeviceStage::View(size_t slot) const {
  const Impl& m = *impl_;
  const Impl::Slot& s = m.slots[slot];
  BatchView v;
  v.device = m.device;
  v.dtype = m.format.dtype;
  v.layout = m.format.layout;
  v.data = s.out;
  const int64_t n = m.shape.batch, h = m.shape.height, w = m.shape.width;
  v.shape = {n, 3, h, w};
  v.strides = m.format.layout == Layout::kNCHW ? std::array<int64_t, 4>{3 * h * w, h * w, w, 1}
                                               : std::array<int64_t, 4>{3 * h * w, 1, 3 * w, 3};
  v.labels = reinterpret_cast<const int64_t*>(s.raw + m.tail_offset);
  v.sample_ids = reinterpret_cast<const uint64_t*>(s.raw + m.tail_offset + n * sizeof(int64_t));
  return v;
}

}  // namespace stoker::client
