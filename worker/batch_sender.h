// BatchSender: puts a finished batch on the worker's data socket — its header (wire/data_codec.h), then its
// pixels straight from the batch buffer without a copy (zmq_msg_init_data), in frames of at most the size its
// client asked for, and on a sealed connection a seal trailer (auth/seal.h). ZeroMQ returns the buffer to the pool
// once the last frame has been written to the connection (or dropped with it); until then the batch counts as in
// flight, which a draining worker waits for.
//
// A batch goes out in three steps: Prepare (the I/O thread, once its client's connection is known) writes its
// header; Seal (a pipeline thread, for a sealed connection) encrypts its frames in place; Send (the I/O thread)
// hands it to ZeroMQ.
//
// Thread safety: Prepare and Send on the I/O thread that owns the socket; Seal on any thread, one per batch;
// in_flight() from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <prometheus/histogram.h>
#include <string>
#include <zmq.hpp>

#include "auth/seal.h"
#include "wire/data_messages.h"
#include "wire/transport_errors.h"
#include "worker/batch_buffer.h"
#include "worker/batch_build.h"

namespace stoker::worker {

class BatchSender {
 public:
  // `send_seconds` observes, per batch, the time from handing it to ZeroMQ until ZeroMQ released its buffer;
  // `collate_seconds` the time spent building its header.
  BatchSender(zmq::socket_t& socket, std::shared_ptr<BatchBufferPool> pool, std::string worker_id,
              std::shared_ptr<prometheus::Histogram> collate_seconds,
              std::shared_ptr<prometheus::Histogram> send_seconds, TransportErrors& errors);

  // Writes `build`'s header and framing for a client that asked for frames of at most `max_frame_bytes` (0: one);
  // `sealed`: the header says a trailer follows.
  void Prepare(BatchBuild& build, uint64_t max_frame_bytes, bool sealed);

  // Seals a prepared batch's payload frames in place with `session`, each under its own counter with the header's
  // bytes and the frame's index as associated data, and writes its trailer.
  static void Seal(BatchBuild& build, std::shared_ptr<SealSession> session);

  // Sends a prepared (and, for a sealed connection, sealed) batch to the client connection `peer`; false if the
  // connection is gone (EHOSTUNREACH: the ROUTER is mandatory) or ZeroMQ refused the message. On success the
  // buffer belongs to ZeroMQ until it is written.
  bool Send(const std::string& peer, BatchBuild& build);

  // Batches handed to ZeroMQ whose buffers it still holds.
  int64_t in_flight() const { return in_flight_->load(); }

  // Fault injection (the hostile-worker tests): label every batch with the wrong sample ids, as a compromised
  // worker holding a real worker key could. Clients must drop such batches.
  void InjectWrongSamples() { wrong_samples_ = true; }

 private:
  zmq::socket_t& socket_;
  std::shared_ptr<BatchBufferPool> pool_;
  const std::string worker_id_;
  std::shared_ptr<prometheus::Histogram> collate_seconds_;
  std::shared_ptr<prometheus::Histogram> send_seconds_;
  TransportErrors& errors_;
  bool wrong_samples_ = false;
  std::shared_ptr<std::atomic<int64_t>> in_flight_ = std::make_shared<std::atomic<int64_t>>(0);
};

// The header of `build` as it goes on the wire.
BatchHeader HeaderOf(const BatchBuild& build, const std::string& worker_id);

}  // namespace stoker::worker
