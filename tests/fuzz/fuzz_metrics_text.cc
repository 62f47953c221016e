// libFuzzer target: what `stoker top` reads from a coordinator's admin port, Prometheus's text exposition format
// (base/metrics_text.h), and the table it makes of it (tools/top.h is not linked here: it only reads the parsed
// samples, which this target's checks cover).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "base/metrics_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto samples = stoker::ParseMetricsText(text);
  if (!samples.ok()) return 0;
  for (const stoker::MetricSample& s : *samples) {
    // What was read is what the format allows: a name and label names that are not empty, at most the cap of labels.
    if (s.name.empty() || s.labels.size() > stoker::kMaxSampleLabels) std::abort();
    for (const auto& [key, value] : s.labels) {
      if (key.empty() || key.size() > text.size() || value.size() > text.size()) std::abort();
    }
  }
  return 0;
}
