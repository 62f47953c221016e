// libFuzzer target: a checkpoint token as a client decodes the one it is given to resume from
// (common/checkpoint.h); a token that decodes must encode back to the same text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "dataset/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto token = stoker::DecodeCheckpointToken(text);
  if (token.ok()) {
    auto again = stoker::DecodeCheckpointToken(stoker::EncodeCheckpointToken(*token));
    if (!again.ok()) std::abort();
  }
  return 0;
}
