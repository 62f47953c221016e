// The conversion kernel against the host reference (client/src/convert_host.h), bit for bit, on random pixels in
// every dtype and layout, at sizes that take the vector kernel (h*w divisible by 4) and the one-pixel kernel, with
// the output poisoned first so an element left unwritten shows. Skips without a GPU.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "client/cuda/gpu_probe.h"
#include "client/src/convert_host.h"

#ifdef STOKER_WITH_CUDA
#include <cuda_runtime_api.h>

#include "client/cuda/normalize.h"
#endif

namespace stoker::client {
namespace {

#ifdef STOKER_WITH_CUDA

TEST(ConvertKernel, MatchesTheHostReferenceBitForBitAndWritesEveryElement) {
  if (ListGpus().empty()) GTEST_SKIP() << "no GPU here";
  struct Size {
    uint32_t n, h, w;
  };
  std::mt19937 rng(7);
  int checked = 0;
  for (Size size : {Size{4, 224, 224}, Size{3, 17, 13}, Size{2, 1, 3}, Size{1, 64, 48}}) {
    const size_t pixels = size_t{size.n} * size.h * size.w * 3;
    std::vector<uint8_t> in(pixels);
    for (uint8_t& p : in) p = static_cast<uint8_t>(rng());
    uint8_t* in_device = nullptr;
    void* out_device = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&in_device), pixels), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&out_device, pixels * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(in_device, in.data(), pixels, cudaMemcpyHostToDevice), cudaSuccess);
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kUInt8}) {
      for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
        OutputFormat f;
        f.dtype = dtype;
        f.layout = layout;
        f.mean = {std::uniform_real_distribution<float>(0, 255)(rng), 116.28f, 103.53f};
        f.std = {std::uniform_real_distribution<float>(1, 80)(rng), 57.12f, 57.375f};
        const size_t bytes = pixels * DTypeSize(dtype);
        std::vector<uint8_t> expected(bytes);
        ConvertOnHost(in.data(), size.n, size.h, size.w, f, expected.data());
        // Two poisons: an unwritten byte would equal one of them in one of the runs and differ in the other.
        for (int poison : {0x00, 0xff}) {
          ASSERT_EQ(cudaMemset(out_device, poison, bytes), cudaSuccess);
          const NormalizeConstants k = MakeNormalizeConstants(f);
          ASSERT_EQ(cuda::LaunchConvert(in_device, out_device, size.n, size.h, size.w, static_cast<int>(dtype),
                                        layout == Layout::kNCHW, k.mean, k.inv_std, nullptr),
                    0);
          std::vector<uint8_t> got(bytes);
          ASSERT_EQ(cudaMemcpy(got.data(), out_device, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
          ASSERT_EQ(got, expected) << DTypeName(dtype) << " " << LayoutName(layout) << " " << size.n << "x" << size.h
                                   << "x" << size.w << " poison " << poison;
          ++checked;
        }
      }
    }
    cudaFree(in_device);
    cudaFree(out_device);
  }
  EXPECT_EQ(checked, 4 * 8 * 2);
}

#else

TEST(ConvertKernel, MatchesTheHostReferenceBitForBitAndWritesEveryElement) {
  GTEST_SKIP() << "built without CUDA";
}

#endif

}  // namespace
}  // namespace stoker::client
