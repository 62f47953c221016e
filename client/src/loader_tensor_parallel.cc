// The Loader's tensor-parallel roles (client/src/loader_roles.h; design.md section 7). TensorParallelLeader, a rank
// with a client: its hello and the metadata record it broadcasts before each delivery, then the batch's raw bytes.
// TensorParallelFollower: receives both into its own slot and converts there.
// A follower checks for a free slot before it receives anything, so a refusal never leaves the group's broadcasts
// out of step; a failure half-way through a batch aborts the communicator so the other members fail, not wait.
#include <algorithm>
#include <cstring>

#include "base/logging.h"
#include "client/src/loader_roles.h"

namespace stoker::client {

// ---- the leader ------------------------------------------------------------------------------------------------

// After the client is connected: the group joins, the followers learn the job's shape (the hello), and the records
// that precede each delivery get their buffers.
Status TensorParallelLeader::JoinGroup() {
  STOKER_ASSIGN_OR_RETURN(group_, Collective::Join(options_.tensor_parallel, options_.device));
  STOKER_RETURN_IF_ERROR(BroadcastHello());
  STOKER_ASSIGN_OR_RETURN(meta_, CollectiveBuffers::Allocate(options_.device, MetaBytes(spec_.batch_size),
                                                             options_.depth));
  return Status::Ok();
}

// A batch about to be handed out from `slot`: its record, then its raw bytes, ordered before the consumer's stream
// may release the slot.
Status TensorParallelLeader::Share(const Batch& batch, size_t slot, void* stream) {
  STOKER_RETURN_IF_ERROR(BroadcastMeta(MetaKind::kBatch, batch.epoch(), Status::Ok(), &batch));
  // From here the followers wait for the batch's bytes: a failure must abort the group, not leave them waiting.
  Status sent = stage_->StreamWaitsCopied(slot, group_->stream());
  if (sent.ok()) sent = group_->Broadcast(stage_->DeviceRaw(slot), stage_->slot_bytes());
  // The slot is released on the consumer's stream: it must not pass that point before the broadcast has read it.
  if (sent.ok()) sent = group_->OrderBefore(stream);
  if (!sent.ok()) {
    group_->Abort();
    stopped_ = true;
    return sent.WithContext("broadcasting a batch to the tensor-parallel group");
  }
  AddBroadcastBytes(stage_->slot_bytes());
  return Status::Ok();
}

Status TensorParallelLeader::BroadcastHello() {
  STOKER_ASSIGN_OR_RETURN(auto hello, CollectiveBuffers::Allocate(options_.device, kHelloBytes, 1));
  MetaHeader h{};
  h.magic = kMetaMagic;
  h.kind = MetaKind::kHello;
  h.batch_size = spec_.batch_size;
  h.height = spec_.pipeline.output_height;
  h.width = spec_.pipeline.output_width;
  h.epochs = spec_.epochs;
  h.steps_per_epoch = steps_;
  std::memcpy(hello->host(0), &h, sizeof(h));
  const std::string name = spec_.name.substr(0, kMetaMessageBytes - 1);
  std::memcpy(hello->host(0) + kMetaHeaderBytes, name.c_str(), name.size() + 1);
  STOKER_RETURN_IF_ERROR(group_->CopyToDevice(hello->device(0), hello->host(0), kHelloBytes));
  STOKER_RETURN_IF_ERROR(group_->Broadcast(hello->device(0), kHelloBytes));
  return group_->WaitQueued();
}

// ---- the follower ----------------------------------------------------------------------------------------------

Status TensorParallelFollower::Start() {
  const LoaderOptions& o = options_;
  STOKER_ASSIGN_OR_RETURN(group_, Collective::Join(o.tensor_parallel, o.device));
  STOKER_ASSIGN_OR_RETURN(auto hello, CollectiveBuffers::Allocate(o.device, kHelloBytes, 1));
  STOKER_RETURN_IF_ERROR(group_->Broadcast(hello->device(0), kHelloBytes));
  STOKER_RETURN_IF_ERROR(group_->CopyToHost(hello->host(0), hello->device(0), kHelloBytes));
  STOKER_RETURN_IF_ERROR(group_->WaitQueued());
  MetaHeader h;
  std::memcpy(&h, hello->host(0), sizeof(h));
  if (h.magic != kMetaMagic || h.kind != MetaKind::kHello) {
    return InternalError("the tensor-parallel leader's hello is malformed (a different stoker build?)");
  }
  const std::string leader_job(reinterpret_cast<const char*>(hello->host(0) + kMetaHeaderBytes));
  if (!o.client.job.empty() && leader_job != o.client.job) {
    return InvalidArgumentError("this follower names job '" + o.client.job + "' but its group's leader feeds '" +
                                leader_job + "'");
  }
  spec_.name = leader_job;
  spec_.batch_size = h.batch_size;
  spec_.pipeline.output_height = h.height;
  spec_.pipeline.output_width = h.width;
  spec_.epochs = h.epochs;
  steps_ = h.steps_per_epoch;
  DeviceStage::Shape shape{h.batch_size, h.height, h.width};
  STOKER_ASSIGN_OR_RETURN(stage_, DeviceStage::Create(o.device, shape, o.depth, o.output));
  STOKER_ASSIGN_OR_RETURN(meta_, CollectiveBuffers::Allocate(o.device, MetaBytes(h.batch_size), o.depth));
  slots_ = std::make_shared<FollowerSlots>();
  MutexLock lock(slots_->mu);
  slots_->held.assign(o.depth, false);
  return Status::Ok();
}

Status TensorParallelLeader::BroadcastMeta(MetaKind kind, uint32_t epoch, const Status& error, const Batch* batch) {
  const uint32_t i = static_cast<uint32_t>(meta_sequence_++ % options_.depth);
  STOKER_RETURN_IF_ERROR(meta_->WaitUnused(i, *group_));  // its last broadcast is long done, normally
  uint8_t* host = meta_->host(i);
  MetaHeader h{};
  h.magic = kMetaMagic;
  h.kind = kind;
  h.epoch = epoch;
  h.status_code = static_cast<int32_t>(error.code());
  const std::string message = error.message().substr(0, kMetaMessageBytes - 1);
  h.message_bytes = static_cast<uint32_t>(message.size());
  std::memcpy(host + kMetaHeaderBytes, message.data(), message.size());
  if (batch != nullptr) {
    h.index = batch->index();
    h.position = batch->position();
    h.count = batch->size();
    uint8_t* p = host + kHelloBytes;
    std::memcpy(p, batch->labels().data(), batch->labels().size_bytes());
    p += batch->labels().size_bytes();
    std::memcpy(p, batch->sample_ids().data(), batch->sample_ids().size_bytes());
    p += batch->sample_ids().size_bytes();
    std::memcpy(p, batch->flags().data(), batch->flags().size_bytes());
  }
  std::memcpy(host, &h, sizeof(h));
  STOKER_RETURN_IF_ERROR(group_->CopyToDevice(meta_->device(i), host, meta_->bytes()));
  STOKER_RETURN_IF_ERROR(group_->Broadcast(meta_->device(i), meta_->bytes()));
  return meta_->MarkUsed(i, group_->stream());
}

StatusOr<LoaderDelivery> TensorParallelFollower::Fetch(void* stream, std::chrono::milliseconds /*timeout*/) {
  // The slot the next batch would take, checked before anything is received: once the leader's metadata is in,
  // the batch's bytes must be received too, or the group's broadcasts fall out of step.
  const size_t slot = batches_ % options_.depth;
  {
    MutexLock lock(slots_->mu);
    if (slots_->held[slot]) {
      return ResourceExhaustedError("the consumer holds " + std::to_string(options_.depth) +
                                    " batches, every device slot (the depth): release one first");
    }
  }
  const uint32_t i = static_cast<uint32_t>(meta_sequence_++ % options_.depth);
  uint8_t* host = meta_->host(i);
  STOKER_RETURN_IF_ERROR(group_->Broadcast(meta_->device(i), meta_->bytes()));
  STOKER_RETURN_IF_ERROR(group_->CopyToHost(host, meta_->device(i), meta_->bytes()));
  STOKER_RETURN_IF_ERROR(group_->WaitQueued());  // the leader's next delivery, whatever it is
  MetaHeader h;
  std::memcpy(&h, host, sizeof(h));
  if (h.magic != kMetaMagic) {
    group_->Abort();
    stopped_ = true;
    return InternalError("malformed metadata from the tensor-parallel leader");
  }
  const std::string message(reinterpret_cast<const char*>(host + kMetaHeaderBytes),
                            std::min<size_t>(h.message_bytes, kMetaMessageBytes));
  switch (h.kind) {
    case MetaKind::kBatch: break;
    case MetaKind::kEndOfEpoch: return LoaderDelivery{LoaderDelivery::Kind::kEndOfEpoch, h.epoch, {}};
    case MetaKind::kEndOfJob: return LoaderDelivery{LoaderDelivery::Kind::kEndOfJob, h.epoch, {}};
    case MetaKind::kStopped:
      stopped_ = true;
      return LoaderDelivery{LoaderDelivery::Kind::kStopped, h.epoch, {}};
    case MetaKind::kRetry:
      return Status(static_cast<StatusCode>(h.status_code), "the tensor-parallel leader: " + message);
    case MetaKind::kError:
      stopped_ = true;
      return Status(static_cast<StatusCode>(h.status_code), "the tensor-parallel leader failed: " + message);
    default:
      group_->Abort();
      stopped_ = true;
      return InternalError("unknown metadata kind from the tensor-parallel leader");
  }
  return ReceiveBatch(h, host, slot, stream);
}

// After the leader's metadata said "a batch": its raw bytes into the follower's slot, converted there, and the
// consumer's stream made to wait for them. A failure here aborts the group: its broadcasts are out of step.
StatusOr<LoaderDelivery> TensorParallelFollower::ReceiveBatch(const MetaHeader& h, const uint8_t* host, size_t slot,
                                                              void* stream) {
  auto state = std::make_unique<LoadedBatch::State>();
  state->slot = slot;
  {
    MutexLock lock(slots_->mu);
    slots_->held[slot] = true;  // checked free above; only this thread takes slots
  }
  ++batches_;
  state->follower_slots = slots_;
  void* tp_stream = group_->stream();
  Status received = stage_->StreamWaitsReleased(slot, tp_stream);
  if (received.ok()) received = group_->Broadcast(stage_->DeviceRaw(slot), stage_->slot_bytes());
  if (received.ok()) received = stage_->ConvertAfter(slot, tp_stream);
  if (received.ok()) received = stage_->ConsumerWaitsFor(slot, stream);
  if (!received.ok()) {
    group_->Abort();
    stopped_ = true;
    return received.WithContext("receiving a batch from the tensor-parallel leader");
  }
  AddBroadcastBytes(stage_->slot_bytes());
  const uint32_t n = h.count;
  const uint8_t* p = host + kHelloBytes;
  state->labels.resize(n);
  state->sample_ids.resize(n);
  state->flags.resize(n);
  std::memcpy(state->labels.data(), p, n * sizeof(int64_t));
  p += n * sizeof(int64_t);
  std::memcpy(state->sample_ids.data(), p, n * sizeof(uint64_t));
  p += n * sizeof(uint64_t);
  std::memcpy(state->flags.data(), p, n);
  state->stream = stream;
  state->epoch = h.epoch;
  state->index = h.index;
  state->position = h.position;
  state->count = n;
  state->view = stage_->View(state->slot);
  state->stage = stage_;
  return LoaderDelivery{LoaderDelivery::Kind::kBatch, h.epoch, Loaded(std::move(state))};
}

}  // namespace stoker::client
