// What a job that decodes on the GPU (PipelineSpec::gpu_decode) asks of a worker's core, against the CPU path on the
// same images in the same run: images per second per core of sending each JPEG as its file and of the lossless
// cut (worker/jpeg_cutter.h, through ImagePipeline::RunCut), and of the whole CPU pipeline, train and eval, rounds
// alternating (medians); and the bytes per image each puts on the wire (the file, the cut, or the output's pixels
// where neither went).
//
//   cut_bench [--images N] [--seconds S] [--quality Q] [--420] [--dump-dir DIR] [--json FILE]
//
// --dump-dir writes what goes on the wire for train, DIR/file/N.jpg and DIR/cut/N.jpg, for a GPU decoder's rate on
// each (bench/gpu_decode_rate.py).
//
// Goals (issue 34): bytes on the wire per image at most half of the pixels', train and eval; as few worker cores
// per GPU as can be.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_main.h"
#include "bench/image_rate.h"
#include "datagen/synthetic_dataset.h"
#include "worker/crop_geometry.h"
#include "worker/image_pipeline.h"

namespace stoker {
namespace {

struct Options : bench::CommonOptions {
  Options() : CommonOptions{.seconds = 2, .images = 200} {}
  uint32_t quality = 96;
  bool subsample = false;
  std::string dump_dir;
};

struct Mode {
  double cpu_img_s = 0, cut_img_s = 0;  // medians of the rounds
  double cut_bytes = 0;                 // per image on the wire (JPEGs, and pixels where none went)
  double cut_share = 0;                 // of images, sent as JPEGs
  double pixel_bytes = 0;
};

std::span<const uint8_t> Bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

Mode Measure(const std::vector<std::string>& images, double seconds, const PipelineSpec& spec,
             const std::string& dump_dir) {
  worker::ImagePipeline pipeline(spec);
  std::vector<uint8_t> out(pipeline.output_bytes());
  Mode m;
  m.pixel_bytes = static_cast<double>(pipeline.output_bytes());
  double cut = 0, sent = 0;
  if (!dump_dir.empty()) std::filesystem::create_directories(dump_dir);
  for (size_t i = 0; i < images.size(); ++i) {
    worker::CutSample c;
    if (!pipeline.RunCut(Bytes(images[i]), worker::SampleSeed(1, 0, i), out.data(), &c).ok) std::abort();
    sent += static_cast<double>(c.bytes);
    cut += c.encoded;
    if (!dump_dir.empty() && c.encoded) {
      std::ofstream(dump_dir + "/" + std::to_string(i) + ".jpg", std::ios::binary)
          .write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(c.bytes));
    }
  }
  m.cut_bytes = sent / images.size();
  m.cut_share = cut / images.size();
  std::vector<double> cpu, cuts;
  for (int round = 0; round < 5; ++round) {
    cpu.push_back(bench::ImageRate(images, seconds / 5, [&](const std::string& b, size_t n) {
      if (!pipeline.Run(Bytes(b), worker::SampleSeed(1, 0, n), out.data()).ok) std::abort();
    }));
    cuts.push_back(bench::ImageRate(images, seconds / 5, [&](const std::string& b, size_t n) {
      worker::CutSample c;
      if (!pipeline.RunCut(Bytes(b), worker::SampleSeed(1, 0, n), out.data(), &c).ok) std::abort();
    }));
  }
  std::sort(cpu.begin(), cpu.end());
  std::sort(cuts.begin(), cuts.end());
  m.cpu_img_s = cpu[2];
  m.cut_img_s = cuts[2];
  return m;
}

void Print(const char* name, const Mode& m) {
  std::printf("%s: CPU pipeline %.0f img/s per core, GPU's JPEG %.0f (/ CPU %.2f); on the wire %.0f bytes per "
              "image (%.3f of the pixels' %.0f), %.0f%% sent as JPEGs\n",
              name, m.cpu_img_s, m.cut_img_s, m.cut_img_s / m.cpu_img_s, m.cut_bytes, m.cut_bytes / m.pixel_bytes,
              m.pixel_bytes, 100 * m.cut_share);
}

std::string Json(const Options& o, double mean_bytes, const std::vector<std::pair<std::string, Mode>>& modes) {
  std::ostringstream j;
  auto mode = [&](const char* name, const Mode& m) {
    j << ", \"" << name << "\": {\"cpu_img_s\": " << m.cpu_img_s << ", \"cut_img_s\": " << m.cut_img_s
      << ", \"cut_over_cpu\": " << m.cut_img_s / m.cpu_img_s << ", \"wire_bytes_per_image\": " << m.cut_bytes
      << ", \"wire_over_pixels\": " << m.cut_bytes / m.pixel_bytes << ", \"cut_share\": " << m.cut_share << "}";
  };
  j << "{\"images\": " << o.images << ", \"quality\": " << o.quality << ", \"chroma\": \""
    << (o.subsample ? "420" : "444") << "\", \"mean_file_bytes\": " << mean_bytes;
  for (const auto& [name, m] : modes) mode(name.c_str(), m);
  j << "}";
  return j.str();
}

void AddFlags(FlagSet& flags, Options& o) {
  bench::AddCommonFlags(flags, o, "timed seconds per measurement (five alternating rounds)", {bench::CommonFlag::kImages});
  flags.AddUint32("quality", &o.quality, "JPEG quality");
  flags.AddBool("420", &o.subsample, "4:2:0 chroma instead of 4:4:4");
  flags.AddString("dump-dir", &o.dump_dir, "write train's JPEGs as they go on the wire under DIR/file and DIR/cut");
}

bench::Outcome RunBench(const Options& o) {
  std::vector<std::string> images;
  double bytes = 0;
  for (uint64_t i = 0; i < o.images; ++i) {
    auto jpeg = datagen::SyntheticJpeg(i, {static_cast<int>(o.quality), !o.subsample});
    if (!jpeg.ok()) return {1, ""};
    bytes += jpeg->size();
    images.push_back(std::move(*jpeg));
  }
  std::printf("images: %llu synthetic JPEGs, quality %u, %s, mean %.1f KB; one core\n",
              static_cast<unsigned long long>(o.images), o.quality, o.subsample ? "4:2:0" : "4:4:4",
              bytes / o.images / 1024);
  std::vector<std::pair<std::string, Mode>> modes;
  for (GpuDecode gpu : {GpuDecode::kFile, GpuDecode::kCut}) {
    for (PipelineMode mode : {PipelineMode::kTrain, PipelineMode::kEval}) {
      const std::string name = std::string(PipelineModeName(mode)) + "_" + GpuDecodeName(gpu);
      const std::string dump = o.dump_dir.empty() || mode != PipelineMode::kTrain
                                   ? std::string()
                                   : o.dump_dir + "/" + GpuDecodeName(gpu);
      modes.emplace_back(name, Measure(images, o.seconds, PipelineSpec{.mode = mode, .gpu_decode = gpu}, dump));
      Print(name.c_str(), modes.back().second);
    }
  }
  return {0, Json(o, bytes / o.images, modes)};
}

}  // namespace
}  // namespace stoker

STOKER_BENCH_MAIN("cut_bench", "A gpu_decode job's cut against the CPU pipeline on one core, and bytes per image, same run.");
