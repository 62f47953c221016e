// Worker: the CPU pod's service. One I/O thread owns both sockets — a DEALER to the coordinator (register,
// heartbeat, lease, unit done) and the ROUTER clients connect to (credits in, batches out) — and a pool of
// pipeline threads reads, decodes and augments samples straight into batch buffers. The decisions are
// WorkerImpl's (worker/impl.h, tested on a fake clock); this class is its transport adapter (worker/worker.cc).
//
// The loop, per (job, rank) a client has given credit for:
//   credit c  ->  lease up to c - (batches in hand) from the coordinator  ->  one pool task per sample  ->
//   when a batch's last sample is done, send header + payload (zero-copy) to the client  ->  when a unit's batches
//   are all sent, report UnitDone with the samples it had to quarantine.
// Leases the coordinator revokes (heartbeat reply) are cancelled: their queued samples are skipped and their
// batches never sent. On drain (SIGTERM) the worker stops leasing, finishes what it holds within the grace period,
// hands back the rest, deregisters and returns.
//
// Thread safety: Bind and Run from one thread; Stats from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <prometheus/histogram.h>
#include <string>
#include <zmq.hpp>

#include "base/admin_server.h"
#include "stoker/clock.h"
#include "base/env.h"
#include "auth/keys.h"
#include "stoker/status.h"
#include "storage/options.h"
#include "storage/stats.h"
#include "worker/jpeg_decoder.h"
#include "worker/options.h"

namespace stoker::worker {

struct WorkerStats {
  bool registered = false;
  uint64_t samples = 0;
  uint64_t batches_sent = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_read = 0;
  uint64_t quarantined = 0;
  uint64_t quarantined_remembered = 0;  // of them, known from an earlier epoch: neither read nor decoded
  uint64_t gpu_sent_file = 0;           // gpu_decode jobs' samples sent as their JPEG files
  uint64_t gpu_sent_cut = 0;            // as JPEGs cut to their crops
  uint64_t gpu_sent_pixels = 0;         // as pixels made here (no JPEG the GPU takes, or too large)
  uint64_t units_done = 0;
  uint64_t units_revoked = 0;
  uint64_t units_fenced = 0;    // leases that ran out unrenewed (coordinator unreachable): stopped sending
  uint64_t units_abandoned = 0;
  uint64_t units_undeliverable = 0;
  uint64_t bad_frames = 0;
  // Credits refused before anything was kept for them (worker/impl.h, CreditRefusals).
  uint64_t credits_malformed = 0;
  uint64_t credits_failed_job = 0;
  uint64_t credits_busy = 0;
  uint64_t leases_held = 0;
  double busy_seconds = 0;      // pipeline thread time spent on samples
  double read_seconds = 0;
  double decode_seconds = 0;
  double augment_seconds = 0;
  // Pipeline-thread time idle while serving clients whose jobs are not finished: they take batches slower than
  // this worker could make them (credits spent, or the coordinator parks its lease requests at their windows).
  double backpressure_seconds = 0;
  uint32_t threads = 0;
  bool draining = false;
  uint64_t streams = 0;         // (job, rank, client) streams with credit
  std::map<std::string, uint64_t> quarantine_reasons;
  std::map<std::string, uint64_t> transport_errors;  // ZeroMQ failures survived, by site (common/transport_errors.h)
  std::map<std::string, uint64_t> seal_refusals;     // sealed connections' refusals by reason (seal_sessions.h)
  uint64_t handshakes_admitted = 0;                  // ticket handshakes on the data port (clients)
  std::map<std::string, uint64_t> handshakes_refused;  // by reason
  // Object storage read-ahead (worker/read_ahead.h): bytes held, units with a read-ahead, ranges queued, the cap.
  uint64_t read_ahead_bytes = 0;
  uint64_t read_ahead_units = 0;
  uint64_t read_ahead_queued = 0;
  uint64_t read_ahead_limit_bytes = 0;
};

// Per-batch latencies, observed as batches leave (prometheus::Histogram is thread-safe).
struct WorkerHistograms {
  // Thread seconds the batch's samples spent reading, decoding and augmenting; seconds building its header
  // (collate); seconds from handing it to ZeroMQ until ZeroMQ has written it to the connection (send).
  std::map<std::string, std::shared_ptr<prometheus::Histogram>> stage_seconds;
};

class Worker {
 public:
  Worker(const WorkerOptions& options, Env& env, const Clock& clock, zmq::context_t& context);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Binds the data socket. Returns the endpoint clients should connect to.
  StatusOr<std::string> Bind();
  // Serves until `stop` (returns at once) or until a requested drain completes (returns OK).
  Status Run(const std::atomic<bool>& stop, const std::atomic<bool>& drain);

  WorkerStats Stats() const;
  const WorkerHistograms& histograms() const;
  // JSON of the I/O thread's state (streams, units in hand, jobs), refreshed every second by Run().
  std::string StateJson() const;
  // Beaten every turn of Run(): the liveness probe.
  const LoopWatch& watch() const;
  // Exchanges with object storage (stoker_worker_storage_* metrics).
  const storage::StorageStats& storage_stats() const;
  const std::string& id() const;

 private:
  class Adapter;
  std::unique_ptr<Adapter> adapter_;
};

}  // namespace stoker::worker
