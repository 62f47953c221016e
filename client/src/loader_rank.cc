// A Loader's rank with its own Client (client/src/loader_roles.h: PlainRank, and so the tensor-parallel leader):
// connecting the client (on the GPU path with a DeviceStage as its stager and a CUDA stall probe), the agreement
// step after each fetch, and handing a batch out, on the device or through a host conversion buffer.
#include <algorithm>
#include <vector>

#include "auth/keys.h"
#include "base/logging.h"
#include "client/src/convert_host.h"
#include "client/src/loader_roles.h"

namespace stoker::client {

Status PlainRank::Start() {
  STOKER_RETURN_IF_ERROR(ConnectClient());
  STOKER_RETURN_IF_ERROR(JoinGroup());
  if (options_.agreement.size > 1) {
    STOKER_ASSIGN_OR_RETURN(agreement_, Collective::Join(options_.agreement, options_.device));
  }
  return Status::Ok();
}

Status PlainRank::ConnectClient() {
  const LoaderOptions& o = options_;
  ClientOptions client_options = o.client;
  StagerFactory make_stager;
  if (o.device >= 0) {
    STOKER_ASSIGN_OR_RETURN(probe_, MakeCudaStallProbe(o.device));
    client_options.stall_probe = probe_;
    if (client_options.gpu < 0) client_options.gpu = o.device;
    // Staging copies every batch once anyway, frame by frame: ask for 8 MiB frames (see payload_frame_bytes).
    if (client_options.payload_frame_bytes == 0) client_options.payload_frame_bytes = kStagedFrameBytes;
    // Sealed batches are opened straight into spare pinned buffers, enough for the batches that wait in the
    // window while `depth` are staged (and one being opened): their decryption is then their one host copy.
    const bool sealed = !InsecureAsked({.insecure = o.client.insecure}) && o.client.coordinator != kLocalCoordinator;
    const uint32_t spare = sealed ? o.client.prefetch - o.depth + 1 : 0;
    make_stager = [this, spare](const JobSpec& spec) -> StatusOr<std::shared_ptr<BatchStager>> {
      DeviceStage::Shape shape{spec.batch_size, spec.pipeline.output_height, spec.pipeline.output_width};
      auto stage = DeviceStage::Create(options_.device, shape, options_.depth, options_.output, spare);
      if (!stage.ok() && spare > 0) {
        // Pinned memory is limited on some hosts (containers, locked-memory limits): without spares every batch is
        // copied once more, and the Loader still opens.
        STOKER_LOG(kWarning) << "no room for " << spare << " spare pinned buffers (" << stage.status().ToString()
                             << "): sealed batches are opened in place and copied";
        stage = DeviceStage::Create(options_.device, shape, options_.depth, options_.output, 0);
      }
      STOKER_ASSIGN_OR_RETURN(stage_, std::move(stage));
      return std::shared_ptr<BatchStager>(stage_);
    };
  }
  STOKER_ASSIGN_OR_RETURN(client_, Connect(client_options, make_stager));
  spec_ = client_->spec();
  if (Status refused = RefuseGpuDecode(spec_); !refused.ok()) {
    client_.reset();  // attached to such a job: give the rank back
    return refused;
  }
  steps_ = client_->steps_per_epoch();
  if (o.device < 0 && !o.output.IsIdentity()) {
    host_buffers_ = std::make_shared<HostBuffers>();
    host_buffers_->buffers.resize(o.depth);
    MutexLock lock(host_buffers_->mu);
    host_buffers_->held.assign(o.depth, false);
    for (auto& b : host_buffers_->buffers) b.resize(spec_.BatchBytes() * DTypeSize(o.output.dtype));
  }
  return Status::Ok();
}

Status PlainRank::StopWith(const Status& why) {
  stopped_ = true;
  (void)Tell(MetaKind::kError, last_epoch_, why);
  return why;
}

StatusOr<LoaderDelivery> PlainRank::Fetch(void* stream, std::chrono::milliseconds timeout) {
  if (probe_) STOKER_RETURN_IF_ERROR(ArmCudaStallProbe(*probe_, options_.device, stream));
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
    AddAgreement(ToSeconds(clock_->Now() - begin));
    if (!max.ok()) {
      // The other ranks cannot be told any more: stop here, with the batch (if any) not taken.
      if (d.ok() && d->kind == Delivery::Kind::kBatch) (void)PutBack(*client_, std::move(d->batch));
      return StopWith(max.status().WithContext("agreement step"));
    }
    agreed = *max;
  }
  if (agreed == kGo) return Deliver(std::move(*d), stream);
  return Agreed(std::move(d), vote, agreed);
}

// The ranks agreed not to use this fetch: whatever happens here, the delivery in hand is not used (a batch goes
// back, to come again).
StatusOr<LoaderDelivery> PlainRank::Agreed(StatusOr<Delivery> d, uint32_t vote, uint32_t agreed) {
  if (d.ok() && d->kind == Delivery::Kind::kBatch) {
    Status put_back = PutBack(*client_, std::move(d->batch));
    if (!put_back.ok()) return StopWith(put_back);
  } else if (d.ok() && agreed == kRetry) {
    // Ranks agree on every delivery, so one rank's end of epoch or job is every rank's: none could be late there.
    return StopWith(InternalError("ranks out of step: a rank was late for a batch while this one ended an epoch"));
  }
  if (agreed == kRetry) {
    Status late = d.ok() ? DeadlineExceededError("another rank could not take its batch yet (its timeout passed, "
                                                 "or its consumer holds every slot): nothing was taken, try again")
                         : d.status();
    STOKER_RETURN_IF_ERROR(Tell(MetaKind::kRetry, last_epoch_, late));
    return late;
  }
  if (!d.ok() && vote == kCannotGoOn) return StopWith(d.status());
  stopped_ = true;
  STOKER_LOG(kInfo) << "stopping at batch " << client_->Stats().position << " ("
                    << (vote == kStop ? "asked here" : agreed == kStop ? "another rank asked"
                                                                        : "another rank cannot go on")
                    << ")";
  STOKER_RETURN_IF_ERROR(Tell(MetaKind::kStopped, last_epoch_, Status::Ok()));
  return LoaderDelivery{LoaderDelivery::Kind::kStopped, last_epoch_, {}};
}

StatusOr<LoaderDelivery> PlainRank::Deliver(Delivery d, void* stream) {
  if (d.kind != Delivery::Kind::kBatch) {
    const bool epoch_end = d.kind == Delivery::Kind::kEndOfEpoch;
    STOKER_RETURN_IF_ERROR(Tell(epoch_end ? MetaKind::kEndOfEpoch : MetaKind::kEndOfJob, d.epoch, Status::Ok()));
    return LoaderDelivery{epoch_end ? LoaderDelivery::Kind::kEndOfEpoch : LoaderDelivery::Kind::kEndOfJob, d.epoch,
                          {}};
  }
  Batch& batch = d.batch;
  auto state = std::make_unique<LoadedBatch::State>();
  state->slot = batch.position() % options_.depth;
  state->stream = stream;
  state->epoch = batch.epoch();
  state->index = batch.index();
  state->position = batch.position();
  state->count = batch.size();
  STOKER_RETURN_IF_ERROR(stage_ ? OnDevice(batch, *state, stream) : OnHost(batch, *state));
  state->batch = std::move(batch);
  return LoaderDelivery{LoaderDelivery::Kind::kBatch, state->epoch, Loaded(std::move(state))};
}

// The batch's slot of the DeviceStage, converted already: the consumer's stream waits for it (a leader first sends
// it to its group).
Status PlainRank::OnDevice(Batch& batch, LoadedBatch::State& state, void* stream) {
  Status waits = stage_->ConsumerWaitsFor(state.slot, stream);
  if (!waits.ok()) {
    // Nothing of the batch was used: it comes again if the caller fixes its stream; the followers are told.
    const uint32_t epoch = batch.epoch();
    (void)PutBack(*client_, std::move(batch));
    STOKER_RETURN_IF_ERROR(Tell(MetaKind::kRetry, epoch, waits));
    return waits;
  }
  STOKER_RETURN_IF_ERROR(Share(batch, state.slot, stream));
  state.view = stage_->View(state.slot);
  state.stage = stage_;
  return Status::Ok();
}

// The host path: the received pixels themselves (uint8 NHWC asked for), or converted into the slot's buffer.
Status PlainRank::OnHost(Batch& batch, LoadedBatch::State& state) {
  BatchView& v = state.view;
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
    return Status::Ok();
  }
  {
    MutexLock lock(host_buffers_->mu);
    if (host_buffers_->held[state.slot]) {
      STOKER_RETURN_IF_ERROR(PutBack(*client_, std::move(batch)));
      return ResourceExhaustedError("the consumer holds " + std::to_string(options_.depth) +
                                    " batches, every conversion buffer (the depth): release one first");
    }
    host_buffers_->held[state.slot] = true;
  }
  void* out = host_buffers_->buffers[state.slot].data();
  ConvertOnHost(batch.pixels(), batch.size(), batch.height(), batch.width(), options_.output, out);
  v.data = out;
  state.host_buffers = host_buffers_;
  return Status::Ok();
}

}  // namespace stoker::client
