// libFuzzer target: what `stoker top` reads from a coordinator's admin port, Prometheus's text exposition format
// (base/metrics_text.h): besides crashes and sanitizer reports, a text read must hold only names the format allows.
// (tools/top.h's view of the samples is not fuzzed: it links the whole command line.)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/metrics_text.h"

namespace {

// What the format allows a name to be: [a-zA-Z_:][a-zA-Z0-9_:]* (a label name: no colon).
bool IsName(const std::string& name, bool colon) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    (colon && c == ':');
    if (!ok) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto samples = stoker::ParseMetricsText(text);
  if (!samples.ok()) return 0;
  // What was read is only what the format allows, and no more samples than the text has lines.
  if (samples->size() > static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1) std::abort();
  for (const stoker::MetricSample& s : *samples) {
    if (!IsName(s.name, /*colon=*/true) || s.labels.size() > stoker::kMaxSampleLabels) std::abort();
    for (const auto& [key, value] : s.labels) {
      if (!IsName(key, /*colon=*/false)) std::abort();
    }
  }
  return 0;
}
