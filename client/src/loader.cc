// Loader: a Client plus the step from received pixels to the model's input (stoker/loader.h). This file is the
// façade (LoadedBatch, Loader) and what every role shares (client/src/loader_roles.h): which role the options name,
// the checks they must pass, and the wait and batch counts of every Next(). The roles themselves are in
// loader_rank.cc (a rank with a Client, and agreement) and loader_tensor_parallel.cc (the leader's broadcasts and
// the follower).
//
// Errors come in two kinds. Retryable ones (DeadlineExceeded: no batch within the caller's timeout;
// ResourceExhausted: the consumer holds every slot) leave the Loader as it was: the same Next() may be called
// again and nothing is skipped. Every other error is final: the Loader stops, and so do its followers and, through
// the agreement step, the other ranks (before the same batch).
#include "stoker/loader.h"

#include <vector>

#include "base/logging.h"
#include "client/src/loader_roles.h"

namespace stoker {

using namespace client;  // the Loader's private parts (client/src/loader_roles.h)

// ---- LoadedBatch ----------------------------------------------------------------------------------------------

LoadedBatch::LoadedBatch(std::unique_ptr<State> state) : state_(std::move(state)) {}
LoadedBatch::LoadedBatch(LoadedBatch&&) noexcept = default;
LoadedBatch& LoadedBatch::operator=(LoadedBatch&& other) noexcept {
  if (this != &other) {
    Release();
    state_ = std::move(other.state_);
  }
  return *this;
}
LoadedBatch::~LoadedBatch() { Release(); }

void LoadedBatch::Release() {
  if (!state_) return;
  State& s = *state_;
  if (s.stage) {
    // First the device: the slot's buffers are written again only after the consumer's stream passes this event.
    Status recorded = s.stage->RecordRelease(s.slot, s.stream);
    if (!recorded.ok()) STOKER_LOG(kError) << "releasing a batch: " << recorded.ToString();
  }
  if (s.host_buffers) {
    MutexLock lock(s.host_buffers->mu);
    s.host_buffers->held[s.slot] = false;
  }
  if (s.follower_slots) {
    MutexLock lock(s.follower_slots->mu);
    s.follower_slots->held[s.slot] = false;
  }
  s.batch.Release();  // then the host slot: the staging thread may now reuse the device slot
  state_.reset();
}

const BatchView& LoadedBatch::view() const { return state_->view; }
uint32_t LoadedBatch::epoch() const { return state_->epoch; }
uint64_t LoadedBatch::index() const { return state_->index; }
uint64_t LoadedBatch::position() const { return state_->position; }
uint32_t LoadedBatch::size() const { return state_->count; }
std::span<const int64_t> LoadedBatch::labels() const {
  return state_->batch.valid() ? state_->batch.labels() : std::span<const int64_t>(state_->labels);
}
std::span<const uint64_t> LoadedBatch::sample_ids() const {
  return state_->batch.valid() ? state_->batch.sample_ids() : std::span<const uint64_t>(state_->sample_ids);
}
std::span<const uint8_t> LoadedBatch::flags() const {
  return state_->batch.valid() ? state_->batch.flags() : std::span<const uint8_t>(state_->flags);
}
const uint8_t* LoadedBatch::host_pixels() const {
  return state_->batch.valid() ? state_->batch.pixels() : nullptr;
}

// ---- the roles ------------------------------------------------------------------------------------------------

namespace client {
namespace {

Status CheckLoaderOptions(const LoaderOptions& o) {
  STOKER_RETURN_IF_ERROR(o.output.Validate());
  if (o.client.spec) STOKER_RETURN_IF_ERROR(RefuseGpuDecode(*o.client.spec));
  if (o.depth == 0 || o.depth > o.client.prefetch) {
    return InvalidArgumentError("depth (" + std::to_string(o.depth) + ") must be between 1 and the prefetch window (" +
                                std::to_string(o.client.prefetch) + ")");
  }
  if (o.device < -1) return InvalidArgumentError("device must be -1 (host) or a CUDA ordinal");
  if ((o.tensor_parallel.size > 1 || o.agreement.size > 1) && o.device < 0) {
    return InvalidArgumentError("tensor parallelism and agreement run over NCCL: they need a device");
  }
  if (o.tensor_parallel.size > 1 && o.tensor_parallel.rank > 0 && o.agreement.size > 1) {
    return InvalidArgumentError("only a tensor-parallel group's member 0 takes part in the agreement");
  }
  if (o.device >= 0) {
    std::string why;
    const std::vector<GpuDevice> gpus = ListGpus(&why);
    if (o.device >= static_cast<int>(gpus.size())) {
      return FailedPreconditionError("device " + std::to_string(o.device) + " asked for, but " +
                                     (gpus.empty() ? why : std::to_string(gpus.size()) + " CUDA devices are visible") +
                                     ": use device -1 for host batches");
    }
  }
  return Status::Ok();
}

}  // namespace

Status RefuseGpuDecode(const JobSpec& spec) {
  if (!spec.pipeline.DecodesOnGpu()) return Status::Ok();
  return FailedPreconditionError("job '" + spec.name +
                                 "' decodes on the GPU (gpu_decode), and the Loader cannot decode its cut JPEGs yet "
                                 "(nvJPEG is not built in): stoker::Client hands them over as they come");
}

StatusOr<std::unique_ptr<LoaderRole>> LoaderRole::Open(const LoaderOptions& options) {
  STOKER_RETURN_IF_ERROR(CheckLoaderOptions(options));
  std::unique_ptr<LoaderRole> role;
  if (options.tensor_parallel.size <= 1) {
    role = std::make_unique<PlainRank>(options);
  } else if (options.tensor_parallel.rank == 0) {
    role = std::make_unique<TensorParallelLeader>(options);
  } else {
    role = std::make_unique<TensorParallelFollower>(options);
  }
  STOKER_RETURN_IF_ERROR(role->Start());
  return role;
}

StatusOr<LoaderDelivery> LoaderRole::Next(void* stream, std::chrono::milliseconds timeout) {
  if (stage_ != nullptr) STOKER_RETURN_IF_ERROR(CheckConsumerStream(options_.device, stream));
  const TimePoint start = clock_->Now();
  StatusOr<LoaderDelivery> result =
      stopped_ ? StatusOr<LoaderDelivery>(LoaderDelivery{LoaderDelivery::Kind::kStopped, last_epoch_, {}})
               : Fetch(stream, timeout);
  MutexLock lock(stats_mu_);
  stats_.wait_seconds += ToSeconds(clock_->Now() - start);
  if (result.ok() && result->kind == LoaderDelivery::Kind::kBatch) {
    ++stats_.batches;
    last_epoch_ = result->epoch;
  }
  return result;
}

void LoaderRole::AddAgreement(double seconds) {
  MutexLock lock(stats_mu_);
  stats_.agreement_seconds += seconds;
  ++stats_.agreements;
}

void LoaderRole::AddBroadcastBytes(uint64_t bytes) {
  MutexLock lock(stats_mu_);
  stats_.broadcast_bytes += bytes;
}

LoaderStats LoaderRole::Stats() const {
  LoaderStats s;
  {
    MutexLock lock(stats_mu_);
    s = stats_;
  }
  AddClientStats(s);
  s.device = options_.device;
  s.depth = options_.depth;
  if (stage_) {
    s.pinned_bytes = stage_->pinned_bytes();
    s.device_bytes = stage_->device_bytes();
    s.slot_bytes = stage_->slot_bytes();
  } else {
    s.slot_bytes = spec_.BatchBytes() + uint64_t{spec_.batch_size} * 16;
  }
  return s;
}

}  // namespace client

// ---- Loader ---------------------------------------------------------------------------------------------------

StatusOr<std::unique_ptr<Loader>> Loader::Open(const LoaderOptions& options) {
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<LoaderRole> role, LoaderRole::Open(options));
  return std::unique_ptr<Loader>(new Loader(std::move(role)));
}

Loader::Loader(std::unique_ptr<LoaderRole> role) : role_(std::move(role)) {}
Loader::~Loader() = default;

StatusOr<LoaderDelivery> Loader::Next(void* consumer_stream, std::chrono::milliseconds timeout) {
  return role_->Next(consumer_stream, timeout);
}
void Loader::RequestStop() { role_->RequestStop(); }
std::string Loader::Checkpoint() const { return role_->Checkpoint(); }
LoaderStats Loader::Stats() const { return role_->Stats(); }
const JobSpec& Loader::spec() const { return role_->spec(); }
uint64_t Loader::steps_per_epoch() const { return role_->steps(); }
bool Loader::on_device() const { return role_->on_device(); }

StatusOr<std::string> NcclUniqueIdHex() { return NewNcclIdHex(); }

}  // namespace stoker
