// WorkerOptions: what a worker is told at start (its flags and their STOKER_* twins, worker/main.cc): where the
// coordinator is, what to listen on, its threads, timeouts, storage, limits and security. Its own header so that
// the socket-free WorkerImpl (worker/impl.h) needs nothing of the adapter (worker/worker.h) or of ZeroMQ.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "auth/keys.h"
#include "stoker/clock.h"
#include "storage/options.h"
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
  // Node-local (--local-dir): the directory this worker shares with the training process beside it, and the group
  // read from it (base/local_group.h). Its data port is then an ipc:// socket there, unsealed, and the coordinator
  // lists it to that process's sessions only. Empty: a pool worker.
  std::string local_dir;
  std::string local_group;
  // CURVE (auth/keys.h): the worker's key toward the coordinator and the coordinator's key; the data port admits
  // clients by data ticket and seals their batches (worker/data_port.h). security.insecure: none of it.
  Security security;
};

}  // namespace stoker::worker
