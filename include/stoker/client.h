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
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "stoker/client_types.h"
#include "stoker/job_spec.h"
#include "stoker/status.h"

namespace stoker {

// StallProbe, ClientOptions and ClientStats: stoker/client_types.h.

namespace client {
class ClientCore;
struct ReceivedBatch;
class BatchStager;
class IoThread;
class LoaderRole;
class LocalServers;
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
  size_t pixel_bytes() const;                 // size x height x width x channels, or a gpu_decode job's crops' bytes
  std::span<const int64_t> labels() const;     // -1 for quarantined samples
  std::span<const uint64_t> sample_ids() const;
  std::span<const uint8_t> flags() const;      // bit 1: padding, bit 2: quarantined
  // A job that decodes on the GPU (PipelineSpec::gpu_decode): one per sample, and pixels() holds their bytes one
  // after another (SampleCrop). Empty for other jobs.
  std::span<const SampleCrop> crops() const;
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
  using Kind = DeliveryKind;
  Kind kind = Kind::kBatch;
  uint32_t epoch = 0;  // the batch's epoch, or the epoch that just ended
  Batch batch;         // valid for kBatch only
};

class Client {
 public:
  // Registers the rank with the coordinator (creating the job from options.spec if needed) and starts receiving.
  // Errors: NotFound (unknown job, no spec), AlreadyExists (rank held by a live client), FailedPrecondition (spec
  // differs from the job's, manifest unusable), InvalidArgument, DeadlineExceeded (coordinator unreachable).
  static StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  // What Connect would find, claiming nothing: the job as options' ranks and batch size would have it (its steps
  // per epoch), the shape a checkpoint may resume it on. NotFound when the job does not exist yet; the spec's
  // other fields must match the job's (FailedPrecondition).
  struct Description {
    JobSpec spec;
    uint64_t steps_per_epoch = 0;
    uint64_t samples_per_epoch = 0;
  };
  static StatusOr<Description> Describe(const ClientOptions& options);
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
  // stoker/loader.h: a Loader's rank (client/src/loader_roles.h) stages batches through a BatchStager and puts back
  // a batch the agreement step decided not to use.
  friend class client::LoaderRole;
  using StagerFactory = std::function<StatusOr<std::shared_ptr<client::BatchStager>>(const JobSpec& spec)>;
  static StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options, const StagerFactory& make_stager);
  // Hands back the batch Next() returned last, unreleased: the next Next() returns it again (a stop agreed by
  // every rank before this batch was used). Checkpoint() then names it as the next batch.
  Status PutBack(Batch batch);

  Client() = default;
  uint32_t rank_ = 0;
  std::unique_ptr<client::LocalServers> local_;  // local mode only; outlives the session it serves
  std::shared_ptr<client::ClientCore> core_;
  std::unique_ptr<client::IoThread> io_;
  std::thread stage_thread_;  // with a stager only
  void JoinMetrics(const ClientOptions& options, const std::string& gpu_uuid);
  uint64_t metrics_member_ = 0;  // in the process's ClientProcess, 0 if none
};

}  // namespace stoker
