// Worker scaling: images/s delivered to a client by 1, 2, 4, ... single-thread worker processes doing the real
// train pipeline (read, crop-region decode, RandomResizedCrop 224, flip, batch, send), against one core's
// decode-only rate and against N x the 1-worker rate, all in the same run on the same images.
//
//   scaling_bench [--workers 1,2,4,8,15] [--images 2000] [--batch-size 64] [--seconds 10] [--json FILE]
//
// Efficiency(N) = rate(N) / (N x rate(1)); goal >= 0.9 at 15 workers on a 16-core machine (one core left for
// the client and the coordinator). Each N is also compared with the same pipeline run in N bare processes just
// before (no transport, no protocol): the machine's own scaling at that concurrency.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "bench/consume_rate.h"
#include "tools/local_cluster.h"
#include "tools/dataset_index.h"
#include "bench/bench_main.h"
#include "dataset/manifest.h"
#include "datagen/synthetic_dataset.h"
#include "worker/crop_geometry.h"
#include "worker/image_pipeline.h"
#include "worker/jpeg_decoder.h"
#include "worker/sample_reader.h"

namespace stoker {
namespace {

std::vector<std::vector<uint8_t>> LoadImages(const std::string& manifest_path, uint64_t count) {
  PosixEnv env;
  std::vector<std::vector<uint8_t>> images;
  auto manifest = Manifest::Open(env, manifest_path);
  if (!manifest.ok()) return images;
  worker::SampleReader reader(env, *manifest);
  for (uint64_t id = 0; id < std::min<uint64_t>(count, (*manifest)->num_samples()); ++id) {
    std::vector<uint8_t> bytes;
    worker::ReadFailure why;
    if (reader.Read(id, &bytes, &why)) images.push_back(std::move(bytes));
  }
  return images;
}

// Images/s of `processes` independent processes each running the train pipeline (decode + RandomResizedCrop +
// flip into a batch buffer) on images in memory, with no transport: what this machine's cores can do at that
// concurrency. The baseline that separates stoker's overhead from the machine's own scaling (turbo, caches).
double StandalonePipelineRate(const std::vector<std::vector<uint8_t>>& images, uint32_t processes, double seconds,
                              bool full_decode_only) {
  std::vector<int> pipes;
  std::vector<pid_t> children;
  for (uint32_t p = 0; p < processes; ++p) {
    int fds[2];
    if (::pipe(fds) != 0) return 0;
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      worker::ImagePipeline pipeline{PipelineSpec{}};
      worker::JpegRegionDecoder decoder;
      std::vector<uint8_t> batch(64 * pipeline.output_bytes());
      uint64_t n = 0;
      auto start = std::chrono::steady_clock::now();
      while (bench::SecondsSince(start) < seconds) {
        for (const auto& b : images) {
          if (full_decode_only) {
            int w, h;
            worker::RegionView v;
            if (decoder.ReadHeader(b.data(), b.size(), &w, &h).ok() && decoder.DecodeFull(&v).ok()) ++n;
          } else {
            uint8_t* slot = batch.data() + (n % 64) * pipeline.output_bytes();
            if (pipeline.Run(b, worker::SampleSeed(1, 0, n + p * 1000003ull), slot).ok) ++n;
          }
        }
      }
      double rate = n / bench::SecondsSince(start);
      ssize_t w = ::write(fds[1], &rate, sizeof(rate));
      ::_exit(w == sizeof(rate) ? 0 : 1);
    }
    ::close(fds[1]);
    pipes.push_back(fds[0]);
    children.push_back(pid);
  }
  double total = 0;
  for (size_t i = 0; i < pipes.size(); ++i) {
    double rate = 0;
    if (::read(pipes[i], &rate, sizeof(rate)) == sizeof(rate)) total += rate;
    ::close(pipes[i]);
    ::waitpid(children[i], nullptr, 0);
  }
  return total;
}

// Its --workers is a list of worker counts (worker_list, not the common workers).
struct Options : bench::CommonOptions {
  Options() : CommonOptions{.batch = 64, .seconds = 10, .images = 2000, .dir = "/tmp/stoker-scaling"} {}
  std::string worker_list = "1,2,4,8,15", manifest;
};

// One worker count's figures.
struct Row {
  uint32_t workers = 0;
  double images_per_second = 0, efficiency = 0, standalone = 0, vs_standalone = 0, wait_fraction = 0;
};

// stoker with `n` single-thread workers, right after the same pipeline in n bare processes on the same images.
// `one`: stoker's rate per worker with the first count (0 while measuring it).
StatusOr<Row> MeasureCount(const Options& o, const std::string& manifest,
                           const std::vector<std::vector<uint8_t>>& samples, uint32_t n, double one) {
  Row row;
  row.workers = n;
  row.standalone = StandalonePipelineRate(samples, n, o.seconds / 2, /*full_decode_only=*/false);
  // A fresh directory: a journal left by an earlier run would restore its job with a client still counted live.
  const std::string run_dir = o.dir + "/run-" + std::to_string(n);
  STOKER_RETURN_IF_ERROR(bench::FreshDirectory(run_dir));
  STOKER_ASSIGN_OR_RETURN(auto cluster, bench::StartCluster(run_dir, n, 1));
  JobSpec spec{.name = "scaling-" + std::to_string(n), .manifest_path = manifest, .batch_size = o.batch, .epochs = 1000};
  auto rate = bench::ConsumeFor(*cluster, spec, /*prefetch=*/std::max<uint32_t>(16, 3 * n), /*credits=*/2, 2.0,
                                o.seconds);
  if (!rate.ok()) return rate.status().WithContext(std::to_string(n) + " workers");
  row.images_per_second = rate->images_per_second;
  row.efficiency = rate->images_per_second / (n * (one > 0 ? one : rate->images_per_second / n));
  row.vs_standalone = rate->images_per_second / row.standalone;
  row.wait_fraction = rate->wait_fraction;
  return row;
}

std::string JsonRows(const std::vector<Row>& rows) {
  std::ostringstream j;
  for (const Row& r : rows) {
    j << (j.tellp() > 0 ? ", " : "") << "{\"workers\": " << r.workers << ", \"images_per_second\": "
      << r.images_per_second << ", \"efficiency_vs_n_times_one\": " << r.efficiency
      << ", \"standalone_pipeline_img_s\": " << r.standalone << ", \"ratio_to_standalone\": " << r.vs_standalone
      << ", \"consumer_wait_fraction\": " << r.wait_fraction << "}";
  }
  return j.str();
}

void AddFlags(FlagSet& flags, Options& o) {
  flags.AddString("workers", &o.worker_list, "comma-separated worker counts");
  flags.AddString("manifest", &o.manifest, "use this dataset instead of generating one");
  using enum bench::CommonFlag;
  bench::AddCommonFlags(flags, o, "timed seconds per worker count", {kBatchSize, kImages, kDir});
}

bench::Outcome RunBench(Options& o) {
  PosixEnv env;
  if (o.manifest.empty()) {
    auto generated = tools::GeneratedDataset(env, o.dir, "scaling", o.images, 256);
    bench::DieUnlessOk(generated.status(), "dataset");
    o.manifest = *generated;
  }
  std::vector<std::vector<uint8_t>> samples = LoadImages(o.manifest, 200);
  double decode_only = StandalonePipelineRate(samples, 1, 3, /*full_decode_only=*/true);
  std::printf("decode-only (libjpeg-turbo full decode), one process: %.0f img/s\n", decode_only);
  std::printf("%8s %12s %12s %16s %14s %12s\n", "workers", "stoker", "per worker", "vs N x 1 worker",
              "standalone", "vs standalone");
  std::vector<Row> rows;
  std::stringstream list(o.worker_list);
  for (std::string item; std::getline(list, item, ',');) {
    const uint32_t n = static_cast<uint32_t>(std::stoul(item));
    auto row = MeasureCount(o, o.manifest, samples, n, rows.empty() ? 0 : rows[0].images_per_second / rows[0].workers);
    bench::DieUnlessOk(row.status(), "measuring");
    rows.push_back(*row);
    std::printf("%8u %12.0f %12.0f %15.0f%% %14.0f %11.0f%%\n", n, row->images_per_second,
                row->images_per_second / n, 100 * row->efficiency, row->standalone, 100 * row->vs_standalone);
    std::fflush(stdout);
  }
  std::ostringstream json;
  json << "{\"decode_only_img_s_one_core\": " << decode_only << ", \"batch_size\": " << o.batch << ", \"runs\": ["
       << JsonRows(rows) << "]}";
  return {0, json.str()};
}

}  // namespace
}  // namespace stoker

STOKER_BENCH_MAIN("scaling_bench", "Images/s by number of single-thread worker processes, same run.");
