// stoker::Loader — batches ready for the model. A Loader is one rank's Client plus the last steps a training
// step needs: each batch lands once in a pinned host slot, crosses to the GPU on the device's own copy stream, and
// a CUDA kernel turns its uint8 NHWC pixels into the dtype and layout the model wants, normalised by a per-channel
// mean and std (what APEX's data_prefetcher does in Python, here in C++ and off the training thread). Without a
// device (device = -1, or a build or machine without CUDA) the same API delivers host batches, converted on the
// host.
//
//   stoker::LoaderOptions o;
//   o.client.coordinator = "tcp://stoker-coordinator:7400";  o.client.job = "resnet50";  o.client.spec = spec;
//   o.device = 0;  o.output.dtype = stoker::DType::kBFloat16;  o.output.layout = stoker::Layout::kNHWC;
//   auto loader = stoker::Loader::Open(o);                       // StatusOr<unique_ptr<Loader>>
//   while (true) {
//     auto d = (*loader)->Next(stream);                            // stream: the consumer's cudaStream_t
//     if (d->kind != stoker::LoaderDelivery::Kind::kBatch) { ... end of epoch / job / agreed stop ... }
//     train(d->batch.view(), stream);                             // device pointers, shape, strides
//   }                                                             // destroying the batch returns its slot
//
// Ordering: Next(stream) makes `stream` wait (cudaStreamWaitEvent) for the batch's conversion; it never
// synchronises the device. Releasing a batch records an event on that same stream, and the slot's buffers are
// written again only after the stream has passed it: work queued on `stream` before the release may still read
// them. Work on other streams must be ordered after `stream` by the caller.
//
// Memory, per Loader: `depth` pinned slots of batch bytes (pixels + labels + sample ids), allocated once, and on
// the device `depth` x (that + the converted output). The host window (client.prefetch) bounds what workers may
// send ahead; depth (<= prefetch) bounds what sits in pinned and device memory.
//
// Tensor parallelism (tensor_parallel.size > 1): the group's member 0 is the stoker rank; it fetches each batch once
// and broadcasts it over NCCL to the other members, which open a Loader with the same options (their client
// options name the same job and rank but they never register). Agreement (agreement.size > 1): the data-parallel
// ranks vote over NCCL at every step, so that when one rank is asked to stop (RequestStop) or loses its stream,
// every rank stops before the same batch (Kind::kStopped), and their checkpoints name that batch.
//
// Errors: DeadlineExceeded (no batch within the timeout; with agreement, any rank's) and ResourceExhausted (the
// consumer holds `depth` unreleased batches) are retryable: nothing was taken, call Next() again. Any other error
// is final for this Loader, and with agreement or tensor parallelism the other members stop before the same batch.
// Every wait has a deadline: Next()'s timeout, and the collectives' (CollectiveOptions::timeout), after which an
// NCCL communicator whose member never came is aborted rather than waited on.
//
// Thread safety: Next(), Checkpoint() and RequestStop()'s effect belong to one consumer thread; RequestStop()
// itself, Stats() and releasing batches are safe from any thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "stoker/status.h"
#include "stoker/client.h"

namespace stoker {

class FlagSet;

enum class DType : uint8_t { kUInt8, kFloat32, kFloat16, kBFloat16 };
enum class Layout : uint8_t { kNCHW, kNHWC };

const char* DTypeName(DType d);
const char* LayoutName(Layout l);
size_t DTypeSize(DType d);

// What the model reads. uint8 keeps the pixels as they are (only the layout may change); the float types are
// (pixel - mean[c]) / std[c], computed in float32 as (pixel - mean[c]) * (1 / std[c]) and rounded to nearest even.
struct OutputFormat {
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kNCHW;
  std::array<float, 3> mean = {123.675f, 116.28f, 103.53f};  // ImageNet's, in pixel units (0-255)
  std::array<float, 3> std = {58.395f, 57.12f, 57.375f};

  Status Validate() const;
  // True when the output is the received pixels byte for byte (uint8, NHWC): nothing to convert.
  bool IsIdentity() const { return dtype == DType::kUInt8 && layout == Layout::kNHWC; }
};

// A 128-byte NCCL unique id as 256 hex digits: made by one member (NcclUniqueIdHex) and given to all.
struct CollectiveOptions {
  std::string nccl_id;    // hex; required when size > 1
  uint32_t size = 1;      // 1: off
  uint32_t rank = 0;      // 0 .. size-1
  std::chrono::milliseconds timeout{300000};  // a member that never arrives: the others fail after this
};

struct LoaderOptions {
  ClientOptions client;   // the stoker rank; client.prefetch is the host window
  int device = -1;        // CUDA ordinal; -1: host batches
  uint32_t depth = 4;     // pinned + device slots (1 .. client.prefetch)
  OutputFormat output;
  CollectiveOptions tensor_parallel;  // a group sharing one stoker rank (member 0 fetches)
  CollectiveOptions agreement;        // the data-parallel ranks, one member each (the group's member 0 under TP)
};

// The Loader's options as flags, for the C ABI (stoker/c_api.h) and the command line: the client's
// (--coordinator, --rank, --prefetch, --credits, --client-id, --resume-token, --attach, --metrics-listen,
// --connect-timeout), the job spec's (--job, --manifest, --batch-size, ...; see AddJobSpecFlags) and the Loader's
// (--device, --depth, --dtype, --layout, --mean, --std, --tp-id/size/rank, --agree-id/size/rank,
// --collective-timeout). Registers them on construction; Finish() after parsing checks and returns the options.
class LoaderFlags {
 public:
  explicit LoaderFlags(FlagSet& flags);
  LoaderFlags(const LoaderFlags&) = delete;
  LoaderFlags& operator=(const LoaderFlags&) = delete;
  StatusOr<LoaderOptions> Finish() const;

 private:
  LoaderOptions options_;
  JobSpec spec_;
  bool attach_ = false;
  int64_t device_ = -1;
  std::string dtype_ = "float32", layout_ = "nchw", mean_, std_, connect_timeout_ = "30s", collective_timeout_ = "300s";
};

// Where one batch is, in the model's terms. Logical shape is always (N, C, H, W); strides (in elements) say the
// memory order: NCHW is contiguous, NHWC is PyTorch's channels_last.
struct BatchView {
  int device = -1;                 // CUDA ordinal, -1: host memory
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kNCHW;
  void* data = nullptr;
  std::array<int64_t, 4> shape{};
  std::array<int64_t, 4> strides{};
  const int64_t* labels = nullptr;       // on the same device as data: -1 for quarantined samples
  const uint64_t* sample_ids = nullptr;  // on the same device as data
  uint64_t bytes() const;
};

class LoadedBatch {
 public:
  LoadedBatch() = default;
  LoadedBatch(LoadedBatch&&) noexcept;
  LoadedBatch& operator=(LoadedBatch&&) noexcept;
  ~LoadedBatch();

  bool valid() const { return state_ != nullptr; }
  const BatchView& view() const;
  uint32_t epoch() const;
  uint64_t index() const;
  uint64_t position() const;
  uint32_t size() const;
  std::span<const int64_t> labels() const;      // host copies of what view() has on the device
  std::span<const uint64_t> sample_ids() const;
  std::span<const uint8_t> flags() const;       // bit 1: padding, bit 2: quarantined
  const uint8_t* host_pixels() const;           // the received uint8 NHWC pixels (pinned on the GPU path)

  // Returns the slot: on the GPU path once the consumer stream has passed this point. Any thread.
  void Release();

  struct State;  // private: the Loader's bookkeeping for one handed-out batch

 private:
  friend class Loader;
  explicit LoadedBatch(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

struct LoaderDelivery {
  enum class Kind { kBatch, kEndOfEpoch, kEndOfJob, kStopped };
  Kind kind = Kind::kBatch;
  uint32_t epoch = 0;
  LoadedBatch batch;  // valid for kBatch only
};

struct LoaderStats {
  ClientStats client;          // the tensor-parallel leader's; followers report zeros there
  int device = -1;
  uint32_t depth = 0;
  uint64_t pinned_bytes = 0;   // exactly depth x slot bytes; 0 on the host path
  uint64_t device_bytes = 0;
  uint64_t slot_bytes = 0;     // pixels + labels + sample ids of one batch
  uint64_t batches = 0;        // batches Next() returned
  double wait_seconds = 0;     // time Next() blocked (a follower: waiting for the leader's broadcast too)
  double agreement_seconds = 0;  // time spent in the agreement step
  uint64_t agreements = 0;
  uint64_t broadcast_bytes = 0;  // tensor parallel: bytes sent (leader) or received (follower)
};

class Loader {
 public:
  // Errors: those of Client::Connect; InvalidArgument for bad options; FailedPrecondition when a device is asked
  // for but the build has no CUDA or the device cannot be used, or NCCL cannot be loaded.
  static StatusOr<std::unique_ptr<Loader>> Open(const LoaderOptions& options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch in plan order (see the top of this file for the stream contract). consumer_stream is a
  // cudaStream_t (nullptr: the legacy default stream); ignored on the host path.
  StatusOr<LoaderDelivery> Next(void* consumer_stream = nullptr,
                                std::chrono::milliseconds timeout = std::chrono::milliseconds::max());

  // Asks every rank to stop at the same batch (needs agreement, else only this rank stops). Any thread.
  void RequestStop();
  // The client's checkpoint token (a tensor-parallel follower has none: empty).
  std::string Checkpoint() const;
  LoaderStats Stats() const;
  const JobSpec& spec() const;
  uint64_t steps_per_epoch() const;
  bool on_device() const;

  class Impl;

 private:
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A fresh NCCL unique id (hex) for CollectiveOptions::nccl_id; FailedPrecondition where NCCL cannot be loaded.
StatusOr<std::string> NcclUniqueIdHex();

}  // namespace stoker
