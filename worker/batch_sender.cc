// BatchSender (batch_sender.h): a finished batch's header and zero-copy payload frames onto the data socket.
#include "worker/batch_sender.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "stoker/clock.h"
#include "wire/data_codec.h"

namespace stoker::worker {
namespace {

// One batch's payload on its way out, shared by its frames: the buffer returns to the pool with the last one.
struct PayloadHint {
  std::shared_ptr<BatchBufferPool> pool;
  BatchBufferPool::Buffer buffer;
  std::shared_ptr<std::atomic<int64_t>> in_flight;  // payloads ZeroMQ has not finished sending
  std::shared_ptr<prometheus::Histogram> send_seconds;
  std::chrono::steady_clock::time_point queued;
  std::atomic<uint32_t> frames{1};                  // frames of this payload ZeroMQ still holds
};

// Runs on a ZeroMQ I/O thread once a payload frame has been written to the connection (or dropped with it).
void FreePayload(void* /*data*/, void* hint) {
  auto* h = static_cast<PayloadHint*>(hint);
  if (h->frames.fetch_sub(1) != 1) return;
  h->send_seconds->Observe(ToSeconds(std::chrono::steady_clock::now() - h->queued));
  h->pool->Release(h->buffer);
  h->in_flight->fetch_sub(1);
  delete h;
}

}  // namespace

BatchHeader HeaderOf(const BatchBuild& build, const std::string& worker_id) {
  const JobSpec& spec = build.job->spec;
  BatchHeader h;
  h.job = spec.name;
  h.epoch = build.epoch;
  h.rank = std::get<1>(build.unit);
  h.index = build.index;
  h.unit = std::get<2>(build.unit);
  h.attempt = build.attempt;
  h.worker_id = worker_id;
  h.count = spec.batch_size;
  h.height = spec.pipeline.output_height;
  h.width = spec.pipeline.output_width;
  h.channels = 3;
  h.labels = build.labels;
  h.flags = build.flags;
  for (size_t slot = 0; slot < build.flags.size(); ++slot) {
    if ((build.flags[slot] & kSampleFlagQuarantined) == 0) continue;
    // A manifest's defect names come from whoever indexed it; the header carries only words a client accepts.
    const std::string& reason = build.quarantine[slot].reason;
    h.quarantine_reasons.push_back(IsQuarantineReason(reason) ? reason : "other");
  }
  h.sample_ids.reserve(build.samples.size());
  for (const PlannedSample& s : build.samples) h.sample_ids.push_back(s.sample_id);
  h.crops = build.crops;
  h.payload_bytes = build.payload_bytes;
  return h;
}

BatchSender::BatchSender(zmq::socket_t& socket, std::shared_ptr<BatchBufferPool> pool, std::string worker_id,
                         std::shared_ptr<prometheus::Histogram> collate_seconds,
                         std::shared_ptr<prometheus::Histogram> send_seconds, TransportErrors& errors)
    : socket_(socket),
      pool_(std::move(pool)),
      worker_id_(std::move(worker_id)),
      collate_seconds_(std::move(collate_seconds)),
      send_seconds_(std::move(send_seconds)),
      errors_(errors) {}

void BatchSender::Prepare(BatchBuild& build, uint64_t max_frame_bytes, bool sealed) {
  const auto collate_start = std::chrono::steady_clock::now();
  BatchHeader h = HeaderOf(build, worker_id_);
  if (wrong_samples_) {
    for (uint64_t& id : h.sample_ids) id += 1;
  }
  const size_t payload_bytes = h.payload_bytes;
  build.frame_bytes = max_frame_bytes == 0 ? payload_bytes : std::min<size_t>(max_frame_bytes, payload_bytes);
  // A payload of no bytes (a gpu_decode batch of quarantined samples only) is one empty frame.
  build.frames = payload_bytes == 0 ? 1 : static_cast<uint32_t>((payload_bytes + build.frame_bytes - 1) / build.frame_bytes);
  h.payload_frames = build.frames;
  h.sealed = sealed;
  zmq::message_t header = EncodeBatchHeader(h);
  build.wire_header.assign(static_cast<const char*>(header.data()), header.size());
  collate_seconds_->Observe(ToSeconds(std::chrono::steady_clock::now() - collate_start));
}

void BatchSender::Seal(BatchBuild& build, std::shared_ptr<SealSession> session) {
  const size_t payload_bytes = build.payload_bytes;
  SealTrailer trailer;
  trailer.first_counter = session->Reserve(build.frames);
  trailer.tags.resize(build.frames);
  const std::span<const uint8_t> header(reinterpret_cast<const uint8_t*>(build.wire_header.data()),
                                        build.wire_header.size());
  for (uint32_t f = 0; f < build.frames; ++f) {
    const size_t offset = size_t{f} * build.frame_bytes;
    const std::array<uint8_t, 4> index = SealFrameIndex(f);
    const std::span<const uint8_t> associated[] = {header, index};
    session->Seal(trailer.first_counter + f, associated,
                  {build.buffer.data + offset, std::min<size_t>(build.frame_bytes, payload_bytes - offset)},
                  trailer.tags[f]);
  }
  build.seal_trailer = EncodeSealTrailer(trailer);
  build.sealed_with = std::move(session);
}

bool BatchSender::Send(const std::string& peer, BatchBuild& build) {
  const size_t payload_bytes = build.payload_bytes;
  const uint32_t frames = build.frames;
  const bool sealed = !build.seal_trailer.empty();
  const auto queued = std::chrono::steady_clock::now();
  try {
    zmq::message_t id(peer.data(), peer.size());
    if (!socket_.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return false;
    zmq::message_t header(build.wire_header.data(), build.wire_header.size());
    socket_.send(header, zmq::send_flags::sndmore);
    // The payload leaves from the batch buffer itself, in `frames` slices of it; ZeroMQ returns the buffer to the
    // pool when the last is sent. Every slice's message exists before the first is sent, so each one's release is
    // counted however the sending ends.
    auto* hint = new PayloadHint{pool_, build.buffer, in_flight_, send_seconds_, queued};
    hint->frames.store(frames);
    in_flight_->fetch_add(1);
    build.buffer_owned = false;
    std::vector<zmq::message_t> slices;
    slices.reserve(frames);
    for (uint32_t f = 0; f < frames; ++f) {
      const size_t offset = size_t{f} * build.frame_bytes;
      slices.emplace_back(build.buffer.data + offset, std::min<size_t>(build.frame_bytes, payload_bytes - offset),
                          &FreePayload, hint);
    }
    for (uint32_t f = 0; f < frames; ++f) {
      const bool last = f + 1 == frames && !sealed;
      socket_.send(slices[f], last ? zmq::send_flags::none : zmq::send_flags::sndmore);
    }
    if (sealed) {
      zmq::message_t trailer(build.seal_trailer.data(), build.seal_trailer.size());
      socket_.send(trailer, zmq::send_flags::none);
    }
  } catch (const zmq::error_t& e) {
    errors_.Note("send_batch", e);
    return false;
  }
  return true;
}

}  // namespace stoker::worker
