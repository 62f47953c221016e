// Collective: one NCCL communicator of a Loader, on its device, with its own CUDA stream. NCCL is loaded at run
// time (libnccl.so.2, or $STOKER_NCCL_LIBRARY): a process that already loaded it (PyTorch does) shares that copy,
// and a machine without it fails only the Loaders that ask for tensor parallelism or agreement, with the reason.
//
// Two uses (the Loader's): the tensor-parallel broadcast (member 0 sends each batch's bytes to the others) and
// the agreement step (every data-parallel rank's vote, reduced to the maximum). Every host wait has the options'
// deadline: a member that never arrives makes the others fail with DeadlineExceeded, and the communicator is
// aborted so no kernel keeps waiting for it.
//
// Thread safety: one thread at a time (the Loader's consumer).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "stoker/loader_types.h"
#include "stoker/status.h"

namespace stoker::client {

class Collective {
 public:
  // Joins the communicator: blocks until all `options.size` members have joined (NCCL's own rendezvous), at most
  // options.timeout (then DeadlineExceeded).
  static StatusOr<std::unique_ptr<Collective>> Join(const CollectiveOptions& options, int device);
  ~Collective();
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

  uint32_t size() const;
  uint32_t rank() const;
  void* stream() const;  // cudaStream_t the collective's work is queued on

  // The agreement step: the maximum of every member's vote. Blocks the host until it is known.
  StatusOr<uint32_t> AgreeMax(uint32_t vote);
  // Queues a broadcast of `bytes` of device memory from member 0 (in place) on stream().
  Status Broadcast(void* device_buffer, size_t bytes);
  // Queues host<->device copies of small pinned buffers on stream() (the broadcast's metadata).
  Status CopyToDevice(void* device, const void* pinned, size_t bytes);
  Status CopyToHost(void* pinned, const void* device, size_t bytes);
  // Waits (host) until everything queued on stream() so far is done, within the deadline.
  Status WaitQueued();
  // Waits (host) until `event` (a cudaEvent_t) has completed, within the deadline, watching for a failed peer.
  Status WaitEvent(void* event);
  // Makes `other` (a cudaStream_t, nullptr: the legacy default) wait for what is queued on stream() so far.
  Status OrderBefore(void* other);
  // Gives up on the communicator (after a failure half-way through a sequence the peers expect): the peers' pending
  // and later calls fail instead of waiting; every later call here fails at once.
  void Abort();
  bool broken() const;

  struct Impl;

 private:
  explicit Collective(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Pinned host memory and device memory for the broadcast's metadata, owned by the caller.
class CollectiveBuffers {
 public:
  static StatusOr<std::unique_ptr<CollectiveBuffers>> Allocate(int device, size_t bytes, uint32_t count);
  ~CollectiveBuffers();
  uint8_t* host(uint32_t i) const;
  void* device(uint32_t i) const;
  size_t bytes() const;
  // Buffer i is in use by what is queued on `stream` (a cudaStream_t) so far; WaitUnused blocks until that is done,
  // within the collective's deadline.
  Status MarkUsed(uint32_t i, void* stream);
  Status WaitUnused(uint32_t i, Collective& collective);

  struct Impl;

 private:
  explicit CollectiveBuffers(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

StatusOr<std::string> NewNcclIdHex();

}  // namespace stoker::client
