// stoker gen-dataset DIR: writes ImageNet-like JPEG tar shards (datagen/synthetic_dataset.h) with live progress.
#include <cstdio>

#include "base/flags.h"
#include "tools/commands.h"
#include "tools/progress.h"
#include "datagen/synthetic_dataset.h"

namespace stoker::tools {

int GenDatasetCommand(int argc, char** argv) {
  datagen::GenerateOptions options;
  uint32_t quality = 96;
  bool subsample = false;
  FlagSet flags("stoker gen-dataset DIR [flags]",
                "Writes synthetic ImageNet-like images as WebDataset-style tar shards DIR/shard-NNNNNN.tar "
                "(KEY.jpg + KEY.cls): JPEG quality 96, 4:4:4, 500x375 or 375x500, about 120 KB each. "
                "Deterministic: the same flags write the same bytes.");
  flags.AddUint("images", &options.images, "number of images");
  flags.AddUint32("per-shard", &options.per_shard, "images per tar shard");
  flags.AddUint32("classes", &options.classes, "labels are image index modulo this");
  flags.AddUint32("quality", &quality, "JPEG quality (ImageNet: mostly 96)");
  flags.AddBool("420", &subsample, "4:2:0 chroma subsampling instead of 4:4:4");
  flags.AddUint32("threads", &options.threads, "encoder threads (0: one per core)");
  std::vector<std::string> positional;
  Status parsed = flags.Parse(argc, argv, 2, &positional);
  if (!parsed.ok()) return Fail("gen-dataset", parsed);
  if (positional.size() != 1) return Fail("gen-dataset", InvalidArgumentError("expected one output DIR (see --help)"));
  if (quality < 1 || quality > 100) return Fail("gen-dataset", InvalidArgumentError("--quality must be in [1, 100]"));
  options.jpeg.quality = static_cast<int>(quality);
  options.jpeg.chroma_444 = !subsample;
  ProgressLine progress;
  auto start = std::chrono::steady_clock::now();
  options.progress = [&](uint64_t done, uint64_t total) {
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char line[160];
    std::snprintf(line, sizeof(line), "generating: %llu/%llu images (%.0f img/s)", static_cast<unsigned long long>(done),
                  static_cast<unsigned long long>(total), seconds > 0 ? done / seconds : 0.0);
    progress.Update(line);
  };
  PosixEnv env;
  Status s = datagen::GenerateTarDataset(env, positional[0], options);
  progress.Finish();
  if (!s.ok()) return Fail("gen-dataset", s);
  std::printf("wrote %llu images in %llu shards under %s\n", static_cast<unsigned long long>(options.images),
              static_cast<unsigned long long>((options.images + options.per_shard - 1) / options.per_shard),
              positional[0].c_str());
  return 0;
}

}  // namespace stoker::tools
