// Data-plane messages <-> Cap'n Proto (schema/data.capnp): a field list per message (wire/fields.h), and the
// receivers' checks on top of the plain decoding (data_codec.h).
#include "wire/data_codec.h"

#include <algorithm>
#include <string_view>
#include <tuple>

#include "stoker/schema/data.capnp.h"
#include "wire/fields.h"
#include "wire/frames.h"

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

constexpr auto kEncodedCrop = fields::List<EncodedCrop>(
    STOKER_FIELD(bytes, Bytes), STOKER_FIELD(encoded, Encoded), STOKER_FIELD(flip, Flip), STOKER_FIELD(x, X),
    STOKER_FIELD(y, Y), STOKER_FIELD(width, Width), STOKER_FIELD(height, Height));

// In DataBody's order (wire/fields.h).
constexpr auto kDataMessages = std::tuple(
    fields::Member(fields::List<Credit>(STOKER_FIELD(job, Job), STOKER_FIELD(rank, Rank),
                                        STOKER_FIELD(client_id, ClientId), STOKER_FIELD(credits, Credits),
                                        STOKER_FIELD(max_frame_bytes, MaxFrameBytes),
                                        fields::Bytes(STOKER_FIELD(session, Session))),
                   STOKER_CAPNP_ACCESSORS(Credit)),
    fields::Member(
        fields::List<BatchHeader>(
            STOKER_FIELD(job, Job), STOKER_FIELD(epoch, Epoch), STOKER_FIELD(rank, Rank), STOKER_FIELD(index, Index),
            STOKER_FIELD(unit, Unit), STOKER_FIELD(attempt, Attempt), STOKER_FIELD(worker_id, WorkerId),
            STOKER_FIELD(count, Count), STOKER_FIELD(height, Height), STOKER_FIELD(width, Width),
            STOKER_FIELD(channels, Channels), STOKER_FIELD(labels, Labels), STOKER_FIELD(sample_ids, SampleIds),
            STOKER_FIELD(flags, Flags), STOKER_FIELD(payload_bytes, PayloadBytes),
            STOKER_FIELD(payload_frames, PayloadFrames), STOKER_FIELD(quarantine_reasons, QuarantineReasons),
            STOKER_FIELD(sealed, Sealed), fields::Each(kEncodedCrop, STOKER_FIELD(crops, Crops))),
        STOKER_CAPNP_ACCESSORS(Batch)),
    fields::Member(fields::List<DataError>(STOKER_FIELD(job, Job), STOKER_FIELD(rank, Rank),
                                           STOKER_FIELD(status, Status)),
                   STOKER_CAPNP_ACCESSORS(Error)),
    fields::Member(fields::List<SealHello>(fields::Bytes(STOKER_FIELD(random, Random)),
                                           fields::Bytes(STOKER_FIELD(public_key, PublicKey))),
                   STOKER_CAPNP_ACCESSORS(Hello)),
    fields::Member(fields::List<SealWelcome>(fields::Bytes(STOKER_FIELD(random, Random)),
                                             fields::Bytes(STOKER_FIELD(public_key, PublicKey))),
                   STOKER_CAPNP_ACCESSORS(Welcome)));

// A gpu_decode batch's crops, one per sample (schema/data.capnp EncodedCrop): an encoded sample has 1 .. a
// sample's pixels of bytes and a box a JPEG can hold; the others are pixels, none for a quarantined sample.
Status CheckCrops(const BatchHeader& h, const BatchExpectation& e) {
  if (!e.gpu_decode) {
    return h.crops.empty() ? Status::Ok() : InvalidArgumentError("encoded crops in a batch of a job that decodes on the CPU");
  }
  if (h.crops.size() != e.batch_size) return InvalidArgumentError("encoded crops differ in number from the batch size");
  constexpr int64_t kMaxSide = 65535;  // a JPEG's largest
  for (size_t i = 0; i < h.crops.size(); ++i) {
    const EncodedCrop& c = h.crops[i];
    const bool quarantined = (h.flags[i] & kSampleFlagQuarantined) != 0;
    if (!c.encoded) {
      if (c.flip || c.bytes != (quarantined ? 0 : e.sample_bytes())) {
        return InvalidArgumentError("a sample sent as pixels with another length than the output's, or a flip");
      }
      continue;
    }
    if (quarantined || c.bytes == 0 || c.bytes > e.sample_bytes()) {
      return InvalidArgumentError("an encoded sample that is quarantined, empty, or larger than the output's pixels");
    }
    if (c.width == 0 || c.height == 0 || c.width > kMaxSide || c.height > kMaxSide || std::abs(int64_t{c.x}) > kMaxSide ||
        std::abs(int64_t{c.y}) > kMaxSide) {
      return InvalidArgumentError("an encoded sample's box is empty or larger than a JPEG can be");
    }
  }
  return Status::Ok();
}

// The header's own fields against the client's job.
Status CheckHeader(const BatchHeader& h, const BatchExpectation& e) {
  if (h.job != e.job || h.rank != e.rank) return InvalidArgumentError("batch for another job or rank");
  if (h.epoch >= e.epochs || h.index >= e.steps_per_epoch) return InvalidArgumentError("index out of range");
  if (h.count != e.batch_size || h.height != e.height || h.width != e.width || h.channels != e.channels) {
    return InvalidArgumentError("shape differs from the job's");
  }
  if (h.sealed != e.sealed) {
    return InvalidArgumentError(e.sealed ? "an unsealed batch on a sealed connection" : "a sealed batch on a plain connection");
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
  return CheckCrops(h, e);
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
  uint64_t expected = e.payload_bytes();
  if (e.gpu_decode) {
    expected = 0;
    for (const EncodedCrop& c : h.crops) expected += c.bytes;
  }
  if (h.payload_bytes != expected || total != expected) {
    return InvalidArgumentError(e.gpu_decode ? "payload length differs from the sum of the samples' bytes"
                                             : "payload length differs from count x height x width x channels");
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
  return Encode([&](wire::DataMessage::Builder msg) { std::get<0>(kDataMessages).Put(credit, msg); });
}

zmq::message_t EncodeBatchHeader(const BatchHeader& header) {
  return Encode([&](wire::DataMessage::Builder msg) { std::get<1>(kDataMessages).Put(header, msg); });
}

zmq::message_t EncodeDataError(const DataError& error) {
  return Encode([&](wire::DataMessage::Builder msg) { std::get<2>(kDataMessages).Put(error, msg); });
}

zmq::message_t EncodeSealHello(const SealHello& hello) {
  return Encode([&](wire::DataMessage::Builder msg) { std::get<3>(kDataMessages).Put(hello, msg); });
}

zmq::message_t EncodeSealWelcome(const SealWelcome& welcome) {
  return Encode([&](wire::DataMessage::Builder msg) { std::get<4>(kDataMessages).Put(welcome, msg); });
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
    STOKER_RETURN_IF_ERROR(fields::GetVariant(msg, &out, kDataMessages,
                                              [] { return InvalidArgumentError("data message of an unknown kind"); }));
    if (auto* batch = std::get_if<BatchHeader>(&out)) {
      batch->payload_frames = std::max<uint32_t>(batch->payload_frames, 1);  // 0 reads as 1 (older workers)
    }
    return Status::Ok();
  });
  if (!status.ok()) return status;
  return out;
}

StatusOr<ClientMessage> DecodeClientMessage(zmq::message_t frame) {
  STOKER_ASSIGN_OR_RETURN(DataBody body, DecodeDataMessage(std::move(frame), ControlReaderOptions()));
  if (auto* hello = std::get_if<SealHello>(&body)) {
    if (hello->random.size() != kSealOfferBytes || hello->public_key.size() != kSealOfferBytes) {
      return InvalidArgumentError("a seal offer's parts must be 32 bytes each");
    }
    return ClientMessage(std::move(*hello));
  }
  auto* credit = std::get_if<Credit>(&body);
  if (credit == nullptr) return InvalidArgumentError("a client may only send credits and seal offers");
  if (credit->client_id.empty()) return InvalidArgumentError("a credit without a client id");
  return ClientMessage(std::move(*credit));
}

StatusOr<WorkerMessage> DecodeWorkerMessage(zmq::message_t header, std::span<const size_t> payload_frame_sizes,
                                            const BatchExpectation& expected) {
  auto body = DecodeDataMessage(std::move(header), BatchHeaderReaderOptions(expected.batch_size));
  if (!body.ok()) {
    // A batch of another protocol version is as unusable as a malformed one.
    return InvalidArgumentError(std::string(body.status().message()));
  }
  if (auto* error = std::get_if<DataError>(&*body)) return WorkerMessage(std::move(*error));
  if (auto* welcome = std::get_if<SealWelcome>(&*body)) {
    if (welcome->random.size() != kSealOfferBytes || welcome->public_key.size() != kSealOfferBytes) {
      return InvalidArgumentError("a seal offer's parts must be 32 bytes each");
    }
    return WorkerMessage(std::move(*welcome));
  }
  auto* h = std::get_if<BatchHeader>(&*body);
  if (h == nullptr) return InvalidArgumentError("not a batch");
  STOKER_RETURN_IF_ERROR(CheckHeader(*h, expected));
  STOKER_RETURN_IF_ERROR(CheckPayload(*h, payload_frame_sizes, expected));
  return WorkerMessage(std::move(*h));
}

}  // namespace stoker
