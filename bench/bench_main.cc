// The frame every benchmark's main shares (bench_main.h).
#include "bench/bench_main.h"

#include <algorithm>
#include <fstream>

namespace stoker::bench {

void AddCommonFlags(FlagSet& flags, CommonOptions& o, const std::string& seconds_help,
                    std::initializer_list<CommonFlag> taken) {
  auto takes = [&](CommonFlag flag) { return std::find(taken.begin(), taken.end(), flag) != taken.end(); };
  if (takes(CommonFlag::kBatchSize)) flags.AddUint32("batch-size", &o.batch, "samples per batch");
  flags.AddDouble("seconds", &o.seconds, seconds_help);
  if (takes(CommonFlag::kWorkers)) flags.AddUint32("workers", &o.workers, "worker processes");
  if (takes(CommonFlag::kWorkerThreads)) flags.AddUint32("worker-threads", &o.worker_threads, "threads per worker");
  if (takes(CommonFlag::kImages)) flags.AddUint("images", &o.images, "images in the generated dataset");
  if (takes(CommonFlag::kDir)) flags.AddString("dir", &o.dir, "working directory (what the run writes)");
}

void AddJsonFlag(FlagSet& flags, std::string* json) { flags.AddString("json", json, "write the figures here"); }

void WriteJsonIfAsked(const std::string& path, const std::string& object) {
  if (!path.empty() && !object.empty()) std::ofstream(path) << object << "\n";
}

}  // namespace stoker::bench
