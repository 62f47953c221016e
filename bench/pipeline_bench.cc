// Worker pipeline throughput on one core, against full-image decode-only measured in the same run on the same
// images: OpenCV imdecode (the brief's baseline) and libjpeg-turbo's full decode through our decoder.
//
//   pipeline_bench [--images N] [--seconds S] [--batch B] [--quality Q] [--420] [--json FILE]
//
// Prints img/s per core for each and the ratios train / imdecode (goal >= 1.3) and eval / imdecode (goal >= 1.1),
// for the default resize kernel (Pillow's bilinear) and the OpenCV one jobs got before it.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <opencv2/core.hpp>
#include <string>
#include <vector>
#if STOKER_WITH_IMGCODECS
#include <opencv2/imgcodecs.hpp>
#endif

#include "base/flags.h"
#include "datagen/synthetic_dataset.h"
#include "worker/crop_geometry.h"
#include "worker/image_pipeline.h"
#include "worker/jpeg_decoder.h"

namespace stoker {
namespace {

double Rate(const std::vector<std::string>& images, double seconds, const std::function<void(const std::string&, size_t)>& fn) {
  // Warm up once through the set, then loop for `seconds`.
  for (size_t i = 0; i < images.size(); ++i) fn(images[i], i);
  size_t n = 0;
  auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (size_t i = 0; i < images.size(); ++i, ++n) fn(images[i], n);
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return n / elapsed;
}

int Main(int argc, char** argv) {
  uint64_t count = 200;
  double seconds = 3;
  uint32_t batch = 64;
  uint32_t quality = 96;
  bool subsample = false;
  std::string json, dump_dir;
  FlagSet flags("pipeline_bench [flags]", "worker::Worker pipeline images/s per core against decode-only, same run.");
  flags.AddUint("images", &count, "distinct synthetic images");
  flags.AddDouble("seconds", &seconds, "timed seconds per measurement");
  flags.AddUint32("batch", &batch, "batch the pipeline writes into");
  flags.AddUint32("quality", &quality, "JPEG quality");
  flags.AddBool("420", &subsample, "4:2:0 chroma instead of 4:4:4");
  flags.AddString("json", &json, "write the figures here");
  flags.AddString("dump-dir", &dump_dir, "also write the images here (for a baseline measured by another program)");
  if (auto exit_code = flags.ParseOrExitCode(argc, argv)) return *exit_code;
  cv::setNumThreads(0);
  std::vector<std::string> images;
  double bytes = 0;
  for (uint64_t i = 0; i < count; ++i) {
    auto jpeg = datagen::SyntheticJpeg(i, {static_cast<int>(quality), !subsample});
    if (!jpeg.ok()) return 1;
    bytes += jpeg->size();
    if (!dump_dir.empty()) {
      std::ofstream(dump_dir + "/" + std::to_string(i) + ".jpg", std::ios::binary) << *jpeg;
    }
    images.push_back(std::move(*jpeg));
  }
  std::printf("images: %llu synthetic JPEGs, quality %u, %s, mean %.1f KB\n", static_cast<unsigned long long>(count),
              quality, subsample ? "4:2:0" : "4:4:4", bytes / count / 1024);

  double imdecode = 0;
#if STOKER_WITH_IMGCODECS
  imdecode = Rate(images, seconds, [](const std::string& b, size_t) {
    cv::Mat m = cv::imdecode(cv::Mat(1, static_cast<int>(b.size()), CV_8UC1, const_cast<char*>(b.data())),
                             cv::IMREAD_COLOR);
    if (m.empty()) std::abort();
  });
#endif
  worker::JpegRegionDecoder decoder;
  double full = Rate(images, seconds, [&](const std::string& b, size_t) {
    int w, h;
    worker::RegionView v;
    if (!decoder.ReadHeader(reinterpret_cast<const uint8_t*>(b.data()), b.size(), &w, &h).ok() ||
        !decoder.DecodeFull(&v).ok()) {
      std::abort();
    }
  });
  std::vector<uint8_t> batch_buffer(size_t{batch} * 224 * 224 * 3);
  auto pipeline_rate = [&](PipelineSpec spec) {
    worker::ImagePipeline pipeline(spec);
    double r = Rate(images, seconds, [&](const std::string& b, size_t n) {
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
  };
  // The default kernel (Pillow's bilinear, exact) and the one jobs got before it (OpenCV area), same images.
  PipelineSpec opencv_train;
  opencv_train.resize_kernel = ResizeKernel::kOpenCv;
  PipelineSpec linear;
  linear.antialias = false;
  PipelineSpec eval;
  eval.mode = PipelineMode::kEval;
  PipelineSpec opencv_eval = eval;
  opencv_eval.resize_kernel = ResizeKernel::kOpenCv;
  double train = pipeline_rate(PipelineSpec{});
  double train_opencv = pipeline_rate(opencv_train);
  double train_linear = pipeline_rate(linear);
  double eval_rate = pipeline_rate(eval);
  double eval_opencv = pipeline_rate(opencv_eval);

  double baseline = imdecode > 0 ? imdecode : full;
  auto row = [&](const char* what, double rate) { std::printf("%-52s %10.0f %8.2f\n", what, rate, rate / baseline); };
  std::printf("\n%-52s %10s %8s\n", "one core", "img/s", "ratio");
  std::printf("%-52s %10.0f %8s\n", "baseline: OpenCV imdecode, full image", imdecode, imdecode > 0 ? "1.00" : "n/a");
  row("libjpeg-turbo full decode (our decoder)", full);
  row("train: crop decode + RRC224 + flip (pillow, default)", train);
  row("train: the same, --resize-kernel opencv (area)", train_opencv);
  row("train: the same, pillow --no-antialias (bilinear)", train_linear);
  row("eval: resize 256 + centre crop 224 (pillow)", eval_rate);
  row("eval: the same, --resize-kernel opencv", eval_opencv);
  if (!json.empty()) {
    std::ofstream out(json);
    out << "{\"images\": " << count << ", \"quality\": " << quality << ", \"chroma\": \""
        << (subsample ? "420" : "444") << "\", \"mean_kb\": " << bytes / count / 1024
        << ", \"imdecode_img_s\": " << imdecode << ", \"libjpeg_full_img_s\": " << full
        << ", \"train_img_s\": " << train << ", \"train_opencv_img_s\": " << train_opencv
        << ", \"train_bilinear_img_s\": " << train_linear << ", \"eval_img_s\": " << eval_rate
        << ", \"eval_opencv_img_s\": " << eval_opencv << ", \"train_ratio\": " << train / baseline
        << ", \"eval_ratio\": " << eval_rate / baseline << "}\n";
  }
  return 0;
}

}  // namespace
}  // namespace stoker

int main(int argc, char** argv) { return stoker::Main(argc, argv); }
