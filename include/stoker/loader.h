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

#include "stoker/client.h"
#include "stoker/loader_types.h"
#include "stoker/status.h"

namespace stoker {

// DType, Layout, OutputFormat, CollectiveOptions, LoaderOptions, BatchView, LoaderStats: stoker/loader_types.h.

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
  friend class client::LoaderRole;
  explicit LoadedBatch(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

struct LoaderDelivery {
  enum class Kind { kBatch, kEndOfEpoch, kEndOfJob, kStopped };
  Kind kind = Kind::kBatch;
  uint32_t epoch = 0;
  LoadedBatch batch;  // valid for kBatch only
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


 private:
  explicit Loader(std::unique_ptr<client::LoaderRole> role);
  // A plain rank, a tensor-parallel leader or a follower (client/src/loader_roles.h).
  std::unique_ptr<client::LoaderRole> role_;
};

// A fresh NCCL unique id (hex) for CollectiveOptions::nccl_id; FailedPrecondition where NCCL cannot be loaded.
StatusOr<std::string> NcclUniqueIdHex();

}  // namespace stoker
