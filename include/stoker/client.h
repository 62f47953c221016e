// stoker::Client — the library a training process links to receive its rank's batches.
//
//   stoker::ClientOptions options;
//   options.coordinator = "tcp://stoker-coordinator:7400";
//   options.job = "resnet50";  options.rank = rank;  options.spec = spec;   // spec: creates the job if new
//   auto client = stoker::Client::Connect(options);                         // StatusOr<unique_ptr<Client>>
//   while (true) {
//     auto d = (*client)->Next();                                          // blocks until the next batch
//     if (!d.ok()) { ... d.status() ... }
//     if (d->kind == stoker::Delivery::Kind::kEndOfJob) break;
//     if (d->kind == stoker::Delivery::Kind::kEndOfEpoch) continue;       // the same on every rank
//     train(d->batch.pixels(), d->batch.labels());                        // uint8 NHWC RGB + int64 labels
//   }                                                                      // destroying a Batch frees its slot
//
// Guarantees: batches come in plan order (epoch, index), each exactly once; every rank gets the same number per
// epoch; a batch's bytes depend only on the job spec and manifest. Duplicates and stale copies (a re-leased
// unit's old attempt) are dropped and counted, never delivered. Memory is bounded: at most `prefetch` batches are
// held (received or handed out and not yet released).
//
// Thread safety: Next() must be called from one thread at a time. Batches may be released on any thread, and
// may outlive the Client. Stats() may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "stoker/clock.h"
#include "stoker/job_spec.h"
#include "stoker/status.h"

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
                                         // under a live client's id continues that client's session
  std::string resume_token;              // from Checkpoint(): start exactly after the last batch consumed then.
                                         // The rank must be free: a crashed process's session ends after the
                                         // coordinator's client timeout (see claim_timeout)
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
  // network you trust only.
  std::string key_file;
  std::string trust_file;
  bool insecure = false;
  uint32_t max_workers = 512;  // worker connections held at once: each is a file descriptor
};

namespace client {
struct ClientCore;
struct ReceivedBatch;
class BatchStager;
class IoThread;
}  // namespace client

// One batch of one rank: `size()` samples, uint8 RGB pixels in NHWC order, int64 labels, sample ids and flags.
// Move-only. Destroying it (or Release()) returns its slot so the next batch can be prefetched.
class Batch {
 public:
  Batch();
  Batch(Batch&&) noexcept;
  Batch& operator=(Batch&&) noexcept;
  ~Batch();

  bool valid() const { return data_ != nullptr; }
  uint32_t epoch() const;
  uint64_t index() const;      // within the epoch
  uint64_t position() const;   // across epochs: epoch x steps_per_epoch + index
  uint32_t rank() const;
  uint32_t size() const;       // samples
  uint32_t height() const;
  uint32_t width() const;
  uint32_t channels() const;
  const uint8_t* pixels() const;              // host memory (a pinned slot on the GPU path)
  size_t pixel_bytes() const;
  std::span<const int64_t> labels() const;     // -1 for quarantined samples
  std::span<const uint64_t> sample_ids() const;
  std::span<const uint8_t> flags() const;      // bit 1: padding, bit 2: quarantined
  bool is_padding(uint32_t i) const { return (flags()[i] & 1) != 0; }
  bool is_quarantined(uint32_t i) const { return (flags()[i] & 2) != 0; }
  // Why sample i was quarantined (unsupported_format, decode_error, ...; "unreported" if its worker did not say);
  // empty for a sample that was not.
  std::string_view quarantine_reason(uint32_t i) const;
  uint64_t attempt() const;
  const std::string& worker_id() const;

  void Release();

 private:
  friend class Client;
  friend class Loader;
  Batch(std::shared_ptr<client::ClientCore> core, std::unique_ptr<client::ReceivedBatch> data);
  std::shared_ptr<client::ClientCore> core_;
  std::unique_ptr<client::ReceivedBatch> data_;
};

struct Delivery {
  enum class Kind { kBatch, kEndOfEpoch, kEndOfJob };
  Kind kind = Kind::kBatch;
  uint32_t epoch = 0;  // the batch's epoch, or the epoch that just ended
  Batch batch;         // valid for kBatch only
};

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
  uint64_t worker_errors = 0;          // DataError messages from workers (e.g. a job a worker cannot load)
  double wait_seconds = 0;             // time Next() spent blocked waiting for a batch (startup included)
  double startup_seconds = 0;          // of that, the wait for this client's first batch
  double step_seconds = 0;             // time between consecutive batches returned by Next() (after the first)
  double stall_seconds = 0;            // of that, waiting while the consumer had nothing to do (input stall)
  double last_batch_unix_seconds = 0;  // when Next() last returned a batch (Connect() time before the first)
  bool end_of_job = false;             // every batch of every epoch delivered
  uint32_t prefetched = 0;             // batches received and not yet handed out
  uint32_t connected_workers = 0;
  uint64_t position = 0;               // global index of the next batch Next() will return
  std::string metrics_address;         // host:port of the process's metrics endpoint, empty if none
};

class Client {
 public:
  // Registers the rank with the coordinator (creating the job from options.spec if needed) and starts receiving.
  // Errors: NotFound (unknown job, no spec), AlreadyExists (rank held by a live client), FailedPrecondition (spec
  // differs from the job's, manifest unusable), InvalidArgument, DeadlineExceeded (coordinator unreachable).
  static StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The next batch in plan order, or end of epoch / end of job. DeadlineExceeded if nothing came within timeout.
  StatusOr<Delivery> Next(std::chrono::milliseconds timeout = std::chrono::milliseconds::max());

  // A small token (text) to save with the model: Connect() with it as resume_token resumes this rank with
  // exactly the batches after the last one Next() returned. It names the job spec and the dataset; resuming
  // against another is refused.
  std::string Checkpoint() const;

  const JobSpec& spec() const;
  uint64_t steps_per_epoch() const;
  uint64_t start_batch() const;   // global batch index this client started at
  const std::string& client_id() const;
  ClientStats Stats() const;

 private:
  friend class Loader;  // stoker/loader.h: the GPU path stages batches through a BatchStager
  using StagerFactory = std::function<StatusOr<std::shared_ptr<client::BatchStager>>(const JobSpec& spec)>;
  static StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options, const StagerFactory& make_stager);
  // Hands back the batch Next() returned last, unreleased: the next Next() returns it again (a stop agreed by
  // every rank before this batch was used). Checkpoint() then names it as the next batch.
  Status PutBack(Batch batch);

  Client() = default;
  uint32_t rank_ = 0;
  std::shared_ptr<client::ClientCore> core_;
  std::unique_ptr<client::IoThread> io_;
  std::thread stage_thread_;  // with a stager only
  void JoinMetrics(const ClientOptions& options);
  uint64_t metrics_member_ = 0;  // in the process's ClientProcess, 0 if none
};

class FlagSet;
// --key-file, --trust-file and --insecure for a program that makes a Client (`stoker consume`, the Loader's flags),
// writing into `options`.
void AddClientSecurityFlags(FlagSet& flags, ClientOptions* options);

}  // namespace stoker
