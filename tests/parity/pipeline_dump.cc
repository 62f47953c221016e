// pipeline_dump: runs the worker's image pipeline on image files and writes what it produced, for
// torchvision_parity_test.py to compare with torchvision's transforms on the same files.
//
//   pipeline_dump --out DIR [job flags: --pipeline, --resize-kernel, --antialias, --seed, ...] FILE...
//
// For FILE number i (from 0) it runs the pipeline with sample seed SampleSeed(seed, 0, i), writes the output's
// uint8 RGB bytes to DIR/<i>.rgb and prints one JSON line: the file, the crop (source pixels), the flip and the
// DCT reduction the JPEG was decoded at.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/flags.h"
#include "stoker/job_spec.h"
#include "worker/crop_geometry.h"
#include "worker/image_pipeline.h"
#include "dataset/job_spec_flags.h"

namespace stoker {
namespace {

int Main(int argc, char** argv) {
  JobSpec spec;
  std::string out_dir;
  FlagSet flags("pipeline_dump --out DIR [job flags] FILE...", "The worker's pipeline on files, for parity tests.");
  AddJobSpecFlags(flags, &spec);
  flags.AddString("out", &out_dir, "directory for the <i>.rgb outputs");
  std::vector<std::string> files;
  if (Status s = flags.Parse(argc, argv, 1, &files); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 2;
  }
  if (out_dir.empty() || files.empty()) {
    std::fprintf(stderr, "pipeline_dump: --out and at least one file are required\n");
    return 2;
  }
  worker::ImagePipeline pipeline(spec.pipeline);
  std::vector<uint8_t> out(pipeline.output_bytes());
  for (size_t i = 0; i < files.size(); ++i) {
    std::ifstream in(files[i], std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "pipeline_dump: cannot read %s\n", files[i].c_str());
      return 1;
    }
    const uint64_t seed = worker::SampleSeed(spec.seed, 0, i);
    worker::SampleOutcome outcome =
        pipeline.Run({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, seed, out.data());
    if (!outcome.ok) {
      std::fprintf(stderr, "pipeline_dump: %s: %s (%s)\n", files[i].c_str(), outcome.reason.c_str(),
                   outcome.detail.c_str());
      return 1;
    }
    std::ofstream(out_dir + "/" + std::to_string(i) + ".rgb", std::ios::binary)
        .write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
    // The crop and flip again, from the same seed: PlanAugmentation is what the pipeline ran.
    int width = 0, height = 0;
    worker::JpegRegionDecoder header;
    if (!header.ReadHeader(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &width, &height).ok()) {
      std::fprintf(stderr, "pipeline_dump: %s is not a JPEG\n", files[i].c_str());
      return 1;
    }
    worker::Augmentation aug = worker::PlanAugmentation(spec.pipeline, width, height, seed);
    std::printf("{\"file\": \"%s\", \"crop\": [%d, %d, %d, %d], \"flip\": %s, \"reduction\": %d}\n",
                files[i].c_str(), aug.crop.x, aug.crop.y, aug.crop.width, aug.crop.height,
                aug.flip ? "true" : "false", pipeline.last_reduction());
  }
  return 0;
}

}  // namespace
}  // namespace stoker

int main(int argc, char** argv) { return stoker::Main(argc, argv); }
