// Reading Prometheus's text exposition format (version 0.0.4), as a process's /metrics serves it: what `stoker top`
// reads from a coordinator. The bytes come from the network, so the reader is strict and bounded: at most
// kMaxMetricsTextBytes of text, kMaxSampleLabels labels a sample, names of [a-zA-Z_:][a-zA-Z0-9_:]*, label values
// with the format's three escapes (\\, \", \n), a decimal value or a special one as Go's ParseFloat takes it (Inf,
// Infinity and NaN, signed or not, in any case: prometheus-cpp writes "Nan") and an optional integer timestamp,
// which is ignored. Comment lines (# HELP, # TYPE, others) and empty lines are skipped.
// A line that is not a sample is an error naming the line number, never a guess.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoker/status.h"

namespace stoker {

constexpr size_t kMaxMetricsTextBytes = 64 << 20;
constexpr size_t kMaxSampleLabels = 64;

struct MetricSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in the order written
  double value = 0;

  // The value of label `key`, or empty.
  std::string Label(std::string_view key) const;
};

StatusOr<std::vector<MetricSample>> ParseMetricsText(std::string_view text);

}  // namespace stoker
