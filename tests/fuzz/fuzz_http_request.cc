// libFuzzer target: the head of an HTTP request as the admin port parses it (common/http_server.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/http_server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)stoker::ParseRequestLine(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
