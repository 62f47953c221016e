// libFuzzer target: a manifest file as the coordinator and workers open it (common/manifest.h). One that opens must
// be readable in full (every class, shard and sample) without an exception or a crash; one that does not gets an
// error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dataset/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto manifest = stoker::Manifest::Parse("fuzz.stoker", std::string_view(reinterpret_cast<const char*>(data), size));
  if (!manifest.ok()) return 0;
  const stoker::Manifest& m = **manifest;
  (void)m.classes();
  for (uint32_t i = 0; i < m.num_shards(); ++i) (void)m.shard(i);
  for (uint64_t i = 0; i < m.num_samples(); ++i) (void)m.sample(i);
  return 0;
}
