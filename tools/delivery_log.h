// The delivery log: what a consuming process (`stoker consume`) actually received, one line per batch, so a test
// or `stoker check` can compare it with the plan afterwards. Line format (space separated):
//
//   B <epoch> <rank> <index> <attempt> <worker-id> <xxh64 of the pixels, hex> <sample-id>:<flags> ...
//
// The pixel hash makes "the same seed gives identical batch bytes" checkable across runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/delivery_check.h"
#include "base/env.h"
#include "stoker/status.h"

namespace stoker::tools {

struct LoggedBatch {
  ConsumedBatch batch;
  uint64_t attempt = 0;
  std::string worker_id;
  uint64_t pixel_hash = 0;
};

std::string FormatLogLine(const LoggedBatch& b);
StatusOr<LoggedBatch> ParseLogLine(const std::string& line);
// Reads every batch line of a log file; InvalidArgument names the line that does not parse.
StatusOr<std::vector<LoggedBatch>> ReadDeliveryLog(Env& env, const std::string& path);

}  // namespace stoker::tools
