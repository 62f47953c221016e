// What the client's I/O thread makes of a batch frame, and the hook through which a batch moves on from host
// memory before Next() hands it out. Without a stager (the host path) the payload stays the ZeroMQ message it
// arrived in. With one (the GPU path, client/cuda/device_stage.h) a staging thread hands each batch, in plan order,
// to BatchStager::Stage, which copies it once into a pinned slot (or takes the pinned buffer a sealed batch was
// opened into: no copy at all), starts its transfer and conversion, and lets the ZeroMQ message go.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "client/src/host_buffer_pool.h"
#include "stoker/client_types.h"
#include "stoker/status.h"

namespace stoker::client {

struct ReceivedBatch {
  uint32_t epoch = 0;
  uint64_t index = 0;
  uint64_t global = 0;
  uint32_t rank = 0;
  uint64_t unit = 0;
  uint64_t attempt = 0;
  std::string worker_id;
  uint32_t count = 0, height = 0, width = 0, channels = 0;
  std::vector<int64_t> labels;
  std::vector<uint64_t> sample_ids;
  std::vector<uint8_t> flags;
  std::vector<std::string> quarantine_reasons;  // one per quarantined sample, in slot order; empty: not told
  std::vector<SampleCrop> crops;  // a gpu_decode job's: one per sample, the payload their bytes (else empty)
  zmq::message_t payload;  // the pixels, as ZeroMQ received them: handed to the application without a copy
  // With ClientOptions::payload_frame_bytes and a stager: the payload's further frames, in order (the stager
  // copies them after `payload`). Without a stager the client joins the frames into `payload` instead.
  std::vector<zmq::message_t> more_payload;
  // A stager's spare pinned buffer that already holds the pixels (a sealed batch opened into it as it arrived):
  // `payload` is then empty, and Stage takes the buffer into its slot instead of copying (only a stager's own
  // spares are ever here, so nothing but Stage reads it).
  HostBufferPool::Buffer opened;
  // Set by a stager once it has copied the pixels elsewhere (a pinned slot) and released `payload`.
  const uint8_t* staged_pixels = nullptr;
  size_t pixel_bytes = 0;

  // Copies the payload's frames, in order, to `out` (room for every frame's bytes); returns the bytes copied.
  size_t CopyPayloadTo(uint8_t* out) const {
    std::memcpy(out, payload.data(), payload.size());
    size_t copied = payload.size();
    for (const zmq::message_t& f : more_payload) {
      std::memcpy(out + copied, f.data(), f.size());
      copied += f.size();
    }
    return copied;
  }
  size_t PayloadBytes() const {
    if (opened) return pixel_bytes;
    size_t bytes = payload.size();
    for (const zmq::message_t& f : more_payload) bytes += f.size();
    return bytes;
  }

  const uint8_t* pixels() const {
    return staged_pixels != nullptr ? staged_pixels : static_cast<const uint8_t*>(payload.data());
  }
};

struct StageReport {
  double h2d_seconds = -1;   // the transfer of this slot's previous batch, once measured (< 0: none)
  uint64_t h2d_bytes = 0;    // bytes this call queued for transfer
  double copy_seconds = 0;   // the host copy into the pinned slot (0 for a batch opened into one)
};

// Called on the client's staging thread only, for global positions in increasing order; `slot` is
// global % depth(). The client calls Stage for position g only after the consumer released g - depth().
class BatchStager {
 public:
  virtual ~BatchStager() = default;
  virtual uint32_t depth() const = 0;
  virtual Status Stage(size_t slot, ReceivedBatch& batch, StageReport* report) = 0;
  // Spare buffers of the stager's own kind (pinned), each at least a batch's pixels, that a batch may arrive in
  // (ReceivedBatch::opened); null: none, every batch is copied by Stage. Any thread.
  virtual std::shared_ptr<HostBufferPool> spare_buffers() const { return nullptr; }
};

}  // namespace stoker::client
