// The Loader's private parts, shared by loader.cc (opening, fetching, delivering, the host path and agreement) and
// loader_tensor_parallel.cc (the leader's broadcasts and the follower's side): the host buffers and follower slots a
// batch holds, the metadata record a tensor-parallel leader broadcasts, LoadedBatch::State and Loader::Impl.
#pragma once

#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "client/cuda/device_stage.h"
#include "client/cuda/gpu_probe.h"
#include "client/nccl/collective.h"
#include "stoker/clock.h"
#include "base/sync.h"
#include "stoker/loader.h"

namespace stoker {
namespace client {

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

class Loader::Impl {
 public:
  // Time (the wait and agreement figures) is read from the client's clock, the process's unless a test gives one.
  explicit Impl(const LoaderOptions& options)
      : options_(options),
        clock_(options.client.clock ? options.client.clock : std::make_shared<RealClock>()) {}

  Status Open();
  StatusOr<LoaderDelivery> Next(void* stream, std::chrono::milliseconds timeout);
  void RequestStop() { stop_requested_.store(true); }
  std::string Checkpoint() const { return client_ ? client_->Checkpoint() : std::string(); }
  LoaderStats Stats() const;
  const JobSpec& spec() const { return spec_; }
  uint64_t steps() const { return steps_; }
  bool on_device() const { return stage_ != nullptr; }

 private:
  bool follower() const { return options_.tensor_parallel.size > 1 && options_.tensor_parallel.rank > 0; }
  bool leader() const { return options_.tensor_parallel.size > 1 && options_.tensor_parallel.rank == 0; }

  StatusOr<LoaderDelivery> FetchAndAgree(void* stream, std::chrono::milliseconds timeout);
  StatusOr<LoaderDelivery> Deliver(Delivery d, void* stream);
  StatusOr<LoaderDelivery> FollowerNext(void* stream);
  StatusOr<LoaderDelivery> ReceiveBatch(const client::MetaHeader& h, const uint8_t* host, size_t slot, void* stream);
  Status OpenLeaderMeta();
  Status OpenFollower();
  // Leader: tells the followers what this Next() returns (and sends the batch's bytes after it).
  Status BroadcastMeta(client::MetaKind kind, uint32_t epoch, const Status& error, const Batch* batch);
  Status BroadcastHello();

  const LoaderOptions options_;
  const std::shared_ptr<const Clock> clock_;
  std::unique_ptr<Client> client_;          // not on a follower
  std::shared_ptr<StallProbe> probe_;       // GPU path
  std::shared_ptr<client::DeviceStage> stage_;      // GPU path
  std::shared_ptr<client::HostBuffers> host_buffers_;     // host path, converting
  std::shared_ptr<client::FollowerSlots> follower_slots_;
  uint64_t follower_batches_ = 0;           // a follower's batches so far: its slot is this % depth
  std::unique_ptr<client::Collective> tensor_parallel_, agreement_;
  std::unique_ptr<client::CollectiveBuffers> meta_;  // tensor parallel: one per depth, metadata of one delivery
  uint64_t meta_sequence_ = 0;
  JobSpec spec_;
  uint64_t steps_ = 0;
  std::atomic<bool> stop_requested_{false};
  bool stopped_ = false;
  uint32_t last_epoch_ = 0;

  mutable Mutex stats_mu_;
  LoaderStats stats_ STOKER_GUARDED_BY(stats_mu_);  // the counters the Loader itself keeps
};

}  // namespace stoker
