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

namespace stoker::worker {

struct WorkerOptions {
  std::string worker_id;                     // empty: a random "w-…"
  std::string coordinator = "tcp://127.0.0.1:7400";
  std::string listen = "tcp://*:7401";       // data endpoint clients connect to; port 0 picks a free one
  std::string advertise_host;                // host put in the advertised endpoint when listening on a wildcard
  std::string advertise_endpoint;            // if set, advertised as is (e.g. a proxy or a NodePort in front)
  uint32_t threads = 0;                      // pipeline threads; 0 = one per core
  std::string manifest_root;                 // dataset root to use instead of the manifests' own
  Duration request_timeout = Millis(3000);   // a coordinator request unanswered this long is retried
  Duration lease_wait = Millis(1000);        // how long the coordinator may park a lease request
  Duration credit_ttl = Millis(3000);        // a client's credit not refreshed this long is withdrawn
  Duration drain_grace = Millis(30000);      // SIGTERM: finish held units within this, then hand back the rest
  size_t max_open_shards = 256;
  // Datasets on object storage (storage/options.h): the client, and the fetched bytes read ahead may hold at most.
  storage::StorageOptions storage;
  uint64_t read_ahead_bytes = 256ull << 20;
  // Diagnostics: neither read nor decode samples; each image slot only gets its sample id in its first 8 bytes.
  // Measures the transport and the control plane alone (bench/transport_bench). Never for training.
  bool skip_decode = false;
  // What one image may cost a pipeline thread (pixels, progressive scans, memory, CPU time): beyond it the sample
  // is quarantined as "decode_limit".
  JpegLimits jpeg_limits;
  // Fault injection (tests, `stoker soak`): every sample takes this much longer, making a slow worker.
  Duration inject_sample_delay = Duration(0);
  // Fault injection (tests): send every batch under the wrong sample ids, as a compromised worker would.
  bool inject_wrong_samples = false;
  // CURVE (common/keys.h): the worker's key toward the coordinator, the coordinator's key and the clients it admits
  // to its data port, whose own server key it makes at start. security.insecure: no CURVE.
  Security security;
  // The data port authenticates clients by data ticket (ZeroMQ PLAIN, common/data_tickets.h) and does not encrypt:
  // for networks the operator trusts, where CURVE would cost about three times the client's CPU per image. The
  // control plane stays encrypted. Meaningless with security.insecure.
  bool plain_data = false;
};

struct WorkerStats {
  bool registered = false;
  uint64_t samples = 0;
  uint64_t batches_sent = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_read = 0;
  uint64_t quarantined = 0;
  uint64_t quarantined_remembered = 0;  // of them, known from an earlier epoch: neither read nor decoded
  uint64_t units_done = 0;
  uint64_t units_revoked = 0;
  uint64_t units_fenced = 0;    // leases that ran out unrenewed (coordinator unreachable): stopped sending
  uint64_t units_abandoned = 0;
  uint64_t units_undeliverable = 0;
  uint64_t bad_frames = 0;
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
  uint64_t handshakes_admitted = 0;                  // CURVE handshakes on the data port (clients)
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
  Worker(const WorkerOptions& options, Env& env, Clock& clock, zmq::context_t& context);
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
