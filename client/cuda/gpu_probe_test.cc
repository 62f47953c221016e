// Runs on any machine: without a GPU (CI) the test skips; on the GPU machine it checks what CUDA reports.
#include "client/cuda/gpu_probe.h"

#include <gtest/gtest.h>

namespace stoker::client {
namespace {

TEST(GpuProbe, ListsDevicesOrSkipsWithAReason) {
  std::string why;
  std::vector<GpuDevice> gpus = ListGpus(&why);
  if (gpus.empty()) {
    EXPECT_FALSE(why.empty());
    GTEST_SKIP() << "no GPU here: " << why;
  }
  for (const GpuDevice& d : gpus) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_EQ(d.uuid.rfind("GPU-", 0), 0u) << d.uuid;
    EXPECT_EQ(d.uuid.size(), 40u);
    EXPECT_GT(d.total_memory, uint64_t{1} << 30);
    EXPECT_GE(d.compute_major, 7);
  }
}

}  // namespace
}  // namespace stoker::client
