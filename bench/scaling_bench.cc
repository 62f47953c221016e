// Worker scaling: images/s delivered to a client by 1, 2, 4, ... single-thread worker processes doing the real
// train pipeline (read, crop-region decode, RandomResizedCrop 224, flip, batch, send), against one core's
// decode-only rate and against N x the 1-worker rate, all in the same run on the same images.
//
//   scaling_bench [--workers 1,2,4,8,15] [--images 2000] [--batch-size 64] [--seconds 10] [--json FILE]
//
// Efficiency(N) = rate(N) / (N x rate(1)); goal >= 0.9 at 15 workers on a 16-core machine (one core left for
// the client and the coordinator).
#include <cstdio>
#include <fstream>
#include <sstream>

#include "bench/local_cluster.h"
#include "common/dataset_index.h"
#include "common/flags.h"
#include "common/manifest.h"
#include "tools/synthetic_dataset.h"
#include "worker/jpeg_decoder.h"
#include "worker/sample_reader.h"

namespace stoker {
namespace {

// One core's full-image decode rate over the same dataset (libjpeg-turbo, our decoder).
double DecodeOnlyRate(const std::string& manifest_path, double seconds) {
  PosixEnv env;
  auto manifest = Manifest::Open(manifest_path);
  if (!manifest.ok()) return 0;
  SampleReader reader(env, *manifest);
  std::vector<std::vector<uint8_t>> images;
  for (uint64_t id = 0; id < std::min<uint64_t>(300, (*manifest)->num_samples()); ++id) {
    std::vector<uint8_t> bytes;
    ReadFailure why;
    if (reader.Read(id, &bytes, &why)) images.push_back(std::move(bytes));
  }
  JpegRegionDecoder decoder;
  uint64_t n = 0;
  auto start = std::chrono::steady_clock::now();
  while (bench::SecondsSince(start) < seconds) {
    for (const auto& b : images) {
      int w, h;
      RegionView v;
      if (decoder.ReadHeader(b.data(), b.size(), &w, &h).ok() && decoder.DecodeFull(&v).ok()) ++n;
    }
  }
  return n / bench::SecondsSince(start);
}

int Main(int argc, char** argv) {
  std::string worker_list = "1,2,4,8,15", json, manifest, dir = "/tmp/stoker-scaling";
  uint64_t images = 2000;
  uint32_t batch = 64;
  double seconds = 10;
  FlagSet flags("scaling_bench [flags]", "Images/s by number of single-thread worker processes, same run.");
  flags.AddString("workers", &worker_list, "comma-separated worker counts");
  flags.AddUint("images", &images, "images in the generated dataset");
  flags.AddString("manifest", &manifest, "use this dataset instead of generating one");
  flags.AddString("dir", &dir, "working directory (dataset, logs)");
  flags.AddUint32("batch-size", &batch, "samples per batch");
  flags.AddDouble("seconds", &seconds, "timed seconds per worker count");
  flags.AddString("json", &json, "write the figures here");
  Status parsed = flags.Parse(argc, argv);
  if (parsed.code() == StatusCode::kCancelled) return 0;
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.ToString().c_str());
    return 2;
  }
  PosixEnv env;
  if (manifest.empty()) {
    manifest = dir + "/scaling.stoker";
    auto existing = Manifest::Open(manifest);
    if (!existing.ok() || (*existing)->num_samples() != images) {
      GenerateOptions gen;
      gen.images = images;
      Status s = GenerateTarDataset(env, dir + "/shards", gen);
      if (s.ok()) s = IndexDataset(env, dir + "/shards", manifest, IndexOptions{}).status();
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        return 1;
      }
    }
  }
  double decode_only = DecodeOnlyRate(manifest, 3);
  std::printf("decode-only (libjpeg-turbo full decode), one core: %.0f img/s\n", decode_only);
  std::printf("%8s %12s %14s %12s %10s\n", "workers", "img/s", "per worker", "efficiency", "waited");
  std::vector<uint32_t> counts;
  std::stringstream list(worker_list);
  for (std::string item; std::getline(list, item, ',');) counts.push_back(static_cast<uint32_t>(std::stoul(item)));
  double one = 0;
  std::ostringstream rows;
  for (uint32_t n : counts) {
    bench::LocalCluster cluster(dir);
    Status s = cluster.StartCoordinator();
    if (s.ok()) s = cluster.StartWorkers(n, 1);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    JobSpec spec;
    spec.name = "scaling-" + std::to_string(n);
    spec.manifest_path = manifest;
    spec.batch_size = batch;
    spec.epochs = 1000;
    auto rate = cluster.Consume(spec, /*prefetch=*/std::max<uint32_t>(16, 3 * n), /*credits=*/2, 2.0, seconds);
    cluster.Stop();
    if (!rate.ok()) {
      std::fprintf(stderr, "%u workers: %s\n", n, rate.status().ToString().c_str());
      return 1;
    }
    if (n == counts.front()) one = rate->images_per_second / n;
    double efficiency = rate->images_per_second / (n * one);
    std::printf("%8u %12.0f %14.0f %11.0f%% %9.0f%%\n", n, rate->images_per_second, rate->images_per_second / n,
                100 * efficiency, 100 * rate->wait_fraction);
    std::fflush(stdout);
    rows << (rows.tellp() > 0 ? ", " : "") << "{\"workers\": " << n << ", \"images_per_second\": "
         << rate->images_per_second << ", \"efficiency\": " << efficiency << ", \"ratio_to_decode_only_per_worker\": "
         << rate->images_per_second / n / decode_only << "}";
  }
  if (!json.empty()) {
    std::ofstream(json) << "{\"decode_only_img_s_one_core\": " << decode_only << ", \"batch_size\": " << batch
                        << ", \"runs\": [" << rows.str() << "]}\n";
  }
  return 0;
}

}  // namespace
}  // namespace stoker

int main(int argc, char** argv) { return stoker::Main(argc, argv); }
