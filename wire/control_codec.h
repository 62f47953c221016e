// Encoding and decoding of control messages (schema/control.capnp <-> common/control_messages.h). Decoding reads
// every field of an untrusted frame under ControlReaderOptions() inside CatchWireErrors, so a malformed frame is
// one InvalidArgument and nothing else; the envelope's senderId becomes the request's worker/client/sender id.
#pragma once

#include <cstdint>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "wire/control_messages.h"
#include "stoker/status.h"

namespace stoker {

struct DecodedRequest {
  uint64_t request_id = 0;
  std::string sender_id;
  RequestBody body;
};

struct DecodedReply {
  uint64_t request_id = 0;
  Status status;
  ReplyBody body;
};

// The envelope's senderId is taken from the body's own id field.
zmq::message_t EncodeRequest(uint64_t request_id, const RequestBody& body);
// InvalidArgument for malformed frames; Unimplemented for another protocol version. *request_id is set as soon as
// the envelope is readable, so even a refused request can be answered.
StatusOr<DecodedRequest> DecodeRequest(zmq::message_t frame, uint64_t* request_id);

zmq::message_t EncodeReply(uint64_t request_id, const Status& status, const ReplyBody& body);
StatusOr<DecodedReply> DecodeReply(zmq::message_t frame);

// "register_worker", "lease_request", ... (metrics labels).
const char* MethodName(const RequestBody& body);
// Every name MethodName() can return, in variant order (for pre-created metric series).
const std::vector<std::string>& MethodNames();

}  // namespace stoker
