// JobSpec: validation names the field, differences describe each field.
#include "stoker/job_spec.h"

#include <gtest/gtest.h>

namespace stoker {
namespace {

JobSpec Valid() {
  return {.name = "imagenet-rn50",
          .manifest_path = "/data/m.stoker",
          .pipeline = {.mode = PipelineMode::kEval},
          .batch_size = 64,
          .world_size = 2,
          .epochs = 3,
          .seed = 7,
          .remainder = Remainder::kPad};
}

TEST(JobSpec, ValidationNamesTheField) {
  auto expect_bad = [](JobSpec spec, const std::string& needle) {
    Status s = spec.Validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  JobSpec s = Valid();
  s.name = "bad name!";
  expect_bad(s, "job name");
  s = Valid();
  s.name = std::string(65, 'a');  // names key the coordinator's and workers' tables: at most 64 bytes
  expect_bad(s, "job name");
  s = Valid();
  s.epochs = kMaxEpochs + 1;  // a 1,000,000-epoch job was accepted
  expect_bad(s, "epochs above 100000");
  s = Valid();
  s.batch_size = 0;
  expect_bad(s, "batch_size");
  s = Valid();
  s.world_size = 0;
  expect_bad(s, "world_size");
  s = Valid();
  s.pipeline.scale_min = 0.9f;
  s.pipeline.scale_max = 0.5f;
  expect_bad(s, "scale");
  s = Valid();
  s.pipeline.resize_shorter = 100;
  expect_bad(s, "resize_shorter");
  s = Valid();
  s.batch_size = 65536;
  s.pipeline.output_height = 4096;
  expect_bad(s, "2 GiB");
  s = Valid();
  s.pipeline.gpu_decode = GpuDecode::kFile;  // the client's GPU resize is Pillow's kernel
  s.pipeline.resize_kernel = ResizeKernel::kOpenCv;
  expect_bad(s, "gpu_decode resizes with the pillow kernel only");
  EXPECT_TRUE(Valid().Validate().ok());
  s = Valid();
  s.epochs = kMaxEpochs;
  s.name = std::string(64, 'a');
  EXPECT_TRUE(s.Validate().ok());
}

TEST(JobSpec, DifferencesDescribeEachField) {
  JobSpec a = Valid(), b = Valid();
  b.batch_size = 32;
  b.seed = 8;
  auto diff = a.Differences(b);
  ASSERT_EQ(diff.size(), 2u);
  EXPECT_EQ(diff[0], "batch_size: 64 here, 32 registered");
  EXPECT_EQ(diff[1], "seed: 7 here, 8 registered");
  // An unset fingerprint matches whatever the coordinator filled in.
  b = Valid();
  b.manifest_fingerprint = 99;
  EXPECT_TRUE(a.Differences(b).empty());
}

TEST(JobSpec, DecodingOnTheGpuIsAnotherJob) {
  // Its batches' bytes differ from the CPU path's: another fingerprint, so a checkpoint of one cannot resume the
  // other (checkpoint_test checks that a spec without it keeps the fingerprint it always had).
  JobSpec cpu = Valid(), file = Valid(), cut = Valid();
  file.pipeline.gpu_decode = GpuDecode::kFile;
  cut.pipeline.gpu_decode = GpuDecode::kCut;
  EXPECT_TRUE(file.Validate().ok());
  EXPECT_TRUE(cut.Validate().ok());
  EXPECT_NE(SpecFingerprint(cpu), SpecFingerprint(file));
  EXPECT_NE(SpecFingerprint(file), SpecFingerprint(cut));
  EXPECT_NE(PipelineFingerprint(cpu.pipeline), PipelineFingerprint(cut.pipeline));
  ASSERT_EQ(cut.Differences(cpu).size(), 1u);
  EXPECT_EQ(cut.Differences(cpu)[0], "gpu_decode: cut here, off registered");
}

}  // namespace
}  // namespace stoker
