// Checkpoint tokens round-trip and refuse damage; the spec fingerprint changes with every field that changes the data.
#include "dataset/checkpoint.h"

#include <gtest/gtest.h>

#include "dataset/plan.h"

namespace stoker {
namespace {

TEST(CheckpointToken, RoundTripsAndRefusesDamage) {
  CheckpointToken t = MakeCheckpointTokenV1("imagenet.rn50", 3, 123456, 0xfeedface12345678ULL);
  std::string text = EncodeCheckpointToken(t);
  EXPECT_EQ(text.rfind("stoker-ckpt1:imagenet.rn50:3:123456:feedface12345678:", 0), 0u) << text;
  auto back = DecodeCheckpointToken(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, t);
  std::string edited = text;
  edited[text.find("123456")] = '9';  // someone edits the position
  EXPECT_EQ(DecodeCheckpointToken(edited).status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(DecodeCheckpointToken(edited).status().message().find("damaged"), std::string::npos);
  EXPECT_FALSE(DecodeCheckpointToken("hello").ok());
  EXPECT_FALSE(DecodeCheckpointToken(text.substr(0, text.size() - 3)).ok());
}

TEST(SpecFingerprint, ChangesWithEveryFieldThatChangesTheData) {
  JobSpec a;
  a.name = "j";
  a.manifest_path = "/m";
  a.manifest_fingerprint = 1;
  uint64_t base = SpecFingerprint(a);
  EXPECT_EQ(SpecFingerprint(a), base);
  JobSpec b = a;
  b.seed = 1;
  EXPECT_NE(SpecFingerprint(b), base);
  b = a;
  b.manifest_fingerprint = 2;  // another dataset under the same path
  EXPECT_NE(SpecFingerprint(b), base);
  b = a;
  b.pipeline.scale_min = 0.2f;
  EXPECT_NE(SpecFingerprint(b), base);
  b = a;
  b.pipeline.resize_kernel = ResizeKernel::kOpenCv;
  EXPECT_NE(SpecFingerprint(b), base);
}

JobSpec Job() {
  JobSpec spec;
  spec.name = "imagenet.rn50";
  spec.manifest_path = "/m";
  spec.manifest_fingerprint = 0xabcdef0123456789ULL;
  spec.world_size = 4;
  spec.batch_size = 8;
  spec.epochs = 3;
  spec.seed = 5;
  return spec;
}

TEST(CheckpointToken, VersionTwoCarriesThePointAndWhatDecidesTheData) {
  const JobSpec spec = Job();
  auto plan = Plan::Make(spec, 1000);
  ASSERT_TRUE(plan.ok());
  const CheckpointToken t = MakeCheckpointToken(spec, *plan, 2, plan->GlobalBatch(1, 7));
  EXPECT_EQ(t.point, (Plan::Point{1, 7 * 32}));
  const std::string text = EncodeCheckpointToken(t);
  EXPECT_EQ(text.rfind("stoker-ckpt2:imagenet.rn50:2:" + std::to_string(plan->GlobalBatch(1, 7)) + ":1:224:4x8:3:"
                       "abcdef0123456789:0000000000000005:sd:", 0), 0u) << text;
  auto back = DecodeCheckpointToken(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, t);
  EXPECT_TRUE(ContentDifferences(*back, spec).empty());
  JobSpec other = spec;  // another shape is not a difference of content
  other.world_size = 3;
  other.batch_size = 12;
  EXPECT_TRUE(ContentDifferences(*back, other).empty());

  std::string edited = text;
  edited[text.find(":224:") + 1] = '3';
  EXPECT_NE(DecodeCheckpointToken(edited).status().message().find("damaged"), std::string::npos);
  EXPECT_FALSE(DecodeCheckpointToken(text + ":00").ok());
  EXPECT_FALSE(DecodeCheckpointToken(std::string(600, 'a')).ok());
}

TEST(CheckpointToken, ContentDifferencesNameTheField) {
  const JobSpec spec = Job();
  auto plan = Plan::Make(spec, 1000);
  const CheckpointToken t = MakeCheckpointToken(spec, *plan, 0, 5);
  auto differs_in = [&](JobSpec other, const std::string& field) {
    const std::vector<std::string> diff = ContentDifferences(t, other);
    ASSERT_EQ(diff.size(), 1u) << field;
    EXPECT_EQ(diff[0].rfind(field, 0), 0u) << diff[0];
  };
  JobSpec other = spec;
  other.seed = 7;
  differs_in(other, "seed: 5 in the checkpoint, 7 in the job");
  other = spec;
  other.manifest_fingerprint = 1;
  differs_in(other, "dataset");
  other = spec;
  other.pipeline.output_height = 160;
  differs_in(other, "pipeline");
  other = spec;
  other.shuffle = false;
  differs_in(other, "shuffle");
  other = spec;
  other.remainder = Remainder::kPad;
  differs_in(other, "remainder");
  other = spec;
  other.epochs = 4;
  differs_in(other, "epochs");
}

constexpr uint64_t kFingerprintBeforeResizeKernel = 0x165ec6bf362655e8ULL;

TEST(SpecFingerprint, AJobOfTheOpenCvKernelKeepsTheFingerprintItHadBeforeTheKernelWasAField) {
  // Tokens issued before resize_kernel existed fingerprinted the spec text without it; those jobs read back as
  // the OpenCV kernel, whose text is unchanged, so their tokens stay valid. The value: the fingerprint of this
  // spec as computed before the field (commit 3aeeada).
  JobSpec a;
  a.name = "j";
  a.manifest_path = "/m";
  a.manifest_fingerprint = 1;
  a.pipeline.resize_kernel = ResizeKernel::kOpenCv;
  EXPECT_EQ(SpecFingerprint(a), kFingerprintBeforeResizeKernel);
}

}  // namespace
}  // namespace stoker
