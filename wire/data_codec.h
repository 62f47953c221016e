// Encoding and decoding of the data plane's messages (schema/data.capnp <-> common/data_messages.h), beside the
// control plane's codec (common/control_codec.h). Decoding reads every field of an untrusted frame under explicit
// reader limits inside CatchWireErrors, so a malformed frame is one error value and nothing else.
//
// Two decoders apply a receiver's rules on top of the plain decoding:
//  - DecodeClientMessage, a worker's: only a credit naming a client or a seal offer, of this protocol version.
//  - DecodeWorkerMessage, a client's: a DataError, a seal welcome, or a batch header that agrees in every respect with the
//    client's job (job, rank, epoch and index range, shape, list lengths) and with the payload frames that came
//    after it (their number and sizes). Everything the client checks before it looks at its window is here.
//
// Thread safety: free functions, no shared state.
#pragma once

#include <capnp/message.h>

#include <cstdint>
#include <span>
#include <string_view>
#include <zmq.hpp>

#include "wire/data_messages.h"
#include "stoker/status.h"

namespace stoker {

// True for a word a batch header may give as a quarantine reason: 1 to kMaxQuarantineReasonBytes of [a-z0-9_].
bool IsQuarantineReason(std::string_view reason);

zmq::message_t EncodeCredit(const Credit& credit);
zmq::message_t EncodeBatchHeader(const BatchHeader& header);
zmq::message_t EncodeDataError(const DataError& error);
zmq::message_t EncodeSealHello(const SealHello& hello);
zmq::message_t EncodeSealWelcome(const SealWelcome& welcome);

// The size of each part of a seal offer (auth/seal.h: kSealRandomBytes, kSealPublicBytes).
constexpr size_t kSealOfferBytes = 32;

// Any data message, read whole under `limits`. InvalidArgument if malformed; Unimplemented for another protocol
// version.
StatusOr<DataBody> DecodeDataMessage(zmq::message_t frame, const capnp::ReaderOptions& limits);

// What a client may send a worker: a credit, or the offer that opens a sealed connection.
using ClientMessage = std::variant<Credit, SealHello>;

// A client's message, as a worker accepts it. Unimplemented for another protocol version (the worker answers with
// a DataError so the client learns why), InvalidArgument for anything else: another kind, a credit without a
// client id, an offer of the wrong sizes, malformed.
StatusOr<ClientMessage> DecodeClientMessage(zmq::message_t frame);

// What a client expects of every batch of its rank, from the job it registered for and what it asked workers for.
struct BatchExpectation {
  std::string job;
  uint32_t rank = 0;
  uint32_t epochs = 0;
  uint64_t steps_per_epoch = 0;
  uint32_t batch_size = 0;
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t channels = 3;
  uint64_t max_frame_bytes = 0;  // what the client's credits asked for: 0 = one payload frame
  bool sealed = false;           // the connection is sealed: every batch must say so
  bool gpu_decode = false;       // the job's samples come as encoded crops (BatchHeader::crops)

  uint64_t sample_bytes() const { return uint64_t{height} * width * channels; }
  // The most a batch's payload can be (exactly this when the job decodes on the CPU).
  uint64_t payload_bytes() const { return uint64_t{batch_size} * sample_bytes(); }
};

// A worker's message to a client: a batch header that passed every check, an error the worker reports, or the
// answer to a seal offer.
using WorkerMessage = std::variant<BatchHeader, DataError, SealWelcome>;

// `payload_frame_sizes`: the sizes of the frames that followed the header (empty if the receiver discarded them for
// exceeding its limits). InvalidArgument, saying what disagreed, for anything that is not a well-formed batch of
// this client's job and rank with exactly its announced payload.
StatusOr<WorkerMessage> DecodeWorkerMessage(zmq::message_t header, std::span<const size_t> payload_frame_sizes,
                                            const BatchExpectation& expected);

}  // namespace stoker
