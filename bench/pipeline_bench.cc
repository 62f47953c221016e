// Worker pipeline throughput on one core, against full-image decode-only measured in the same run on the same
// images: OpenCV imdecode (the brief's baseline) and libjpeg-turbo's full decode through our decoder.
//
//   pipeline_bench [--images N] [--seconds S] [--batch B] [--quality Q] [--420] [--json FILE]
//
// Prints img/s per core for each and the ratios train / imdecode (goal >= 1.3) and eval / imdecode (goal >= 1.1),
// for the default resize kernel (Pillow's bilinear) and the OpenCV one jobs got before it; and the train pipeline
// with every batch sealed as a worker seals it (AES-256-GCM in place, frames of 8 MiB) against the same without,
// on the same core (goal >= 0.97).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <opencv2/core.hpp>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>
#if STOKER_WITH_IMGCODECS
#include <opencv2/imgcodecs.hpp>
#endif

#include "auth/seal.h"
#include "bench/bench_main.h"
#include "bench/image_rate.h"
#include "datagen/synthetic_dataset.h"
#include "worker/crop_geometry.h"
#include "worker/image_pipeline.h"
#include "worker/jpeg_decoder.h"

namespace stoker {
namespace {

// Its batch flag is --batch, not --batch-size: it declares that itself.
struct Options : bench::CommonOptions {
  Options() : CommonOptions{.batch = 64, .seconds = 3, .images = 200} {}
  uint32_t quality = 96;
  bool subsample = false;
  std::string dump_dir;
};

// `images` synthetic JPEGs (written to --dump-dir too, if given); *bytes: their total size.
std::vector<std::string> MakeImages(const Options& o, double* bytes) {
  std::vector<std::string> images;
  for (uint64_t i = 0; i < o.images; ++i) {
    auto jpeg = datagen::SyntheticJpeg(i, {static_cast<int>(o.quality), !o.subsample});
    if (!jpeg.ok()) std::exit(1);
    *bytes += jpeg->size();
    if (!o.dump_dir.empty()) {
      std::ofstream(o.dump_dir + "/" + std::to_string(i) + ".jpg", std::ios::binary) << *jpeg;
    }
    images.push_back(std::move(*jpeg));
  }
  return images;
}

// The decode-only baselines: OpenCV imdecode (where imgcodecs is built in; 0 otherwise) and our full decode.
std::pair<double, double> DecodeOnlyRates(const std::vector<std::string>& images, double seconds) {
  double imdecode = 0;
#if STOKER_WITH_IMGCODECS
  imdecode = bench::ImageRate(images, seconds, [](const std::string& b, size_t) {
    cv::Mat m = cv::imdecode(cv::Mat(1, static_cast<int>(b.size()), CV_8UC1, const_cast<char*>(b.data())),
                             cv::IMREAD_COLOR);
    if (m.empty()) std::abort();
  });
#endif
  worker::JpegRegionDecoder decoder;
  double full = bench::ImageRate(images, seconds, [&](const std::string& b, size_t) {
    int w, h;
    worker::RegionView v;
    if (!decoder.ReadHeader(reinterpret_cast<const uint8_t*>(b.data()), b.size(), &w, &h).ok() ||
        !decoder.DecodeFull(&v).ok()) {
      std::abort();
    }
  });
  return {imdecode, full};
}

// The whole pipeline of `spec`, writing into a batch of `batch`: img/s, and where its time went.
double PipelineRate(const std::vector<std::string>& images, double seconds, uint32_t batch, const PipelineSpec& spec) {
  std::vector<uint8_t> batch_buffer(size_t{batch} * 224 * 224 * 3);
  worker::ImagePipeline pipeline(spec);
  double r = bench::ImageRate(images, seconds, [&](const std::string& b, size_t n) {
    uint8_t* slot = batch_buffer.data() + (n % batch) * pipeline.output_bytes();
    if (!pipeline.Run({reinterpret_cast<const uint8_t*>(b.data()), b.size()}, worker::SampleSeed(1, 0, n), slot).ok) {
      std::abort();
    }
  });
  const worker::StageSeconds& s = pipeline.stage_seconds();
  std::printf("    (%s: decode %.0f%% of pipeline time, resize+flip %.0f%%)\n",
              spec.mode == PipelineMode::kTrain ? "train" : "eval", 100 * s.decode / (s.decode + s.augment),
              100 * s.augment / (s.decode + s.augment));
  return r;
}

// The train pipeline with each full batch sealed in place, in frames of 8 MiB (a GPU client's frames), with a 4 KiB
// header as associated data, as the worker's pipeline threads do before a batch leaves.
double SealedPipelineRate(const std::vector<std::string>& images, double seconds, uint32_t batch,
                          const PipelineSpec& spec, bool seal) {
  SealOffer client = SealOffer::Make(), worker = SealOffer::Make();
  const SealTranscript t{"client:bench", "w-bench", client.random(), client.public_key(), worker.random(),
                         worker.public_key()};
  auto session = SealSession::Derive(std::string(kSealKeyBytes, 'k'), t, worker, SealDirection::kWorkerToClient);
  if (!session.ok()) std::abort();
  std::vector<uint8_t> batch_buffer(size_t{batch} * 224 * 224 * 3);
  const std::vector<uint8_t> header(4096, 'h');
  std::array<uint8_t, kSealTagBytes> tag{};
  worker::ImagePipeline pipeline(spec);
  return bench::ImageRate(images, seconds, [&](const std::string& b, size_t n) {
    uint8_t* slot = batch_buffer.data() + (n % batch) * pipeline.output_bytes();
    if (!pipeline.Run({reinterpret_cast<const uint8_t*>(b.data()), b.size()}, worker::SampleSeed(1, 0, n), slot).ok) {
      std::abort();
    }
    if (!seal || (n + 1) % batch != 0) return;
    const size_t bytes = size_t{batch} * pipeline.output_bytes(), frame = size_t{8} << 20;
    for (size_t at = 0; at < bytes; at += frame) {
      const std::span<const uint8_t> associated[] = {header};
      (*session)->Seal((*session)->Reserve(1), associated, {batch_buffer.data() + at, std::min(frame, bytes - at)},
                       tag);
    }
  });
}

struct Figures {
  double bytes = 0, imdecode = 0, full = 0, train = 0, train_opencv = 0, train_linear = 0, eval = 0, eval_opencv = 0;
  double train_sealed = 0, train_unsealed_alternating = 0;  // medians of rounds alternating with each other
  double baseline() const { return imdecode > 0 ? imdecode : full; }
};

void Print(const Figures& f) {
  auto row = [&](const char* what, double rate) {
    std::printf("%-52s %10.0f %8.2f\n", what, rate, rate / f.baseline());
  };
  std::printf("\n%-52s %10s %8s\n", "one core", "img/s", "ratio");
  std::printf("%-52s %10.0f %8s\n", "baseline: OpenCV imdecode, full image", f.imdecode, f.imdecode > 0 ? "1.00" : "n/a");
  row("libjpeg-turbo full decode (our decoder)", f.full);
  row("train: crop decode + RRC224 + flip (pillow, default)", f.train);
  row("train: the same, --resize-kernel opencv (area)", f.train_opencv);
  row("train: the same, pillow --no-antialias (bilinear)", f.train_linear);
  row("eval: resize 256 + centre crop 224 (pillow)", f.eval);
  row("eval: the same, --resize-kernel opencv", f.eval_opencv);
  row("train, alternating rounds: unsealed", f.train_unsealed_alternating);
  row("train, alternating rounds: each batch then sealed", f.train_sealed);
  std::printf("sealed / unsealed train pipeline on one core: %.3f (goal >= 0.97)\n",
              f.train_sealed / f.train_unsealed_alternating);
}

std::string Json(const Options& o, const Figures& f) {
  std::ostringstream j;
  j << "{\"images\": " << o.images << ", \"quality\": " << o.quality << ", \"chroma\": \""
    << (o.subsample ? "420" : "444") << "\", \"mean_kb\": " << f.bytes / o.images / 1024
    << ", \"imdecode_img_s\": " << f.imdecode << ", \"libjpeg_full_img_s\": " << f.full
    << ", \"train_img_s\": " << f.train << ", \"train_opencv_img_s\": " << f.train_opencv
    << ", \"train_bilinear_img_s\": " << f.train_linear << ", \"eval_img_s\": " << f.eval
    << ", \"eval_opencv_img_s\": " << f.eval_opencv << ", \"train_ratio\": " << f.train / f.baseline()
    << ", \"eval_ratio\": " << f.eval / f.baseline() << ", \"train_sealed_img_s\": " << f.train_sealed
    << ", \"train_unsealed_alternating_img_s\": " << f.train_unsealed_alternating
    << ", \"sealed_over_unsealed\": " << f.train_sealed / f.train_unsealed_alternating << "}";
  return j.str();
}

void AddFlags(FlagSet& flags, Options& o) {
  bench::AddCommonFlags(flags, o, "timed seconds per measurement", {bench::CommonFlag::kImages});
  flags.AddUint32("batch", &o.batch, "batch the pipeline writes into");
  flags.AddUint32("quality", &o.quality, "JPEG quality");
  flags.AddBool("420", &o.subsample, "4:2:0 chroma instead of 4:4:4");
  flags.AddString("dump-dir", &o.dump_dir, "also write the images here (for a baseline measured by another program)");
}

bench::Outcome RunBench(const Options& o) {
  cv::setNumThreads(0);
  Figures f;
  const std::vector<std::string> images = MakeImages(o, &f.bytes);
  std::printf("images: %llu synthetic JPEGs, quality %u, %s, mean %.1f KB\n", static_cast<unsigned long long>(o.images),
              o.quality, o.subsample ? "4:2:0" : "4:4:4", f.bytes / o.images / 1024);
  std::tie(f.imdecode, f.full) = DecodeOnlyRates(images, o.seconds);
  // The default kernel (Pillow's bilinear, exact) and the one jobs got before it (OpenCV area), same images.
  const PipelineSpec train, train_opencv{.resize_kernel = ResizeKernel::kOpenCv}, linear{.antialias = false};
  const PipelineSpec eval{.mode = PipelineMode::kEval};
  const PipelineSpec eval_opencv{.mode = PipelineMode::kEval, .resize_kernel = ResizeKernel::kOpenCv};
  f.train = PipelineRate(images, o.seconds, o.batch, train);
  f.train_opencv = PipelineRate(images, o.seconds, o.batch, train_opencv);
  f.train_linear = PipelineRate(images, o.seconds, o.batch, linear);
  f.eval = PipelineRate(images, o.seconds, o.batch, eval);
  f.eval_opencv = PipelineRate(images, o.seconds, o.batch, eval_opencv);
  // Sealed against unsealed, alternating in short rounds (medians), so drift in the core's speed hits both alike.
  std::vector<double> plain_rounds, sealed_rounds;
  for (int round = 0; round < 5; ++round) {
    plain_rounds.push_back(SealedPipelineRate(images, o.seconds / 2, o.batch, train, false));
    sealed_rounds.push_back(SealedPipelineRate(images, o.seconds / 2, o.batch, train, true));
  }
  std::sort(plain_rounds.begin(), plain_rounds.end());
  std::sort(sealed_rounds.begin(), sealed_rounds.end());
  f.train_unsealed_alternating = plain_rounds[2];
  f.train_sealed = sealed_rounds[2];
  Print(f);
  return {0, Json(o, f)};
}

}  // namespace
}  // namespace stoker

STOKER_BENCH_MAIN("pipeline_bench", "worker::Worker pipeline images/s per core against decode-only, same run.");
