// libFuzzer target: a tar shard as `stoker index` scans it (common/tar.h). Every member it reports must lie in
// the file; the scan must end (it once looped forever on two headers).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/env.h"
#include "dataset/tar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::StringFile file("fuzz.tar", std::string(reinterpret_cast<const char*>(data), size));
  (void)stoker::ScanTar(file, [&](const stoker::TarMember& m) {
    if (m.data_offset > size || (!m.truncated && m.size > size - m.data_offset)) std::abort();
    return stoker::Status::Ok();
  });
  return 0;
}
