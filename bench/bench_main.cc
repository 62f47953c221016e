// The frame every benchmark's main shares (bench_main.h).
#include "bench/bench_main.h"

#include <fstream>

namespace stoker::bench {

void AddJsonFlag(FlagSet& flags, std::string* json) { flags.AddString("json", json, "write the figures here"); }

void WriteJsonIfAsked(const std::string& path, const std::string& object) {
  if (!path.empty() && !object.empty()) std::ofstream(path) << object << "\n";
}

}  // namespace stoker::bench
