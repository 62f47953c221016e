// Loader: a Client plus the step from received pixels to the model's input (stoker/loader.h).
//
// Three roles share this file. A plain rank (and a tensor-parallel group's member 0, the leader) fetches from its
// Client, whose staging thread feeds the DeviceStage; the host path converts in Next() into a small ring of host
// buffers instead. A follower has no Client: each Next() receives the leader's metadata broadcast (what comes
// next: a batch, an end of epoch, a stop, an error) and then the batch's raw bytes into its own DeviceStage slot,
// and converts them there. With agreement the data-parallel ranks vote after each fetch and before anything is
// used, so a stop lands on the same batch everywhere.
//
// Errors come in two kinds. Retryable ones (DeadlineExceeded: no batch within the caller's timeout;
// ResourceExhausted: the consumer holds every slot) leave the Loader as it was: the same Next() may be called
// again and nothing is skipped. Every other error is final: the Loader stops, and so do its followers and, through
// the agreement step, the other ranks (before the same batch).
#include "stoker/loader.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "client/src/convert_host.h"
#include "client/src/loader_impl.h"
#include "client/src/received_batch.h"
#include "base/logging.h"

namespace stoker {

using namespace client;  // the Loader's private parts (client/src/loader_impl.h)

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

// ---- Loader::Impl ---------------------------------------------------------------------------------------------

Status Loader::Impl::Open() {
  const LoaderOptions& o = options_;
  STOKER_RETURN_IF_ERROR(o.output.Validate());
  if (o.depth == 0 || o.depth > o.client.prefetch) {
    return InvalidArgumentError("depth (" + std::to_string(o.depth) + ") must be between 1 and the prefetch window (" +
                                std::to_string(o.client.prefetch) + ")");
  }
  if (o.device < -1) return InvalidArgumentError("device must be -1 (host) or a CUDA ordinal");
  if ((o.tensor_parallel.size > 1 || o.agreement.size > 1) && o.device < 0) {
    return InvalidArgumentError("tensor parallelism and agreement run over NCCL: they need a device");
  }
  if (follower() && o.agreement.size > 1) {
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
  if (follower()) return OpenFollower();

  ClientOptions client_options = o.client;
  Client::StagerFactory make_stager;
  if (o.device >= 0) {
    STOKER_ASSIGN_OR_RETURN(probe_, MakeCudaStallProbe(o.device));
    client_options.stall_probe = probe_;
    if (client_options.gpu < 0) client_options.gpu = o.device;
    // Staging copies every batch once anyway, frame by frame: ask for 8 MiB frames (see payload_frame_bytes).
    if (client_options.payload_frame_bytes == 0) client_options.payload_frame_bytes = kStagedFrameBytes;
    make_stager = [this](const JobSpec& spec) -> StatusOr<std::shared_ptr<client::BatchStager>> {
      DeviceStage::Shape shape{spec.batch_size, spec.pipeline.output_height, spec.pipeline.output_width};
      STOKER_ASSIGN_OR_RETURN(stage_, DeviceStage::Create(options_.device, shape, options_.depth, options_.output));
      return std::shared_ptr<client::BatchStager>(stage_);
    };
  }
  STOKER_ASSIGN_OR_RETURN(client_, Client::Connect(client_options, make_stager));
  spec_ = client_->spec();
  steps_ = client_->steps_per_epoch();
  if (o.device < 0 && !o.output.IsIdentity()) {
    host_buffers_ = std::make_shared<HostBuffers>();
    host_buffers_->buffers.resize(o.depth);
    MutexLock lock(host_buffers_->mu);
    host_buffers_->held.assign(o.depth, false);
    for (auto& b : host_buffers_->buffers) b.resize(spec_.BatchBytes() * DTypeSize(o.output.dtype));
  }
  if (leader()) {
    STOKER_ASSIGN_OR_RETURN(tensor_parallel_, Collective::Join(o.tensor_parallel, o.device));
    STOKER_RETURN_IF_ERROR(BroadcastHello());
    STOKER_ASSIGN_OR_RETURN(meta_, CollectiveBuffers::Allocate(o.device, MetaBytes(spec_.batch_size), o.depth));
  }
  if (o.agreement.size > 1) {
    STOKER_ASSIGN_OR_RETURN(agreement_, Collective::Join(o.agreement, o.device));
  }
  return Status::Ok();
}

StatusOr<LoaderDelivery> Loader::Impl::Next(void* stream, std::chrono::milliseconds timeout) {
  if (stage_ != nullptr) STOKER_RETURN_IF_ERROR(CheckConsumerStream(options_.device, stream));
  const TimePoint start = clock_->Now();
  StatusOr<LoaderDelivery> result =
      stopped_ ? StatusOr<LoaderDelivery>(LoaderDelivery{LoaderDelivery::Kind::kStopped, last_epoch_, {}})
               : (follower() ? FollowerNext(stream) : FetchAndAgree(stream, timeout));
  MutexLock lock(stats_mu_);
  stats_.wait_seconds += std::chrono::duration<double>(clock_->Now() - start).count();
  if (result.ok() && result->kind == LoaderDelivery::Kind::kBatch) {
    ++stats_.batches;
    last_epoch_ = result->epoch;
  }
  return result;
}

StatusOr<LoaderDelivery> Loader::Impl::FetchAndAgree(void* stream, std::chrono::milliseconds timeout) {
  if (probe_) {
    Status armed = ArmCudaStallProbe(*probe_, options_.device, stream);
    if (!armed.ok()) return armed;
  }
  StatusOr<Delivery> d = client_->Next(timeout);
  // The vote is taken after the fetch and before anything of it is used, so every rank stops before the same batch.
  uint32_t vote = kGo;
  if (!d.ok()) {
    vote = Retryable(d.status()) ? kRetry : kCannotGoOn;
  } else if (stop_requested_.load()) {
    vote = kStop;
  }
  uint32_t agreed = vote;
  if (agreement_) {
    const TimePoint begin = clock_->Now();
    StatusOr<uint32_t> max = agreement_->AgreeMax(vote);
    {
      MutexLock lock(stats_mu_);
      stats_.agreement_seconds += std::chrono::duration<double>(clock_->Now() - begin).count();
      ++stats_.agreements;
    }
    if (!max.ok()) {
      // The other ranks cannot be told any more: stop here, with the batch (if any) not taken.
      stopped_ = true;
      if (d.ok() && d->kind == Delivery::Kind::kBatch) (void)client_->PutBack(std::move(d->batch));
      Status failed = max.status().WithContext("agreement step");
      if (tensor_parallel_) (void)BroadcastMeta(MetaKind::kError, last_epoch_, failed, nullptr);
      return failed;
    }
    agreed = *max;
  }
  if (agreed == kGo) return Deliver(std::move(*d), stream);
  // Whatever happens below, the delivery in hand is not used: a batch goes back, to come again.
  if (d.ok() && d->kind == Delivery::Kind::kBatch) {
    Status put_back = client_->PutBack(std::move(d->batch));
    if (!put_back.ok()) {
      stopped_ = true;
      if (tensor_parallel_) (void)BroadcastMeta(MetaKind::kError, last_epoch_, put_back, nullptr);
      return put_back;
    }
  } else if (d.ok() && agreed == kRetry) {
    // Ranks agree on every delivery, so one rank's end of epoch or job is every rank's: none could be late there.
    stopped_ = true;
    Status bug = InternalError("ranks out of step: a rank was late for a batch while this one ended an epoch");
    if (tensor_parallel_) (void)BroadcastMeta(MetaKind::kError, last_epoch_, bug, nullptr);
    return bug;
  }
  if (agreed == kRetry) {
    Status late = d.ok() ? DeadlineExceededError("another rank could not take its batch yet (its timeout passed, "
                                                 "or its consumer holds every slot): nothing was taken, try again")
                         : d.status();
    if (tensor_parallel_) STOKER_RETURN_IF_ERROR(BroadcastMeta(MetaKind::kRetry, last_epoch_, late, nullptr));
    return late;
  }
  stopped_ = true;
  if (!d.ok() && vote == kCannotGoOn) {
    if (tensor_parallel_) (void)BroadcastMeta(MetaKind::kError, last_epoch_, d.status(), nullptr);
    return d.status();
  }
  STOKER_LOG(kInfo) << "stopping at batch " << client_->Stats().position << " ("
                    << (vote == kStop ? "asked here" : agreed == kStop ? "another rank asked"
                                                                        : "another rank cannot go on")
                    << ")";
  if (tensor_parallel_) STOKER_RETURN_IF_ERROR(BroadcastMeta(MetaKind::kStopped, last_epoch_, Status::Ok(), nullptr));
  return LoaderDelivery{LoaderDelivery::Kind::kStopped, last_epoch_, {}};
}

StatusOr<LoaderDelivery> Loader::Impl::Deliver(Delivery d, void* stream) {
  if (d.kind != Delivery::Kind::kBatch) {
    const MetaKind kind = d.kind == Delivery::Kind::kEndOfEpoch ? MetaKind::kEndOfEpoch : MetaKind::kEndOfJob;
    if (tensor_parallel_) STOKER_RETURN_IF_ERROR(BroadcastMeta(kind, d.epoch, Status::Ok(), nullptr));
    return LoaderDelivery{d.kind == Delivery::Kind::kEndOfEpoch ? LoaderDelivery::Kind::kEndOfEpoch
                                                                : LoaderDelivery::Kind::kEndOfJob,
                          d.epoch, {}};
  }
  Batch& batch = d.batch;
  auto state = std::make_unique<LoadedBatch::State>();
  state->slot = batch.position() % options_.depth;
  state->stream = stream;
  state->epoch = batch.epoch();
  state->index = batch.index();
  state->position = batch.position();
  state->count = batch.size();
  if (stage_) {
    Status waits = stage_->ConsumerWaitsFor(state->slot, stream);
    if (!waits.ok()) {
      // Nothing of the batch was used: it comes again if the caller fixes its stream; the followers are told.
      const uint32_t epoch = batch.epoch();
      (void)client_->PutBack(std::move(batch));
      if (tensor_parallel_) STOKER_RETURN_IF_ERROR(BroadcastMeta(MetaKind::kRetry, epoch, waits, nullptr));
      return waits;
    }
    if (tensor_parallel_) {
      STOKER_RETURN_IF_ERROR(BroadcastMeta(MetaKind::kBatch, batch.epoch(), Status::Ok(), &batch));
      // From here the followers wait for the batch's bytes: a failure must abort the group, not leave them waiting.
      Status sent = stage_->StreamWaitsCopied(state->slot, tensor_parallel_->stream());
      if (sent.ok()) sent = tensor_parallel_->Broadcast(stage_->DeviceRaw(state->slot), stage_->slot_bytes());
      // The slot is released on the consumer's stream: it must not pass that point before the broadcast has read it.
      if (sent.ok()) sent = tensor_parallel_->OrderBefore(stream);
      if (!sent.ok()) {
        tensor_parallel_->Abort();
        stopped_ = true;
        return sent.WithContext("broadcasting a batch to the tensor-parallel group");
      }
      MutexLock lock(stats_mu_);
      stats_.broadcast_bytes += stage_->slot_bytes();
    }
    state->view = stage_->View(state->slot);
    state->stage = stage_;
  } else {
    BatchView& v = state->view;
    const int64_t n = batch.size(), h = batch.height(), w = batch.width();
    v.device = -1;
    v.dtype = options_.output.dtype;
    v.layout = options_.output.layout;
    v.shape = {n, 3, h, w};
    v.strides = v.layout == Layout::kNCHW ? std::array<int64_t, 4>{3 * h * w, h * w, w, 1}
                                          : std::array<int64_t, 4>{3 * h * w, 1, 3 * w, 3};
    v.labels = batch.labels().data();
    v.sample_ids = batch.sample_ids().data();
    if (!host_buffers_) {
      v.data = const_cast<uint8_t*>(batch.pixels());  // the received message itself: no copy
    } else {
      {
        MutexLock lock(host_buffers_->mu);
        if (host_buffers_->held[state->slot]) {
          STOKER_RETURN_IF_ERROR(client_->PutBack(std::move(batch)));
          return ResourceExhaustedError("the consumer holds " + std::to_string(options_.depth) +
                                        " batches, every conversion buffer (the depth): release one first");
        }
        host_buffers_->held[state->slot] = true;
      }
      void* out = host_buffers_->buffers[state->slot].data();
      ConvertOnHost(batch.pixels(), batch.size(), batch.height(), batch.width(), options_.output, out);
      v.data = out;
      state->host_buffers = host_buffers_;
    }
  }
  state->batch = std::move(batch);
  return LoaderDelivery{LoaderDelivery::Kind::kBatch, state->epoch, LoadedBatch(std::move(state))};
}

LoaderStats Loader::Impl::Stats() const {
  LoaderStats s;
  {
    MutexLock lock(stats_mu_);
    s = stats_;
  }
  if (client_) s.client = client_->Stats();
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

// ---- Loader ---------------------------------------------------------------------------------------------------

StatusOr<std::unique_ptr<Loader>> Loader::Open(const LoaderOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  STOKER_RETURN_IF_ERROR(impl->Open());
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Loader::~Loader() = default;

StatusOr<LoaderDelivery> Loader::Next(void* consumer_stream, std::chrono::milliseconds timeout) {
  return impl_->Next(consumer_stream, timeout);
}
void Loader::RequestStop() { impl_->RequestStop(); }
std::string Loader::Checkpoint() const { return impl_->Checkpoint(); }
LoaderStats Loader::Stats() const { return impl_->Stats(); }
const JobSpec& Loader::spec() const { return impl_->spec(); }
uint64_t Loader::steps_per_epoch() const { return impl_->steps(); }
bool Loader::on_device() const { return impl_->on_device(); }

StatusOr<std::string> NcclUniqueIdHex() { return NewNcclIdHex(); }

}  // namespace stoker
