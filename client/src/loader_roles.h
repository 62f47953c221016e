// The Loader's private parts. A Loader is one of three roles behind one interface, LoaderRole, which checks the
// consumer's stream, times every Next() and counts what it returns:
//
//   PlainRank               a stoker rank with its own Client: the GPU path stages through a DeviceStage, the host
//                           path converts into a small ring of host buffers; with agreement it votes with the other
//                           data-parallel ranks after each fetch and before anything is used (loader_rank.cc)
//   TensorParallelLeader    a PlainRank that also tells its group's followers what each Next() returns, then
//                           broadcasts each batch's raw bytes (loader_tensor_parallel.cc)
//   TensorParallelFollower  no Client: receives the leader's record and the batch's bytes into its own slots, and
//                           converts there (loader_tensor_parallel.cc)
//
// Also here: the host buffers and follower slots a handed-out batch holds, the record a leader broadcasts, and
// LoadedBatch::State.
//
// Thread safety: a role belongs to the Loader's consumer thread, except RequestStop() and Stats() (any thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/sync.h"
#include "client/cuda/device_stage.h"
#include "client/cuda/gpu_probe.h"
#include "client/nccl/collective.h"
#include "stoker/clock.h"
#include "stoker/loader.h"

namespace stoker {
namespace client {

// FailedPrecondition for a job that decodes on the GPU: the Loader hands out tensors of pixels, and cannot make them
// from cut JPEGs yet.
Status RefuseGpuDecode(const JobSpec& spec);

// Host path: converted batches live in `depth` buffers, position % depth, each held until its batch is released.
struct HostBuffers {
  Mutex mu;
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<bool> held STOKER_GUARDED_BY(mu);
};

// A follower's slots: held from Next() until the consumer releases the batch.
struct FollowerSlots {
  Mutex mu;
  std::vector<bool> held STOKER_GUARDED_BY(mu);
};

// What the leader broadcasts before each delivery (and once, at open, as the hello). Fixed layout; both ends are
// the same build. kRetry: this Next() failed with a retryable error (the followers return it too, and go on).
enum class MetaKind : uint32_t { kHello = 1, kBatch, kEndOfEpoch, kEndOfJob, kStopped, kError, kRetry };

constexpr uint64_t kStagedFrameBytes = 8 << 20;

inline bool Retryable(const Status& s) {
  return s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kResourceExhausted;
}

// The agreement step's votes, reduced to their maximum: the strongest wins.
enum Vote : uint32_t {
  kGo = 0,        // a delivery in hand
  kRetry = 1,     // a retryable error here: every rank puts its batch back and returns it
  kStop = 2,      // asked to stop (RequestStop)
  kCannotGoOn = 3 // a final error here
};
struct MetaHeader {
  uint32_t magic;
  MetaKind kind;
  uint32_t epoch;
  uint32_t count;
  uint64_t index;
  uint64_t position;
  int32_t status_code;
  uint32_t message_bytes;
  // The hello's: the job as the followers need it.
  uint32_t batch_size, height, width, epochs;
  uint64_t steps_per_epoch;
};
constexpr uint32_t kMetaMagic = 0x5354504d;  // "STPM"
constexpr size_t kMetaHeaderBytes = 128;
constexpr size_t kMetaMessageBytes = 256;
constexpr size_t kHelloBytes = kMetaHeaderBytes + kMetaMessageBytes;
static_assert(sizeof(MetaHeader) <= kMetaHeaderBytes);

inline size_t MetaBytes(uint32_t batch) {
  size_t bytes = kHelloBytes + size_t{batch} * (sizeof(int64_t) + sizeof(uint64_t) + 1);
  return (bytes + 15) & ~size_t{15};
}

}  // namespace client

struct LoadedBatch::State {
  Batch batch;                          // the client's (invalid on a follower)
  std::shared_ptr<client::DeviceStage> stage;   // null on the host path
  size_t slot = 0;
  void* stream = nullptr;               // the consumer's stream at Next()
  BatchView view;
  uint32_t epoch = 0, count = 0;
  uint64_t index = 0, position = 0;
  std::vector<int64_t> labels;          // a follower's host copies (the leader's come from `batch`)
  std::vector<uint64_t> sample_ids;
  std::vector<uint8_t> flags;
  std::shared_ptr<client::HostBuffers> host_buffers;      // host path with a conversion: buffer `slot` is ours
  std::shared_ptr<client::FollowerSlots> follower_slots;  // a follower: slot `slot` is ours
};

namespace client {

class LoaderRole {
 public:
  // Checks the options, makes the role they name and opens it (connects the client, joins the collectives).
  static StatusOr<std::unique_ptr<LoaderRole>> Open(const LoaderOptions& options);
  virtual ~LoaderRole() = default;
  LoaderRole(const LoaderRole&) = delete;
  LoaderRole& operator=(const LoaderRole&) = delete;

  StatusOr<LoaderDelivery> Next(void* stream, std::chrono::milliseconds timeout);
  void RequestStop() { stop_requested_.store(true); }
  // The client's checkpoint token; a follower has none (empty).
  virtual std::string Checkpoint() const { return std::string(); }
  LoaderStats Stats() const;
  const JobSpec& spec() const { return spec_; }
  uint64_t steps() const { return steps_; }
  bool on_device() const { return stage_ != nullptr; }

 protected:
  // Time (the wait and agreement figures) is read from the client's clock, the process's unless a test gives one.
  explicit LoaderRole(const LoaderOptions& options)
      : options_(options),
        clock_(options.client.clock ? options.client.clock : std::make_shared<RealClock>()) {}

  virtual Status Start() = 0;  // connects the client, joins the collectives
  // What this Next() returns, once the role has not stopped.
  virtual StatusOr<LoaderDelivery> Fetch(void* stream, std::chrono::milliseconds timeout) = 0;
  virtual void AddClientStats(LoaderStats& stats) const { (void)stats; }

  // The façade's private parts a role uses (LoaderRole is their friend; friendship does not pass to subclasses).
  using StagerFactory = Client::StagerFactory;
  static StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options, const StagerFactory& make_stager) {
    return Client::Connect(options, make_stager);
  }
  static Status PutBack(Client& client, Batch batch) { return client.PutBack(std::move(batch)); }
  static LoadedBatch Loaded(std::unique_ptr<LoadedBatch::State> state) { return LoadedBatch(std::move(state)); }
  void AddAgreement(double seconds);
  void AddBroadcastBytes(uint64_t bytes);

  const LoaderOptions options_;
  const std::shared_ptr<const Clock> clock_;
  std::shared_ptr<DeviceStage> stage_;  // GPU path
  JobSpec spec_;
  uint64_t steps_ = 0;
  std::atomic<bool> stop_requested_{false};
  bool stopped_ = false;
  uint32_t last_epoch_ = 0;

 private:
  mutable Mutex stats_mu_;
  LoaderStats stats_ STOKER_GUARDED_BY(stats_mu_);  // the counters the Loader itself keeps
};

class PlainRank : public LoaderRole {
 public:
  explicit PlainRank(const LoaderOptions& options) : LoaderRole(options) {}
  std::string Checkpoint() const override { return client_->Checkpoint(); }

 protected:
  Status Start() override;
  StatusOr<LoaderDelivery> Fetch(void* stream, std::chrono::milliseconds timeout) override;
  void AddClientStats(LoaderStats& stats) const override { stats.client = client_->Stats(); }

  // A leader's part, which a plain rank has not: joining its group once the client is connected; telling the
  // group what this Next() returns when it is not a batch; and, for a batch about to be handed out from `slot` on
  // the consumer's `stream`, telling the group and sending it the batch's bytes.
  virtual Status JoinGroup() { return Status::Ok(); }
  virtual Status Tell(MetaKind kind, uint32_t epoch, const Status& error) {
    (void)kind, (void)epoch, (void)error;
    return Status::Ok();
  }
  virtual Status Share(const Batch& batch, size_t slot, void* stream) {
    (void)batch, (void)slot, (void)stream;
    return Status::Ok();
  }

  // Stops here with `why` (final), telling the group.
  Status StopWith(const Status& why);

 private:
  Status ConnectClient();
  StatusOr<LoaderDelivery> Agreed(StatusOr<Delivery> d, uint32_t vote, uint32_t agreed);
  StatusOr<LoaderDelivery> Deliver(Delivery d, void* stream);
  Status OnDevice(Batch& batch, LoadedBatch::State& state, void* stream);
  Status OnHost(Batch& batch, LoadedBatch::State& state);

  std::unique_ptr<Client> client_;
  std::shared_ptr<StallProbe> probe_;           // GPU path
  std::shared_ptr<HostBuffers> host_buffers_;   // host path, converting
  std::unique_ptr<Collective> agreement_;
};

class TensorParallelLeader final : public PlainRank {
 public:
  explicit TensorParallelLeader(const LoaderOptions& options) : PlainRank(options) {}

 protected:
  Status JoinGroup() override;
  Status Tell(MetaKind kind, uint32_t epoch, const Status& error) override {
    return BroadcastMeta(kind, epoch, error, nullptr);
  }
  Status Share(const Batch& batch, size_t slot, void* stream) override;

 private:
  Status BroadcastMeta(MetaKind kind, uint32_t epoch, const Status& error, const Batch* batch);
  Status BroadcastHello();

  std::unique_ptr<Collective> group_;
  std::unique_ptr<CollectiveBuffers> meta_;  // one per depth, the metadata of one delivery
  uint64_t meta_sequence_ = 0;
};

class TensorParallelFollower final : public LoaderRole {
 public:
  explicit TensorParallelFollower(const LoaderOptions& options) : LoaderRole(options) {}

 protected:
  Status Start() override;
  StatusOr<LoaderDelivery> Fetch(void* stream, std::chrono::milliseconds timeout) override;

 private:
  StatusOr<LoaderDelivery> ReceiveBatch(const MetaHeader& h, const uint8_t* host, size_t slot, void* stream);

  std::unique_ptr<Collective> group_;
  std::unique_ptr<CollectiveBuffers> meta_;
  uint64_t meta_sequence_ = 0;
  std::shared_ptr<FollowerSlots> slots_;
  uint64_t batches_ = 0;  // batches so far: the next one's slot is this % depth
};

}  // namespace client
}  // namespace stoker
