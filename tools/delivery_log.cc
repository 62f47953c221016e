// The delivery log (delivery_log.h): one line per consumed batch, written and read back.
#include "tools/delivery_log.h"

#include <cinttypes>
#include <cstdio>
#include <sstream>

namespace stoker::tools {

std::string FormatLogLine(const LoggedBatch& b) {
  std::ostringstream out;
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016" PRIx64, b.pixel_hash);
  out << "B " << b.batch.epoch << ' ' << b.batch.rank << ' ' << b.batch.index << ' ' << b.attempt << ' '
      << (b.worker_id.empty() ? "-" : b.worker_id) << ' ' << hash;
  for (size_t i = 0; i < b.batch.sample_ids.size(); ++i) {
    out << ' ' << b.batch.sample_ids[i] << ':' << static_cast<unsigned>(b.batch.flags[i]);
  }
  return out.str();
}

StatusOr<LoggedBatch> ParseLogLine(const std::string& line) {
  std::istringstream in(line);
  std::string tag, hash;
  LoggedBatch b;
  if (!(in >> tag >> b.batch.epoch >> b.batch.rank >> b.batch.index >> b.attempt >> b.worker_id >> hash) ||
      tag != "B") {
    return InvalidArgumentError("not a batch line: " + line.substr(0, 80));
  }
  b.pixel_hash = std::strtoull(hash.c_str(), nullptr, 16);
  std::string item;
  while (in >> item) {
    size_t colon = item.find(':');
    if (colon == std::string::npos) return InvalidArgumentError("bad sample entry '" + item + "'");
    b.batch.sample_ids.push_back(std::strtoull(item.substr(0, colon).c_str(), nullptr, 10));
    b.batch.flags.push_back(static_cast<uint8_t>(std::strtoul(item.substr(colon + 1).c_str(), nullptr, 10)));
  }
  return b;
}

std::string FormatShapeLine(const LoggedShape& s) {
  return "S " + std::to_string(s.ranks) + " " + std::to_string(s.batch_size) + " " + std::to_string(s.origin_epoch) +
         " " + std::to_string(s.origin_offset);
}

StatusOr<LoggedShape> ParseShapeLine(const std::string& line) {
  std::istringstream in(line);
  std::string tag;
  LoggedShape s;
  if (!(in >> tag >> s.ranks >> s.batch_size >> s.origin_epoch >> s.origin_offset) || tag != "S" || s.ranks == 0 ||
      s.batch_size == 0) {
    return InvalidArgumentError("not a shape line (S <ranks> <batch size> <origin epoch> <origin offset>)");
  }
  return s;
}

StatusOr<std::vector<LoggedBatch>> ReadDeliveryLog(Env& env, const std::string& path) {
  STOKER_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(env, path));
  std::vector<LoggedBatch> out;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  LoggedShape shape;
  while (std::getline(lines, line)) {
    ++number;
    if (line.rfind("S ", 0) == 0) {
      auto parsed = ParseShapeLine(line);
      if (!parsed.ok()) return parsed.status().WithContext(path + ":" + std::to_string(number));
      shape = *parsed;
      continue;
    }
    if (line.empty() || line[0] != 'B') continue;
    auto parsed = ParseLogLine(line);
    if (!parsed.ok()) return parsed.status().WithContext(path + ":" + std::to_string(number));
    parsed->shape = shape;
    out.push_back(std::move(*parsed));
  }
  return out;
}

}  // namespace stoker::tools
