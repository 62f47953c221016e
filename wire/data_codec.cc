#include "wire/data_codec.h"

#include <algorithm>
#include <string_view>

#include "wire/frames.h"
#include "stoker/schema/data.capnp.h"

namespace stoker {

static_assert(kSampleFlagPadding == wire::SAMPLE_FLAG_PADDING && kSampleFlagQuarantined == wire::SAMPLE_FLAG_QUARANTINED,
              "common/data_messages.h and schema/data.capnp disagree on the sample flags");

namespace {

template <typename Fill>
zmq::message_t Encode(Fill fill) {
  capnp::MallocMessageBuilder message(kControlFirstSegmentWords);
  auto msg = message.initRoot<wire::DataMessage>();
  msg.setProtocolVersion(wire::PROTOCOL_VERSION);
  fill(msg);
  return ToFrame(message);
}

template <typename ListBuilder, typename T>
void SetList(ListBuilder list, const std::vector<T>& values) {
  for (size_t i = 0; i < values.size(); ++i) list.set(static_cast<unsigned>(i), values[i]);
}

template <typename T, typename List>
std::vector<T> ToVector(List list) {
  std::vector<T> out;
  out.reserve(list.size());
  for (auto v : list) out.push_back(v);
  return out;
}

BatchHeader ReadBatchHeader(wire::BatchHeader::Reader h) {
  BatchHeader out;
  out.job = h.getJob().cStr();
  out.epoch = h.getEpoch();
  out.rank = h.getRank();
  out.index = h.getIndex();
  out.unit = h.getUnit();
  out.attempt = h.getAttempt();
  out.worker_id = h.getWorkerId().cStr();
  out.count = h.getCount();
  out.height = h.getHeight();
  out.width = h.getWidth();
  out.channels = h.getChannels();
  out.labels = ToVector<int64_t>(h.getLabels());
  out.sample_ids = ToVector<uint64_t>(h.getSampleIds());
  out.flags = ToVector<uint8_t>(h.getFlags());
  out.payload_bytes = h.getPayloadBytes();
  out.payload_frames = std::max<uint32_t>(h.getPayloadFrames(), 1);  // 0 reads as 1 (older workers)
  for (auto reason : h.getQuarantineReasons()) out.quarantine_reasons.emplace_back(reason.cStr(), reason.size());
  return out;
}

// The header's own fields against the client's job.
Status CheckHeader(const BatchHeader& h, const BatchExpectation& e) {
  if (h.job != e.job || h.rank != e.rank) return InvalidArgumentError("batch for another job or rank");
  if (h.epoch >= e.epochs || h.index >= e.steps_per_epoch) return InvalidArgumentError("index out of range");
  if (h.count != e.batch_size || h.height != e.height || h.width != e.width || h.channels != e.channels) {
    return InvalidArgumentError("shape differs from the job's");
  }
  if (h.labels.size() != e.batch_size || h.sample_ids.size() != e.batch_size || h.flags.size() != e.batch_size) {
    return InvalidArgumentError("list lengths differ from the batch size");
  }
  if (!h.quarantine_reasons.empty()) {
    const auto quarantined = std::count_if(h.flags.begin(), h.flags.end(),
                                           [](uint8_t f) { return (f & kSampleFlagQuarantined) != 0; });
    if (h.quarantine_reasons.size() != static_cast<size_t>(quarantined)) {
      return InvalidArgumentError("quarantine reasons differ in number from the quarantined samples");
    }
    for (const std::string& reason : h.quarantine_reasons) {
      if (!IsQuarantineReason(reason)) {
        return InvalidArgumentError("a quarantine reason that is not a short word of [a-z0-9_]");
      }
    }
  }
  return Status::Ok();
}

// The payload frames that came after the header against what it announced and what the client asked for.
Status CheckPayload(const BatchHeader& h, std::span<const size_t> sizes, const BatchExpectation& e) {
  if (sizes.empty() || sizes.size() != h.payload_frames) {
    return InvalidArgumentError("the header announces " + std::to_string(h.payload_frames) + " payload frames, " +
                                std::to_string(sizes.size()) + " came");
  }
  uint64_t total = 0;
  for (size_t size : sizes) {
    if (h.payload_frames > 1 && (e.max_frame_bytes == 0 || size > e.max_frame_bytes)) {
      return InvalidArgumentError("payload frames larger than this client asked for");
    }
    total += size;
  }
  if (h.payload_bytes != e.payload_bytes() || total != e.payload_bytes()) {
    return InvalidArgumentError("payload length differs from count x height x width x channels");
  }
  return Status::Ok();
}

}  // namespace

bool IsQuarantineReason(std::string_view reason) {
  return !reason.empty() && reason.size() <= kMaxQuarantineReasonBytes &&
         std::all_of(reason.begin(), reason.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

zmq::message_t EncodeCredit(const Credit& credit) {
  return Encode([&](wire::DataMessage::Builder msg) {
    auto c = msg.initCredit();
    c.setJob(credit.job);
    c.setRank(credit.rank);
    c.setClientId(credit.client_id);
    c.setCredits(credit.credits);
    c.setMaxFrameBytes(credit.max_frame_bytes);
  });
}

zmq::message_t EncodeBatchHeader(const BatchHeader& header) {
  return Encode([&](wire::DataMessage::Builder msg) {
    auto h = msg.initBatch();
    h.setJob(header.job);
    h.setEpoch(header.epoch);
    h.setRank(header.rank);
    h.setIndex(header.index);
    h.setUnit(header.unit);
    h.setAttempt(header.attempt);
    h.setWorkerId(header.worker_id);
    h.setCount(header.count);
    h.setHeight(header.height);
    h.setWidth(header.width);
    h.setChannels(header.channels);
    SetList(h.initLabels(static_cast<unsigned>(header.labels.size())), header.labels);
    SetList(h.initSampleIds(static_cast<unsigned>(header.sample_ids.size())), header.sample_ids);
    SetList(h.initFlags(static_cast<unsigned>(header.flags.size())), header.flags);
    h.setPayloadBytes(header.payload_bytes);
    h.setPayloadFrames(header.payload_frames);
    auto reasons = h.initQuarantineReasons(static_cast<unsigned>(header.quarantine_reasons.size()));
    for (size_t i = 0; i < header.quarantine_reasons.size(); ++i) {
      reasons.set(static_cast<unsigned>(i), header.quarantine_reasons[i]);
    }
  });
}

zmq::message_t EncodeDataError(const DataError& error) {
  return Encode([&](wire::DataMessage::Builder msg) {
    auto e = msg.initError();
    e.setJob(error.job);
    e.setRank(error.rank);
    ToWire(error.status, e.initStatus());
  });
}

StatusOr<DataBody> DecodeDataMessage(zmq::message_t frame, const capnp::ReaderOptions& limits) {
  STOKER_ASSIGN_OR_RETURN(auto parsed, ParsedFrame::Parse(std::move(frame), limits));
  DataBody out;
  Status status = CatchWireErrors("data message", [&]() -> Status {
    auto msg = parsed->Root<wire::DataMessage>();
    if (msg.getProtocolVersion() != wire::PROTOCOL_VERSION) {
      return UnimplementedError("data protocol version " + std::to_string(msg.getProtocolVersion()) +
                                " is not supported; this build speaks version " +
                                std::to_string(wire::PROTOCOL_VERSION));
    }
    switch (msg.which()) {
      case wire::DataMessage::CREDIT: {
        auto c = msg.getCredit();
        out = Credit{c.getJob().cStr(), c.getRank(), c.getClientId().cStr(), c.getCredits(), c.getMaxFrameBytes()};
        return Status::Ok();
      }
      case wire::DataMessage::BATCH:
        out = ReadBatchHeader(msg.getBatch());
        return Status::Ok();
      case wire::DataMessage::ERROR: {
        auto e = msg.getError();
        out = DataError{e.getJob().cStr(), e.getRank(), FromWire(e.getStatus())};
        return Status::Ok();
      }
      default:
        return InvalidArgumentError("data message of an unknown kind");
    }
  });
  if (!status.ok()) return status;
  return out;
}

StatusOr<Credit> DecodeCredit(zmq::message_t frame) {
  STOKER_ASSIGN_OR_RETURN(DataBody body, DecodeDataMessage(std::move(frame), ControlReaderOptions()));
  auto* credit = std::get_if<Credit>(&body);
  if (credit == nullptr) return InvalidArgumentError("a client may only send credits");
  if (credit->client_id.empty()) return InvalidArgumentError("a credit without a client id");
  return std::move(*credit);
}

StatusOr<WorkerMessage> DecodeWorkerMessage(zmq::message_t header, std::span<const size_t> payload_frame_sizes,
                                            const BatchExpectation& expected) {
  auto body = DecodeDataMessage(std::move(header), BatchHeaderReaderOptions(expected.batch_size));
  if (!body.ok()) {
    // A batch of another protocol version is as unusable as a malformed one.
    return InvalidArgumentError(std::string(body.status().message()));
  }
  if (auto* error = std::get_if<DataError>(&*body)) return WorkerMessage(std::move(*error));
  auto* h = std::get_if<BatchHeader>(&*body);
  if (h == nullptr) return InvalidArgumentError("not a batch");
  STOKER_RETURN_IF_ERROR(CheckHeader(*h, expected));
  STOKER_RETURN_IF_ERROR(CheckPayload(*h, payload_frame_sizes, expected));
  return WorkerMessage(std::move(*h));
}

}  // namespace stoker
