// Checkpoint tokens round-trip and refuse damage; the spec fingerprint changes with every field that changes the data.
#include "dataset/checkpoint.h"

#include <gtest/gtest.h>

namespace stoker {
namespace {

TEST(CheckpointToken, RoundTripsAndRefusesDamage) {
  CheckpointToken t{"imagenet.rn50", 3, 123456, 0xfeedface12345678ULL};
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
