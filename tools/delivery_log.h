// The delivery log: what a consuming process (`stoker consume`) actually received, one line per batch, so a test
// or `stoker check` can compare it with the plan afterwards. Line format (space separated):
//
//   B <epoch> <rank> <index> <attempt> <worker-id> <xxh64 of the pixels, hex> <sample-id>:<flags> ...
//
// and, when the consumer connects, the job's shape as the coordinator registered it, which holds for the batch
// lines after it (a job resumed on another shape has another; tools/shaped_check.h judges such logs):
//
//   S <ranks> <batch size> <origin epoch> <origin offset>
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

// The shape a batch was planned in (an S line). ranks 0: the log has no S line before the batch.
struct LoggedShape {
  uint32_t ranks = 0;
  uint32_t batch_size = 0;
  uint32_t origin_epoch = 0;
  uint64_t origin_offset = 0;
  auto operator<=>(const LoggedShape&) const = default;
};

struct LoggedBatch {
  ConsumedBatch batch;
  uint64_t attempt = 0;
  std::string worker_id;
  uint64_t pixel_hash = 0;
  LoggedShape shape;
};

std::string FormatLogLine(const LoggedBatch& b);
std::string FormatShapeLine(const LoggedShape& s);
StatusOr<LoggedShape> ParseShapeLine(const std::string& line);
StatusOr<LoggedBatch> ParseLogLine(const std::string& line);
// Reads every batch line of a log file; InvalidArgument names the line that does not parse.
StatusOr<std::vector<LoggedBatch>> ReadDeliveryLog(Env& env, const std::string& path);

}  // namespace stoker::tools
