// The Loader's NCCL paths on two GPUs, against a real coordinator and workers: a tensor-parallel pair (member 0
// fetches, member 1 receives every batch over NCCL) and the agreement step (one rank asks to stop, both stop
// before the same batch and their checkpoints say so). Each member runs on its own thread and device, as two
// processes would. Skips with fewer than two GPUs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "client/cuda/gpu_probe.h"
#include "dataset/checkpoint.h"
#include "stoker/loader.h"
#include "tests/support/fixtures.h"
#include "tests/support/test_cluster.h"
#include "tests/support/temp_dir.h"

namespace stoker::client {
namespace {

using testing::TempDir;
constexpr auto kTimeout = std::chrono::seconds(60);

struct Seen {
  std::vector<std::string> kinds;            // "b<position>", "e<epoch>", "end", "stop"
  std::vector<std::vector<uint8_t>> pixels;  // per batch, the converted output as the device holds it
  std::vector<std::vector<uint64_t>> ids;
  std::vector<std::vector<int64_t>> labels;
  std::string checkpoint;
  Status status;
};

// Runs one member to its end (or `stop_after` batches, then RequestStop), copying every batch back to the host.
Seen Consume(Loader& loader, int device, int stop_after = -1) {
  Seen seen;
  cudaSetDevice(device);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  int batches = 0;
  while (true) {
    if (batches == stop_after) loader.RequestStop();
    auto d = loader.Next(stream, kTimeout);
    if (!d.ok()) {
      seen.status = d.status();
      break;
    }
    if (d->kind == LoaderDelivery::Kind::kEndOfJob) {
      seen.kinds.push_back("end");
      break;
    }
    if (d->kind == LoaderDelivery::Kind::kStopped) {
      seen.kinds.push_back("stop");
      break;
    }
    if (d->kind == LoaderDelivery::Kind::kEndOfEpoch) {
      seen.kinds.push_back("e" + std::to_string(d->epoch));
      continue;
    }
    const BatchView& v = d->batch.view();
    std::vector<uint8_t> host(v.bytes());
    cudaMemcpyAsync(host.data(), v.data, host.size(), cudaMemcpyDeviceToHost, stream);
    std::vector<int64_t> labels(v.shape[0]);
    cudaMemcpyAsync(labels.data(), v.labels, labels.size() * 8, cudaMemcpyDeviceToHost, stream);
    cudaStreamSynchronize(stream);
    seen.kinds.push_back("b" + std::to_string(d->batch.position()));
    seen.pixels.push_back(std::move(host));
    seen.labels.push_back(std::move(labels));
    auto ids = d->batch.sample_ids();
    seen.ids.emplace_back(ids.begin(), ids.end());
    EXPECT_EQ(std::vector<int64_t>(d->batch.labels().begin(), d->batch.labels().end()), seen.labels.back());
    ++batches;
  }
  seen.checkpoint = loader.Checkpoint();
  cudaStreamDestroy(stream);
  return seen;
}

class CollectiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ListGpus().size() < 2) GTEST_SKIP() << "needs two GPUs";
    auto data = testing::MakeJpegDataset(dir_.path(), "jpegs", 70, 35);
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    data_ = *data;
    cluster_ = std::make_unique<tools::LocalCluster>(testing::ClusterIn(dir_));
    ASSERT_TRUE(cluster_->StartCoordinator().ok());
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(cluster_->StartWorker(2).ok());
  }

  LoaderOptions Options(const std::string& job, uint32_t ranks, uint32_t rank, int device) {
    LoaderOptions o = testing::SmallLoaderJob(*cluster_, data_.manifest, job);
    o.client.spec->world_size = ranks;
    o.client.spec->epochs = 2;
    o.client.rank = rank;
    o.device = device;
    o.output.dtype = DType::kBFloat16;
    return o;
  }

  // Opens a Loader for each of two members (each on its own thread and device, as two processes would), as a
  // tensor-parallel pair or as two data-parallel ranks with agreement, and runs `body` with it. Returns what each
  // member saw; an Open that failed is its status.
  std::array<Seen, 2> RunMembers(const std::string& job, bool tensor_parallel,
                                 const std::function<Seen(uint32_t member, Loader& loader)>& body) {
    auto id = NcclUniqueIdHex();
    if (!id.ok()) return {Failed(id.status()), Failed(id.status())};
    auto member = [&](uint32_t m) {
      LoaderOptions o = tensor_parallel ? Options(job, 1, 0, static_cast<int>(m))
                                        : Options(job, 2, m, static_cast<int>(m));
      (tensor_parallel ? o.tensor_parallel : o.agreement) = {*id, 2, m, std::chrono::seconds(60)};
      auto loader = Loader::Open(o);
      if (!loader.ok()) return Failed(loader.status());
      cudaSetDevice(static_cast<int>(m));
      return body(m, **loader);
    };
    auto first = std::async(std::launch::async, member, 0);
    auto second = std::async(std::launch::async, member, 1);
    return {first.get(), second.get()};
  }

  static Seen Failed(Status status) {
    Seen seen;
    seen.status = std::move(status);
    return seen;
  }

  TempDir dir_;
  testing::TestDataset data_;
  std::unique_ptr<tools::LocalCluster> cluster_;
};

TEST_F(CollectiveTest, TensorParallelFollowerGetsEveryBatchOfItsLeaderBitForBit) {
  auto [l, f] = RunMembers("tp", /*tensor_parallel=*/true, [](uint32_t m, Loader& loader) {
    Seen seen = Consume(loader, static_cast<int>(m));
    EXPECT_GT(loader.Stats().broadcast_bytes, 0u);
    return seen;
  });
  ASSERT_TRUE(l.status.ok()) << l.status.ToString();
  ASSERT_TRUE(f.status.ok()) << f.status.ToString();
  EXPECT_EQ(l.kinds.size(), 2u * 8 + 2 + 1);  // 8 batches and an end of epoch, twice, then the end
  EXPECT_EQ(f.kinds, l.kinds);
  ASSERT_EQ(f.pixels.size(), l.pixels.size());
  for (size_t i = 0; i < l.pixels.size(); ++i) {
    EXPECT_EQ(f.pixels[i], l.pixels[i]) << "batch " << i;
    EXPECT_EQ(f.ids[i], l.ids[i]) << "batch " << i;
    EXPECT_EQ(f.labels[i], l.labels[i]) << "batch " << i;
  }
  EXPECT_FALSE(l.checkpoint.empty());
  EXPECT_TRUE(f.checkpoint.empty());  // a follower holds no rank
}

TEST_F(CollectiveTest, OneRankAskingToStopStopsBothBeforeTheSameBatch) {
  auto [a, b] = RunMembers("agree", /*tensor_parallel=*/false, [](uint32_t r, Loader& loader) {
    Seen seen = Consume(loader, static_cast<int>(r), r == 0 ? 5 : -1);  // only rank 0 is asked
    EXPECT_EQ(loader.Stats().agreements, seen.kinds.size());
    return seen;
  });
  ASSERT_TRUE(a.status.ok()) << a.status.ToString();
  ASSERT_TRUE(b.status.ok()) << b.status.ToString();
  EXPECT_EQ(a.kinds, (std::vector<std::string>{"b0", "b1", "b2", "b3", "e0", "b4", "stop"}));  // 4 steps an epoch
  EXPECT_EQ(b.kinds, a.kinds);
  auto ta = DecodeCheckpointToken(a.checkpoint);
  auto tb = DecodeCheckpointToken(b.checkpoint);
  ASSERT_TRUE(ta.ok() && tb.ok());
  EXPECT_EQ(ta->position, 5u);  // both resume at the batch neither used
  EXPECT_EQ(tb->position, 5u);
}

// Takes `depth` batches, keeping them all if `hold`, then asks for one more: what that answered ("delivered" or
// its status code) follows the batches in the kinds; then the member lets go and consumes to the end.
Seen HoldEverySlotThenConsume(Loader& loader, int device, uint32_t depth, bool hold) {
  Seen seen;
  std::vector<LoadedBatch> held;
  for (uint32_t i = 0; i < depth; ++i) {
    auto d = loader.Next(nullptr, kTimeout);
    if (!d.ok() || d->kind != LoaderDelivery::Kind::kBatch) {
      seen.status = d.ok() ? InternalError("not a batch") : d.status();
      return seen;
    }
    seen.kinds.push_back("b" + std::to_string(d->batch.position()));
    if (hold) held.push_back(std::move(d->batch));
  }
  auto refused = loader.Next(nullptr, kTimeout);
  seen.kinds.push_back(refused.ok() ? "delivered" : std::string(StatusCodeName(refused.status().code())));
  held.clear();
  Seen rest = Consume(loader, device);
  seen.status = rest.status;
  seen.kinds.insert(seen.kinds.end(), rest.kinds.begin(), rest.kinds.end());
  return seen;
}

// A follower whose consumer holds every slot is told so before anything is received, so the group's broadcasts
// stay in step: once it releases one, it gets the very batch its leader sent, and both go on to the end.
TEST_F(CollectiveTest, TensorParallelFollowerHoldingEverySlotIsToldAndStaysInStep) {
  auto [l, f] = RunMembers("tp-held", /*tensor_parallel=*/true, [](uint32_t m, Loader& loader) {
    return m == 0 ? Consume(loader, 0) : HoldEverySlotThenConsume(loader, 1, /*depth=*/3, /*hold=*/true);
  });
  ASSERT_TRUE(l.status.ok()) << l.status.ToString();
  ASSERT_TRUE(f.status.ok()) << f.status.ToString();
  std::vector<std::string> expected = l.kinds;
  expected.insert(expected.begin() + 3, "RESOURCE_EXHAUSTED");  // after the three it held
  EXPECT_EQ(f.kinds, expected);
}

// With agreement, one rank's retryable error is every rank's: rank 0's consumer holds every slot, so its fetch
// is refused (ResourceExhausted); rank 1, which had its batch, puts it back and is told to retry
// (DeadlineExceeded). Once rank 0 lets go, both go on in step to the end, nothing skipped.
TEST_F(CollectiveTest, OneRankThatCannotTakeABatchMakesEveryRankRetryTheSameBatch) {
  auto [a, b] = RunMembers("agree-retry", /*tensor_parallel=*/false, [](uint32_t r, Loader& loader) {
    return HoldEverySlotThenConsume(loader, static_cast<int>(r), /*depth=*/3, /*hold=*/r == 0);
  });
  ASSERT_TRUE(a.status.ok()) << a.status.ToString();
  ASSERT_TRUE(b.status.ok()) << b.status.ToString();
  const std::vector<std::string> expected_rest = {"b3", "e0", "b4", "b5", "b6", "b7", "e1", "end"};
  std::vector<std::string> expected = {"b0", "b1", "b2", "RESOURCE_EXHAUSTED"};
  expected.insert(expected.end(), expected_rest.begin(), expected_rest.end());
  EXPECT_EQ(a.kinds, expected);
  expected[3] = "DEADLINE_EXCEEDED";
  EXPECT_EQ(b.kinds, expected);
}

// A group member that never arrives is a clear error within the collective timeout, not a hang.
TEST_F(CollectiveTest, AMemberThatNeverArrivesFailsTheOthersWithinTheTimeout) {
  auto id = NcclUniqueIdHex();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  LoaderOptions o = Options("tp-alone", 1, 0, 0);
  o.tensor_parallel = {*id, 2, 0, std::chrono::seconds(3)};
  const auto start = std::chrono::steady_clock::now();
  auto leader = Loader::Open(o);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(leader.status().code(), StatusCode::kDeadlineExceeded) << leader.status().ToString();
  EXPECT_LT(took, 30.0);
}

}  // namespace
}  // namespace stoker::client
