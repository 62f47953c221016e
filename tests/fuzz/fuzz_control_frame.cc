// libFuzzer target: one control frame, as the coordinator decodes a request and a peer decodes a reply
// (common/control_codec.h). Any bytes must come back as a value or an error; never a crash, a hang, or memory
// beyond the reader limits.
#include <cstddef>
#include <cstdint>
#include <zmq.hpp>

#include "wire/control_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint64_t request_id = 0;
  (void)stoker::DecodeRequest(zmq::message_t(data, size), &request_id);
  (void)stoker::DecodeReply(zmq::message_t(data, size));
  return 0;
}
