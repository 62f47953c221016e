// What one worker's death costs, at the default heartbeat settings (heartbeat 250 ms, lease TTL 1.5 s):
//  - recovery: from the kill -9 to the moment batches flow to the training loop again (the longest gap between
//    two deliveries after the kill, against the median gap before it);
//  - epoch-time cost: the same number of batches consumed with one kill -9 (and the replacement started at once,
//    as Kubernetes would) against a clean run, both in the same run of the benchmark.
//
//   recovery_bench [--workers 8] [--batch-size 64] [--seconds 120] [--images 2000]
//
// Goals: recovery under 3 s; under 5% epoch-time cost for one kill in a 2-minute epoch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <vector>

#include "bench/consume_rate.h"
#include "tools/dataset_index.h"
#include "bench/bench_main.h"
#include "stoker/client.h"
#include "tools/local_cluster.h"

namespace stoker {
namespace {

using Clock = std::chrono::steady_clock;

struct RunResult {
  double seconds = 0;
  double recovery_seconds = 0;   // kill -> end of the longest delivery gap after it
  double longest_gap = 0;
  double median_gap_before = 0;
  double local_extra_seconds = 0;  // time to deliver, after the kill, what the 30 s before it delivered, less 30 s
  bool ok = false;
};

// Consumes `batches` batches of `spec`; if kill_after > 0, kill -9 worker 0 after that many and start a new one.
RunResult Run(tools::LocalCluster& cluster, const JobSpec& spec, uint64_t batches, uint64_t kill_after, uint32_t prefetch) {
  RunResult r;
  ClientOptions options = bench::ClientOf(cluster, spec);
  options.prefetch = prefetch;
  auto client = Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return r;
  }
  std::vector<Clock::time_point> delivered;
  Clock::time_point killed{};
  auto start = Clock::now();
  while (delivered.size() < batches) {
    auto d = (*client)->Next(std::chrono::seconds(60));
    if (!d.ok()) {
      std::fprintf(stderr, "%s\n", d.status().ToString().c_str());
      return r;
    }
    if (d->kind == Delivery::Kind::kEndOfJob) break;
    if (d->kind != Delivery::Kind::kBatch) continue;
    delivered.push_back(Clock::now());
    if (kill_after > 0 && delivered.size() == kill_after) {
      killed = Clock::now();
      cluster.worker(0).Kill();
      if (auto w = cluster.StartWorker(1); !w.ok()) std::fprintf(stderr, "%s\n", w.status().ToString().c_str());
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.ok = delivered.size() == batches;
  std::vector<double> before;
  for (size_t i = 1; i < delivered.size(); ++i) {
    double gap = std::chrono::duration<double>(delivered[i] - delivered[i - 1]).count();
    if (kill_after == 0 || i < kill_after) {
      before.push_back(gap);
    } else if (gap > r.longest_gap) {
      r.longest_gap = gap;
      r.recovery_seconds = std::chrono::duration<double>(delivered[i] - killed).count();
    }
  }
  if (!before.empty()) {
    std::nth_element(before.begin(), before.begin() + before.size() / 2, before.end());
    r.median_gap_before = before[before.size() / 2];
  }
  if (kill_after > 0) {
    // The same-run estimate, immune to the machine changing speed between two runs: how much longer the batches
    // after the kill took than the same number of batches just before it.
    const double window = 30.0;
    size_t k = kill_after - 1;
    size_t first = k;
    while (first > 0 && std::chrono::duration<double>(delivered[k] - delivered[first - 1]).count() < window) --first;
    size_t n = k - first;
    double before_span = std::chrono::duration<double>(delivered[k] - delivered[first]).count();
    if (n > 0 && k + n < delivered.size()) {
      double after_span = std::chrono::duration<double>(delivered[k + n] - delivered[k]).count();
      r.local_extra_seconds = after_span - before_span;
    }
  }
  return r;
}

struct Options : bench::CommonOptions {
  Options() : CommonOptions{.batch = 64, .seconds = 120, .workers = 8, .images = 2000, .dir = "/tmp/stoker-recovery"} {}
};

// A clean run and a run with one kill, each of as many batches as `seconds` takes on this machine.
struct Outcome {
  uint64_t batches = 0;
  RunResult clean, faulty;
  double cost() const { return clean.seconds > 0 ? faulty.seconds / clean.seconds - 1 : 0; }
  double local_cost() const { return faulty.local_extra_seconds / clean.seconds; }
};

StatusOr<Outcome> Measure(const Options& o) {
  PosixEnv env;
  STOKER_ASSIGN_OR_RETURN(std::string manifest, tools::GeneratedDataset(env, o.dir, "recovery", o.images, 256));
  const std::string run_dir = o.dir + "/run";
  STOKER_RETURN_IF_ERROR(bench::FreshDirectory(run_dir));
  STOKER_ASSIGN_OR_RETURN(auto cluster, bench::StartCluster(run_dir, o.workers, 1));
  JobSpec spec{.manifest_path = manifest, .batch_size = o.batch, .epochs = 100000};
  uint32_t prefetch = std::max<uint32_t>(16, 3 * o.workers);
  // Calibrate: how many batches make a `seconds`-long run on this machine.
  spec.name = "calibrate";
  STOKER_ASSIGN_OR_RETURN(bench::Rate rate, bench::ConsumeFor(*cluster, spec, prefetch, 2, 2.0, 8.0));
  Outcome out;
  out.batches = static_cast<uint64_t>(rate.batches_per_second * o.seconds);
  std::printf("%u single-thread workers, batch %u: %.0f img/s; each run consumes %llu batches\n", o.workers, o.batch,
              rate.images_per_second, static_cast<unsigned long long>(out.batches));
  spec.name = "clean";
  out.clean = Run(*cluster, spec, out.batches, 0, prefetch);
  spec.name = "one-kill";
  out.faulty = Run(*cluster, spec, out.batches, out.batches / 3, prefetch);
  return out;
}

void Print(const Outcome& out) {
  std::printf("clean run: %.1f s; with one kill -9 (and a replacement started at once): %.1f s; cost %+.1f%%\n",
              out.clean.seconds, out.faulty.seconds, 100 * out.cost());
  std::printf("after the kill, the longest wait for a batch was %.2f s (median gap before it: %.0f ms); batches "
              "flowed again %.2f s after the kill\n",
              out.faulty.longest_gap, 1000 * out.faulty.median_gap_before, out.faulty.recovery_seconds);
  std::printf("same-run estimate: the batches after the kill took %.2f s longer than as many just before it: "
              "%+.1f%% of a %.0f s epoch\n",
              out.faulty.local_extra_seconds, 100 * out.local_cost(), out.clean.seconds);
}

std::string Json(const Options& o, const Outcome& out) {
  std::ostringstream j;
  j << "{\"workers\": " << o.workers << ", \"batch_size\": " << o.batch << ", \"batches\": " << out.batches
    << ", \"clean_seconds\": " << out.clean.seconds << ", \"one_kill_seconds\": " << out.faulty.seconds
    << ", \"cost_fraction\": " << out.cost() << ", \"local_extra_seconds\": " << out.faulty.local_extra_seconds
    << ", \"local_cost_fraction\": " << out.local_cost() << ", \"recovery_seconds\": " << out.faulty.recovery_seconds
    << ", \"longest_gap_seconds\": " << out.faulty.longest_gap
    << ", \"median_gap_before_seconds\": " << out.faulty.median_gap_before << "}";
  return j.str();
}

void AddFlags(FlagSet& flags, Options& o) {
  using enum bench::CommonFlag;
  bench::AddCommonFlags(flags, o, "length of the clean run (the 'epoch')", {kBatchSize, kWorkers, kImages, kDir});
}

bench::Outcome RunBench(const Options& o) {
  auto out = Measure(o);
  if (!out.ok()) {
    std::fprintf(stderr, "%s\n", out.status().ToString().c_str());
    return {1};
  }
  Print(*out);
  return {out->clean.ok && out->faulty.ok ? 0 : 1, Json(o, *out)};
}

}  // namespace
}  // namespace stoker

STOKER_BENCH_MAIN("recovery_bench",
                  "Recovery time and epoch-time cost of one worker kill, single-thread worker processes, same run.");
