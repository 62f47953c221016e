// The client's vocabulary: what a training process gives a Client (ClientOptions, its StallProbe) and what it reads
// back (ClientStats, the kind of each delivery). stoker/client.h is the Client itself; the client's internals
// (client/src/) speak these types without including it.
//
// Thread safety: plain values; a StallProbe is called on the thread that calls Next().
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "stoker/clock.h"
#include "stoker/job_spec.h"

namespace stoker {

// Input stall: of the time Next() waited for a batch, the part during which the consumer's device had nothing left
// to do. The host path (no probe) assumes the caller works synchronously between Next() calls, so every wait is a
// stall. A GPU consumer supplies a probe that answers from CUDA events on its stream.
class StallProbe {
 public:
  virtual ~StallProbe() = default;
  virtual double StalledSeconds(std::chrono::steady_clock::time_point wait_start,
                                std::chrono::steady_clock::time_point wait_end) = 0;
};

// One sample of a batch of a job that decodes on the GPU (PipelineSpec::gpu_decode): the batch's bytes are its
// samples' one after another, each a JPEG cut to what its resize reads (encoded), or the output's pixels made by
// the worker (not encoded: a format or cut the worker could not send as a JPEG), or nothing (quarantined).
// schema/data.capnp's EncodedCrop says what each field means.
struct SampleCrop {
  uint32_t bytes = 0;
  bool encoded = false;
  bool flip = false;  // mirror after the resize (encoded samples only)
  int32_t x = 0;      // train: the crop in the cut's pixels; eval: the whole image in them (resize it to
  int32_t y = 0;      // Resize(resize_shorter)'s size and keep the centre)
  uint32_t width = 0;
  uint32_t height = 0;
};

struct ClientOptions {
  std::string coordinator = "tcp://127.0.0.1:7400";
  std::string job;
  uint32_t rank = 0;
  std::optional<JobSpec> spec;           // set: create the job (or check it matches); unset: attach to it
  uint32_t prefetch = 16;                // batches held at once: the window the coordinator leases within
  uint32_t credits_per_worker = 2;       // batches one worker may prepare for this rank at a time
  std::chrono::milliseconds connect_timeout{30000};  // Connect() retries an unreachable coordinator this long
  // A rank held by a live session (a crashed process's, until the coordinator's client timeout frees it) is asked
  // for again this long before Connect() fails with ALREADY_EXISTS. 0: fail at once.
  std::chrono::milliseconds claim_timeout{0};
  std::string client_id;                 // default: random "c-…". Must be unique per process: a registration
                                         // under a live client's id is refused while that client's session lives
                                         // (a session continues only in the process that started it)
  std::string resume_token;              // from Checkpoint(): start exactly after the last batch consumed then.
                                         // The rank must be free: a crashed process's session ends after the
                                         // coordinator's client timeout (see claim_timeout)
  // With resume_token: a live shape change (docs/design.md, "Shape changes while running"). The job is re-planned
  // from the token's point at once, although ranks of its old shape are training: their sessions end, and each
  // survivor joins the new shape from the same token (Client::Checkpoint, Close, a new Client). Only over ranks
  // of this client's own team. Without it, a resume on another shape waits until the old clients have left.
  bool resume_live = false;
  // Observability (docs/observability.md). The process serves /metrics, /healthz, /readyz and /state on this
  // host:port, started by the first Client that asks; the process's other Clients join that endpoint. Empty:
  // $STOKER_METRICS_LISTEN, and if that is unset too, no server (Stats() still works). A port that cannot be
  // bound is logged, never fatal: training goes on without the endpoint.
  std::string metrics_listen;
  int gpu = -1;                          // CUDA ordinal this rank feeds (gpu, gpu_uuid labels; NVML metrics)
  // 0: each batch's pixels arrive in one frame and are handed over as received (no copy). Else workers send them
  // in frames of at most this many bytes (at least 64 KiB); the host path joins them into one buffer (a copy),
  // the GPU path (stoker::Loader, which sets 8 MiB) copies them straight into its pinned slot. Frames keep large
  // batches out of glibc's per-allocation mmap (above 32 MiB), whose page faults cost a core at 1.7 GB/s.
  uint64_t payload_frame_bytes = 0;
  std::shared_ptr<StallProbe> stall_probe;  // null: every wait in Next() is a stall (host path)
  // Every time the client reads (timeouts, heartbeats, waits, steps) comes from this clock; null: the process's
  // steady clock. Tests pass a FakeClock.
  std::shared_ptr<const Clock> clock;
  // CURVE (docs/operations.md, "Security"): this client's key pair (stoker keygen --role client) and the trust file
  // holding the coordinator's public key. Empty: $STOKER_KEY or $STOKER_KEY_FILE, $STOKER_TRUST or
  // $STOKER_TRUST_FILE. Without a key Connect() fails, unless `insecure` (or $STOKER_INSECURE=1): no CURVE, for a
  // network you trust only. A key file other users can read, or a trust file they can write, is refused unless
  // `allow_readable_key` (or $STOKER_ALLOW_READABLE_KEY=1) insists.
  std::string key_file;
  std::string trust_file;
  bool insecure = false;
  bool allow_readable_key = false;
  uint32_t max_workers = 512;  // worker connections held at once: each is a file descriptor
  // Local mode (coordinator = kLocalCoordinator): Connect() starts a coordinator and `local_workers` worker
  // processes on this machine, owned by this Client and gone when it is destroyed or its process dies. They talk
  // over ipc:// sockets in a directory only this user can open, with CURVE off (the keys options are not used).
  // 0 workers: the cores this process may use (its share under torchrun, $LOCAL_WORLD_SIZE), less two. The prefetch
  // window is raised to at least two batches per worker and four more, which keeps them all busy. `local_bin_dir`:
  // where stoker-coordinator and stoker-worker are; empty: $STOKER_BIN_DIR, else ../bin beside the stoker library
  // (where this user or root owns it), else $PATH.
  //
  // Node-local workers beside a remote pool (any other coordinator): `local_workers` > 0 starts that many worker
  // processes on this machine the same way, registered with the coordinator as local to this client: it lists them
  // to this client only and leases this client's units to them first, and the pool makes the rest. Their batches
  // come over ipc:// sockets in the private directory, unsealed; they authenticate to the coordinator with this
  // client's key (the key options above), which lets them serve this key's ranks and nothing else. `local_dir`
  // instead: use the node-local workers someone else runs in that directory (`stoker-worker --local-dir`, a
  // Kubernetes sidecar sharing an emptyDir with the trainer), starting none.
  uint32_t local_workers = 0;
  std::string local_bin_dir;
  std::string local_dir;
};

// ClientOptions::coordinator for local mode.
inline constexpr char kLocalCoordinator[] = "local";

struct ClientStats {
  uint64_t batches_delivered = 0;
  uint64_t samples_delivered = 0;
  uint64_t samples_quarantined = 0;    // of them, flagged quarantined (zero pixels, label -1)
  // The same by reason, as the workers gave it (unsupported_format, decode_error, ...): at most
  // kMaxQuarantineReasons words, the rest under "other"; "unreported" where a worker gave none.
  std::map<std::string, uint64_t> quarantined_by_reason;
  static constexpr size_t kMaxQuarantineReasons = 32;
  uint64_t batches_received = 0;
  uint64_t bytes_received = 0;
  uint64_t dropped_duplicate = 0;
  uint64_t dropped_stale_attempt = 0;
  uint64_t dropped_bad_frame = 0;
  uint64_t dropped_out_of_window = 0;
  uint64_t dropped_unlisted = 0;       // an attempt the coordinator does not list for the unit (no lease it granted)
  uint64_t dropped_wrong_samples = 0;  // sample ids or padding flags that are not the plan's for that batch
  uint64_t dropped_seal_failed = 0;    // a sealed batch that did not open: its bytes, header or trailer changed, or
                                       // sealed under another connection's keys
  uint64_t dropped_replayed = 0;       // a sealed batch whose counters this connection already took (a replay)
  uint64_t batches_opened_into_pinned = 0;  // of batches_received, those accepted on arrival (not waiting for a
                                           // lease's confirmation) that were sealed and opened straight into a
                                           // pinned buffer (GPU path): their decryption was their one host copy
  uint64_t worker_errors = 0;          // DataError messages from workers (e.g. a job a worker cannot load)
  uint64_t worker_reconnects = 0;      // sealed data connections opened anew: their worker answered nothing to an
                                       // offer (a refused handshake, which ZeroMQ never retries)
  double wait_seconds = 0;             // time Next() spent blocked waiting for a batch (startup included)
  double startup_seconds = 0;          // of that, the wait for this client's first batch
  double step_seconds = 0;             // time between consecutive batches returned by Next() (after the first)
  double stall_seconds = 0;            // of that, waiting while the consumer had nothing to do (input stall)
  double receive_seconds = 0;          // this client's threads taking batches in: opening sealed ones, copying them
                                       // into pinned memory (the GPU path), summed over batches and threads
  double h2d_seconds = 0;              // batches' host-to-device copies, from CUDA events (0 on the host path)
  double last_batch_unix_seconds = 0;  // when Next() last returned a batch (Connect() time before the first)
  bool end_of_job = false;             // every batch of every epoch delivered
  uint32_t prefetched = 0;             // batches received and not yet handed out
  uint32_t connected_workers = 0;
  uint64_t position = 0;               // global index of the next batch Next() will return
  std::string metrics_address;         // host:port of the process's metrics endpoint, empty if none
};

// What Client::Next() returns: a batch, or the end of an epoch (the same on every rank) or of the job.
enum class DeliveryKind { kBatch, kEndOfEpoch, kEndOfJob };

}  // namespace stoker
