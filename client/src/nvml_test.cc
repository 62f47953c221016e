// Nvml against the stand-in library (tests/support/fake_nvml.cc): symbol binding, readings, and the mapping from
// a CUDA ordinal to a GPU UUID under CUDA_VISIBLE_DEVICES. The real library runs on the GPU machine.
#include "client/src/nvml.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace stoker::client {
namespace {

constexpr const char* kUuid0 = "GPU-0fa4e000-0000-4000-8000-000000000000";
constexpr const char* kUuid1 = "GPU-0fa4e000-0000-4000-8000-000000000001";

// $STOKER_TEST_FAKE_NVML: where the fake is when the tests run away from their build (the GPU machine).
const char* FakeNvmlPath() {
  const char* path = std::getenv("STOKER_TEST_FAKE_NVML");
  return path != nullptr ? path : STOKER_FAKE_NVML;
}

class NvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("STOKER_NVML_LIBRARY", FakeNvmlPath(), 1);
    ::unsetenv("CUDA_VISIBLE_DEVICES");
  }
  void TearDown() override { ::unsetenv("CUDA_VISIBLE_DEVICES"); }
};

TEST_F(NvmlTest, ReadsDevicesByIndexAndUuid) {
  auto nvml = Nvml::Load();
  ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();
  auto count = (*nvml)->DeviceCount();
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 2u);
  auto first = (*nvml)->ReadIndex(0);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->uuid, kUuid0);
  EXPECT_DOUBLE_EQ(first->utilization, 0.37);
  EXPECT_EQ(first->memory_used, 1ull << 30);
  auto second = (*nvml)->ReadUuid(kUuid1);
  ASSERT_TRUE(second.ok());
  EXPECT_DOUBLE_EQ(second->utilization, 0.62);
  EXPECT_FALSE((*nvml)->ReadUuid("GPU-nope").ok());
  EXPECT_FALSE((*nvml)->ReadIndex(7).ok());
}

TEST_F(NvmlTest, MapsCudaOrdinalsThroughVisibleDevices) {
  auto nvml = Nvml::Load();
  ASSERT_TRUE(nvml.ok());
  EXPECT_EQ(*(*nvml)->UuidForCudaOrdinal(1), kUuid1);
  ::setenv("CUDA_VISIBLE_DEVICES", "1", 1);
  EXPECT_EQ(*(*nvml)->UuidForCudaOrdinal(0), kUuid1);
  EXPECT_FALSE((*nvml)->UuidForCudaOrdinal(1).ok());
  ::setenv("CUDA_VISIBLE_DEVICES", kUuid0, 1);  // UUIDs are accepted too
  EXPECT_EQ(*(*nvml)->UuidForCudaOrdinal(0), kUuid0);
}

TEST_F(NvmlTest, AMissingLibraryIsUnavailableWithTheReason) {
  ::setenv("STOKER_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  auto nvml = Nvml::Load();
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(nvml.status().message().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
}

}  // namespace
}  // namespace stoker::client
