// libFuzzer target: a checkpoint token as a client decodes the one it is given to resume from, and as the
// coordinator decodes the one a registration carries (dataset/checkpoint.h); a token that decodes must encode to
// a token that decodes to the same fields.
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
    if (!again.ok() || !(*again == *token)) std::abort();
  }
  return 0;
}
