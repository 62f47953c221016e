// Encoding and decoding of the data plane's messages (schema/data.capnp <-> common/data_messages.h), beside the
// control plane's codec (common/control_codec.h). Decoding reads every field of an untrusted frame under explicit
// reader limits inside CatchWireErrors, so a malformed frame is one error value and nothing else.
//
// Two decoders apply a receiver's rules on top of the plain decoding:
//  - DecodeCredit, a worker's: only a credit, of this protocol version, naming a client.
//  - DecodeWorkerMessage, a client's: a DataError, or a batch header that agrees in every respect with the
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

// Any data message, read whole under `limits`. InvalidArgument if malformed; Unimplemented for another protocol
// version.
StatusOr<DataBody> DecodeDataMessage(zmq::message_t frame, const capnp::ReaderOptions& limits);

// A client's credit, as a worker accepts it. Unimplemented for another protocol version (the worker answers with a
// DataError so the client learns why), InvalidArgument for anything else: not a credit, no client id, malformed.
StatusOr<Credit> DecodeCredit(zmq::message_t frame);

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

  uint64_t payload_bytes() const { return uint64_t{batch_size} * height * width * channels; }
};

// A worker's message to a client: a batch header that passed every check, or an error the worker reports.
using WorkerMessage = std::variant<BatchHeader, DataError>;

// `payload_frame_sizes`: the sizes of the frames that followed the header (empty if the receiver discarded them for
// exceeding its limits). InvalidArgument, saying what disagreed, for anything that is not a well-formed batch of
// this client's job and rank with exactly its announced payload.
StatusOr<WorkerMessage> DecodeWorkerMessage(zmq::message_t header, std::span<const size_t> payload_frame_sizes,
                                            const BatchExpectation& expected);

}  // namespace stoker
