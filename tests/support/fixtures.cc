// Test datasets (fixtures.h): good JPEG shards and the damaged inputs, indexed.
#include "tests/support/fixtures.h"

#include <cstdio>

#include "tools/dataset_index.h"
#include "dataset/manifest.h"
#include "dataset/tar.h"
#include "datagen/synthetic_dataset.h"

namespace stoker::testing {

StatusOr<TestDataset> IndexForTest(const std::string& data, const std::string& manifest_path) {
  PosixEnv env;
  tools::IndexOptions options;
  STOKER_ASSIGN_OR_RETURN(tools::IndexReport report, tools::IndexDataset(env, data, manifest_path, options));
  STOKER_ASSIGN_OR_RETURN(auto manifest, Manifest::Open(env, manifest_path));
  TestDataset out;
  out.manifest = manifest_path;
  out.samples = manifest->num_samples();
  for (uint64_t id = 0; id < manifest->num_samples(); ++id) out.id_by_key[std::string(manifest->sample(id).key)] = id;
  return out;
}

StatusOr<TestDataset> MakeJpegDataset(const std::string& dir, const std::string& name, uint64_t images,
                                      uint32_t per_shard) {
  PosixEnv env;
  datagen::GenerateOptions options;
  options.images = images;
  options.per_shard = per_shard;
  options.classes = 10;
  STOKER_RETURN_IF_ERROR(datagen::GenerateTarDataset(env, JoinPath(dir, name), options));
  return IndexForTest(JoinPath(dir, name), JoinPath(dir, name + ".stoker"));
}

StatusOr<TestDataset> MakeDamagedDataset(const std::string& dir, uint64_t good_images) {
  PosixEnv env;
  std::string data = JoinPath(dir, "damaged");
  STOKER_RETURN_IF_ERROR(env.CreateDirectories(data));
  TarWriter a;
  for (uint64_t i = 0; i < good_images; ++i) {
    STOKER_ASSIGN_OR_RETURN(std::string jpeg, datagen::SyntheticJpeg(i));
    char key[32];
    std::snprintf(key, sizeof(key), "good/%03llu", static_cast<unsigned long long>(i));
    a.Add(std::string(key) + ".jpg", jpeg);
    a.Add(std::string(key) + ".cls", std::to_string(i % 10));
    if (i == good_images / 2) {
      // The bad ones sit in the middle of a shard, between good samples.
      STOKER_ASSIGN_OR_RETURN(std::string corrupt, datagen::SyntheticJpeg(1000));
      for (size_t p = corrupt.size() / 3; p < corrupt.size() / 3 + 3000 && p < corrupt.size() - 2; p += 5) {
        corrupt[p] = static_cast<char>(0xFF);
      }
      a.Add("bad/corrupt.jpg", corrupt);
      a.Add("bad/corrupt.cls", "1");
      STOKER_ASSIGN_OR_RETURN(std::string truncated, datagen::SyntheticJpeg(1001));
      a.Add("bad/truncated.jpg", truncated.substr(0, truncated.size() * 2 / 5));
      a.Add("bad/truncated.cls", "2");
      STOKER_ASSIGN_OR_RETURN(std::string unlabeled, datagen::SyntheticJpeg(1002));
      a.Add("bad/nolabel.jpg", unlabeled);
      a.Add("bad/notimage.jpg", "this is a text file with a .jpg name\n");
      a.Add("bad/notimage.cls", "3");
      // Good, though print workflows' colour spaces: CMYK and YCCK JPEGs decode like any other.
      int w = 0, h = 0;
      std::vector<uint8_t> rgb = datagen::SyntheticImage(1003, &w, &h);
      STOKER_ASSIGN_OR_RETURN(std::string cmyk, datagen::EncodeJpeg(rgb.data(), w, h, {.colour_space = datagen::JpegEncodeOptions::ColourSpace::kCmyk}));
      a.Add("good/cmyk.jpg", cmyk);
      a.Add("good/cmyk.cls", "6");
      STOKER_ASSIGN_OR_RETURN(std::string ycck, datagen::EncodeJpeg(rgb.data(), w, h, {.colour_space = datagen::JpegEncodeOptions::ColourSpace::kYcck}));
      a.Add("good/ycck.jpg", ycck);
      a.Add("good/ycck.cls", "7");
    }
  }
  std::string shard_a = a.Finish();
  STOKER_RETURN_IF_ERROR(env.WriteFileAtomically(JoinPath(data, "a.tar"), shard_a.data(), shard_a.size()));
  // Shard b ends inside its last member: a truncated tar.
  TarWriter b;
  STOKER_ASSIGN_OR_RETURN(std::string before_cut, datagen::SyntheticJpeg(1004));
  b.Add("good/b0.jpg", before_cut);
  b.Add("good/b0.cls", "4");
  STOKER_ASSIGN_OR_RETURN(std::string cut, datagen::SyntheticJpeg(1005));
  b.Add("bad/cut.jpg", cut);
  b.Add("bad/cut.cls", "5");
  std::string shard_b = b.Finish();
  size_t cut_at = 512 + (before_cut.size() + 511) / 512 * 512 + 512 + 512 + 512 + cut.size() / 2;
  STOKER_RETURN_IF_ERROR(env.WriteFileAtomically(JoinPath(data, "b.tar"), shard_b.data(), cut_at));
  return IndexForTest(data, JoinPath(dir, "damaged.stoker"));
}

JobSpec SpecOver(const std::string& name, const TestDataset& data, uint32_t ranks, uint32_t batch, uint32_t epochs) {
  JobSpec spec;
  spec.name = name;
  spec.manifest_path = data.manifest;
  spec.world_size = ranks;
  spec.batch_size = batch;
  spec.epochs = epochs;
  spec.remainder = Remainder::kPad;
  return spec;
}

}  // namespace stoker::testing
