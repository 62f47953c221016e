// The Loader against a real coordinator and real workers (separate processes on loopback). On every machine: the
// host path (conversion, exactly-once, bounded buffers), the options and flags, and the C ABI through the real
// libstoker_c.so. On a machine with a GPU also the GPU path: every dtype and layout bit for bit against the host
// reference, the pinned memory it takes, and a consumer stream slower than the copies; without one those skip.
#include "stoker/loader.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "client/cuda/gpu_probe.h"
#include "client/src/client_flags.h"
#include "client/src/convert_host.h"
#include "base/flags.h"
#include "stoker/c_api.h"
#include "tests/support/fixtures.h"
#include "tests/support/test_cluster.h"
#include "tests/support/temp_dir.h"

#ifdef STOKER_WITH_CUDA
#include <cuda_runtime_api.h>

#include "client/cuda/test_kernels.h"
#endif

namespace stoker {
namespace {

using testing::TempDir;

constexpr auto kBatchTimeout = std::chrono::seconds(60);

// One coordinator and two workers for every test here; each test runs its own job.
class LoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto data = testing::MakeJpegDataset(dir_->path(), "jpegs", 70, 35);
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    data_ = new testing::TestDataset(*data);
    cluster_ = new tools::LocalCluster(testing::ClusterIn(*dir_));
    ASSERT_TRUE(cluster_->StartCoordinator().ok());
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(cluster_->StartWorker(2).ok());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete data_;
    delete dir_;
  }

  // A small job: 32x32 images, batch 8, 70 samples -> 8 steps per epoch (6 dropped).
  static LoaderOptions Options(const std::string& job, uint32_t epochs = 2) {
    LoaderOptions o = testing::SmallLoaderJob(*cluster_, data_->manifest, job);
    o.client.spec->epochs = epochs;
    o.client.spec->seed = 5;
    return o;
  }

  // The same job's batches 8 x 224x224x3 (1.2 MB) in frames of 256 KiB, as uint8 NHWC: sealed, large enough for the
  // openers, each frame opened at its own offset.
  static constexpr uint32_t kLargeSide = 224;
  static LoaderOptions LargeOptions(const std::string& job) {
    LoaderOptions o = Options(job, 2);
    o.client.spec->pipeline.output_height = o.client.spec->pipeline.output_width = kLargeSide;
    o.client.payload_frame_bytes = 256 << 10;
    o.output.dtype = DType::kUInt8;
    o.output.layout = Layout::kNHWC;
    return o;
  }

  // The same job delivered on GPU 0.
  static LoaderOptions GpuOptions(const std::string& job, uint32_t epochs) {
    LoaderOptions o = Options(job, epochs);
    o.device = 0;
    return o;
  }

  static TempDir* dir_;
  static testing::TestDataset* data_;
  static tools::LocalCluster* cluster_;
};
TempDir* LoaderTest::dir_ = nullptr;
testing::TestDataset* LoaderTest::data_ = nullptr;
tools::LocalCluster* LoaderTest::cluster_ = nullptr;

// Every sample of each epoch once: ids unique per epoch, 64 of the 70 (8 steps x 8).
class ExactlyOnce {
 public:
  void Add(const LoadedBatch& b) {
    for (uint64_t id : b.sample_ids()) EXPECT_TRUE(seen_[b.epoch()].insert(id).second) << "sample " << id << " twice";
  }
  void ExpectEpochs(uint32_t epochs, size_t per_epoch, uint64_t samples) const {
    ASSERT_EQ(seen_.size(), epochs);
    for (const auto& [epoch, ids] : seen_) {
      EXPECT_EQ(ids.size(), per_epoch) << "epoch " << epoch;
      EXPECT_LT(*ids.rbegin(), samples);
    }
  }

 private:
  std::map<uint32_t, std::set<uint64_t>> seen_;
};

size_t ElementCount(const BatchView& v) { return static_cast<size_t>(v.shape[0] * v.shape[1] * v.shape[2] * v.shape[3]); }

TEST_F(LoaderTest, HostPathDeliversEverySampleOnceConvertedLikeTheReference) {
  LoaderOptions o = Options("host-f32");
  auto loader = Loader::Open(o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  EXPECT_FALSE((*loader)->on_device());
  ASSERT_EQ((*loader)->steps_per_epoch(), 8u);
  ExactlyOnce exact;
  uint32_t batches = 0, epochs_ended = 0;
  while (true) {
    auto d = (*loader)->Next(nullptr, kBatchTimeout);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    if (d->kind == LoaderDelivery::Kind::kEndOfJob) break;
    if (d->kind == LoaderDelivery::Kind::kEndOfEpoch) {
      ++epochs_ended;
      continue;
    }
    const LoadedBatch& b = d->batch;
    const BatchView& v = b.view();
    EXPECT_EQ(v.device, -1);
    EXPECT_EQ(v.shape, (std::array<int64_t, 4>{8, 3, 32, 32}));
    EXPECT_EQ(v.strides, (std::array<int64_t, 4>{3 * 32 * 32, 32 * 32, 32, 1}));
    std::vector<float> expected(ElementCount(v));
    client::ConvertOnHost(b.host_pixels(), 8, 32, 32, o.output, expected.data());
    ASSERT_EQ(std::memcmp(v.data, expected.data(), expected.size() * sizeof(float)), 0) << "batch " << b.position();
    EXPECT_EQ(std::vector<int64_t>(v.labels, v.labels + 8), std::vector<int64_t>(b.labels().begin(), b.labels().end()));
    EXPECT_EQ(b.position(), uint64_t{b.epoch()} * 8 + b.index());
    exact.Add(b);
    ++batches;
  }
  EXPECT_EQ(batches, 16u);
  EXPECT_EQ(epochs_ended, 2u);
  exact.ExpectEpochs(2, 64, data_->samples);
  EXPECT_EQ((*loader)->Stats().batches, 16u);
  EXPECT_EQ((*loader)->Stats().pinned_bytes, 0u);
}

TEST_F(LoaderTest, IdentityFormatHandsOverTheReceivedPixelsWithoutACopy) {
  LoaderOptions o = Options("host-u8", 1);
  o.output.dtype = DType::kUInt8;
  o.output.layout = Layout::kNHWC;
  auto loader = Loader::Open(o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  auto d = (*loader)->Next(nullptr, kBatchTimeout);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->kind, LoaderDelivery::Kind::kBatch);
  EXPECT_EQ(d->batch.view().data, d->batch.host_pixels());
  EXPECT_EQ(d->batch.view().strides, (std::array<int64_t, 4>{3 * 32 * 32, 1, 3 * 32, 3}));
}

// The Loader hands out tensors of pixels and cannot make them from a gpu_decode job's cut JPEGs yet: refused before
// connecting when its spec says so, and when it attaches to such a job, with the rank given back.
TEST_F(LoaderTest, AJobDecodedOnTheGpuIsRefusedWithTheRankGivenBack) {
  LoaderOptions o = Options("gpu-decoded", 1);
  o.client.spec->world_size = 2;
  o.client.spec->pipeline.gpu_decode = GpuDecode::kFile;
  auto refused = Loader::Open(o);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("gpu_decode"), std::string::npos) << refused.status().message();
  // A Client creates the job and takes rank 0; a Loader attaching as rank 1 is refused and leaves it free.
  auto creator = Client::Connect(o.client);
  ASSERT_TRUE(creator.ok()) << creator.status().ToString();
  o.client.spec.reset();
  o.client.rank = 1;
  auto attached = Loader::Open(o);
  EXPECT_EQ(attached.status().code(), StatusCode::kFailedPrecondition) << attached.status().ToString();
  auto rank1 = Client::Connect(o.client);
  EXPECT_TRUE(rank1.ok()) << rank1.status().ToString();
}

TEST_F(LoaderTest, ConsumerHoldingEveryBufferIsToldAndLosesNothing) {
  LoaderOptions o = Options("host-held", 1);
  o.depth = 2;
  auto loader = Loader::Open(o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  ExactlyOnce exact;
  auto first = (*loader)->Next(nullptr, kBatchTimeout);
  auto second = (*loader)->Next(nullptr, kBatchTimeout);
  ASSERT_TRUE(first.ok() && second.ok());
  auto third = (*loader)->Next(nullptr, kBatchTimeout);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted) << third.status().ToString();
  EXPECT_NE(third.status().message().find("release one"), std::string::npos) << third.status().message();
  exact.Add(first->batch);
  first->batch.Release();
  // The refused batch is the next one delivered, nothing skipped.
  auto again = (*loader)->Next(nullptr, kBatchTimeout);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->batch.position(), 2u);
  exact.Add(second->batch);
  exact.Add(again->batch);
  second->batch.Release();
  again->batch.Release();
  while (true) {
    auto d = (*loader)->Next(nullptr, kBatchTimeout);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    if (d->kind != LoaderDelivery::Kind::kBatch) break;
    exact.Add(d->batch);
  }
  exact.ExpectEpochs(1, 64, data_->samples);
}

// Regression: a Next() that timed out used to stop the Loader for good (the Python package, which waits in
// 250 ms slices to stay interruptible, then ended its epoch early without an error). A timeout is retryable:
// polling with no wait at all still receives every sample exactly once.
TEST_F(LoaderTest, TimedOutNextIsRetryableAndSkipsNothing) {
  auto loader = Loader::Open(Options("host-poll", 2));
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  ExactlyOnce exact;
  uint32_t timeouts = 0, batches = 0;
  const auto deadline = std::chrono::steady_clock::now() + kBatchTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto d = (*loader)->Next(nullptr, std::chrono::milliseconds(0));
    if (!d.ok()) {
      ASSERT_EQ(d.status().code(), StatusCode::kDeadlineExceeded) << d.status().ToString();
      ++timeouts;
      continue;
    }
    ASSERT_NE(d->kind, LoaderDelivery::Kind::kStopped) << "a timeout must not stop the Loader";
    if (d->kind == LoaderDelivery::Kind::kEndOfJob) break;
    if (d->kind != LoaderDelivery::Kind::kBatch) continue;
    exact.Add(d->batch);
    ++batches;
  }
  EXPECT_GT(timeouts, 0u) << "the first call, right after the job was created, cannot have had a batch";
  EXPECT_EQ(batches, 16u);
  exact.ExpectEpochs(2, 64, data_->samples);
}

TEST(LoaderOptionsTest, BadOptionsAreRefusedBeforeAnythingStarts) {
  LoaderOptions o;
  o.client.job = "x";
  o.depth = 0;
  EXPECT_EQ(Loader::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.depth = o.client.prefetch + 1;
  EXPECT_EQ(Loader::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.depth = 2;
  o.output.std[0] = 0;
  EXPECT_EQ(Loader::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.output = OutputFormat();
  o.tensor_parallel.size = 2;
  auto no_device = Loader::Open(o);
  EXPECT_EQ(no_device.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_device.status().message().find("need a device"), std::string::npos);
  o.tensor_parallel.size = 1;
  o.device = static_cast<int>(client::ListGpus().size());  // one past the last device this machine has
  auto missing = Loader::Open(o);
  EXPECT_EQ(missing.status().code(), StatusCode::kFailedPrecondition) << missing.status().ToString();
  EXPECT_NE(missing.status().message().find("device -1"), std::string::npos) << missing.status().message();
}

StatusOr<LoaderOptions> ParseLoaderFlags(std::vector<std::string> args) {
  args.insert(args.begin(), "test");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  FlagSet flags("test", "test", "STOKER_TEST_UNSET_");
  client::LoaderFlags loader_flags(flags);
  STOKER_RETURN_IF_ERROR(flags.Parse(static_cast<int>(argv.size()), argv.data()));
  return loader_flags.Finish();
}

TEST(LoaderFlagsTest, ParseIntoOptionsAndRefuseBadValues) {
  auto o = ParseLoaderFlags({"--job=j", "--manifest=m", "--device=1", "--dtype=bfloat16", "--layout=nhwc",
                             "--mean=1,2,3", "--std=4,5,6", "--depth=2", "--prefetch=9", "--connect-timeout=2s"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->device, 1);
  EXPECT_EQ(o->client.gpu, 1);
  EXPECT_EQ(o->output.dtype, DType::kBFloat16);
  EXPECT_EQ(o->output.layout, Layout::kNHWC);
  EXPECT_EQ(o->output.mean, (std::array<float, 3>{1, 2, 3}));
  EXPECT_EQ(o->output.std, (std::array<float, 3>{4, 5, 6}));
  EXPECT_EQ(o->depth, 2u);
  EXPECT_EQ(o->client.connect_timeout, std::chrono::seconds(2));
  ASSERT_TRUE(o->client.spec.has_value());
  EXPECT_EQ(o->client.spec->manifest_path, "m");
  EXPECT_FALSE(o->client.allow_readable_key);
  auto attached = ParseLoaderFlags({"--job=j", "--attach", "--allow-readable-key=true"});
  ASSERT_TRUE(attached.ok());
  EXPECT_FALSE(attached->client.spec.has_value());
  EXPECT_TRUE(attached->client.allow_readable_key);  // the key refusal's advice works for clients too
  EXPECT_EQ(ParseLoaderFlags({"--manifest=m"}).status().code(), StatusCode::kInvalidArgument);  // no --job
  EXPECT_EQ(ParseLoaderFlags({"--job=j", "--mean=1,2"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseLoaderFlags({"--job=j", "--mean=1,2,3,4"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseLoaderFlags({"--job=j", "--std=1,0,1"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseLoaderFlags({"--job=j", "--dtype=float64"}).status().code(), StatusCode::kInvalidArgument);
}

// The C ABI as a C program sees it: the real shared library, loaded with dlopen.
class CApi {
 public:
  CApi() {
    // $STOKER_TEST_C_LIBRARY: where the library is when the tests run away from their build (the GPU machine).
    const char* path = std::getenv("STOKER_TEST_C_LIBRARY");
    lib_ = ::dlopen(path != nullptr ? path : STOKER_C_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) return;
    open = Sym<decltype(&stoker_loader_open)>("stoker_loader_open");
    next = Sym<decltype(&stoker_loader_next)>("stoker_loader_next");
    info = Sym<decltype(&stoker_batch_get_info)>("stoker_batch_get_info");
    release = Sym<decltype(&stoker_batch_release)>("stoker_batch_release");
    checkpoint = Sym<decltype(&stoker_loader_checkpoint)>("stoker_loader_checkpoint");
    stats = Sym<decltype(&stoker_loader_stats_json)>("stoker_loader_stats_json");
    close = Sym<decltype(&stoker_loader_close)>("stoker_loader_close");
    last_error = Sym<decltype(&stoker_last_error)>("stoker_last_error");
    version = Sym<decltype(&stoker_c_api_version)>("stoker_c_api_version");
  }
  ~CApi() {
    if (lib_ != nullptr) ::dlclose(lib_);
  }
  bool loaded() const { return lib_ != nullptr && open && next && info && release && close && last_error; }
  decltype(&stoker_loader_open) open = nullptr;
  decltype(&stoker_loader_next) next = nullptr;
  decltype(&stoker_batch_get_info) info = nullptr;
  decltype(&stoker_batch_release) release = nullptr;
  decltype(&stoker_loader_checkpoint) checkpoint = nullptr;
  decltype(&stoker_loader_stats_json) stats = nullptr;
  decltype(&stoker_loader_close) close = nullptr;
  decltype(&stoker_last_error) last_error = nullptr;
  decltype(&stoker_c_api_version) version = nullptr;

 private:
  template <typename F>
  F Sym(const char* name) {
    return reinterpret_cast<F>(::dlsym(lib_, name));
  }
  void* lib_ = nullptr;
};

TEST_F(LoaderTest, CAbiDeliversTheJobAndReportsErrorsAsCodesWithMessages) {
  CApi c;
  ASSERT_TRUE(c.loaded()) << ::dlerror();
  EXPECT_EQ(c.version(), STOKER_C_API_VERSION);
  stoker_loader* loader = nullptr;
  const char* bad[] = {"--job=c", "--dtype=float64"};
  EXPECT_EQ(c.open(2, bad, &loader), static_cast<int>(StatusCode::kInvalidArgument));
  EXPECT_NE(std::string(c.last_error()).find("dtype"), std::string::npos) << c.last_error();
  EXPECT_EQ(loader, nullptr);

  const std::string coordinator = "--coordinator=" + cluster_->coordinator_endpoint();
  const std::string manifest = "--manifest=" + data_->manifest;
  const std::string key = "--key-file=" + cluster_->keyring().client_key;
  const std::string trust = "--trust-file=" + cluster_->keyring().trust;
  const char* args[] = {coordinator.c_str(), "--job=c-abi", manifest.c_str(), "--batch-size=8", "--epochs=1",
                        "--image-height=32", "--image-width=32", "--dtype=float16", "--depth=2", key.c_str(),
                        trust.c_str()};
  ASSERT_EQ(c.open(11, args, &loader), 0) << c.last_error();
  std::map<uint32_t, std::set<uint64_t>> ids_by_epoch;
  int kind = -1;
  uint32_t epoch = 0, batches = 0;
  while (true) {
    stoker_batch* batch = nullptr;
    ASSERT_EQ(c.next(loader, nullptr, 60000, &kind, &epoch, &batch), 0) << c.last_error();
    if (kind == STOKER_END_OF_JOB) break;
    if (kind != STOKER_BATCH) continue;
    stoker_batch_info i{};
    i.struct_size = sizeof(i);
    ASSERT_EQ(c.info(batch, &i), 0) << c.last_error();
    EXPECT_EQ(i.dtype, STOKER_FLOAT16);
    EXPECT_EQ(i.device, -1);
    EXPECT_EQ(i.count, 8u);
    EXPECT_EQ(i.shape[1], 3);
    EXPECT_EQ(i.labels, i.host_labels);  // host path: one copy
    std::vector<uint16_t> expected(8 * 3 * 32 * 32);
    OutputFormat f16;
    f16.dtype = DType::kFloat16;
    client::ConvertOnHost(i.host_pixels, 8, 32, 32, f16, expected.data());
    EXPECT_EQ(std::memcmp(i.data, expected.data(), expected.size() * 2), 0);
    std::set<uint64_t>& ids = ids_by_epoch[i.epoch];
    for (uint32_t k = 0; k < i.count; ++k) EXPECT_TRUE(ids.insert(i.host_sample_ids[k]).second);
    ++batches;
    c.release(batch);
  }
  EXPECT_EQ(batches, 8u);
  EXPECT_EQ(ids_by_epoch[0].size(), 64u);
  size_t needed = 0;
  EXPECT_EQ(c.checkpoint(loader, nullptr, 0, &needed), static_cast<int>(StatusCode::kResourceExhausted));
  std::string token(needed, '\0');
  ASSERT_EQ(c.checkpoint(loader, token.data(), token.size(), &needed), 0);
  EXPECT_GT(needed, 10u);
  char json[4096];
  ASSERT_EQ(c.stats(loader, json, sizeof(json), &needed), 0);
  EXPECT_NE(std::string(json).find("\"batches\": 8"), std::string::npos) << json;
  c.close(loader);
}

#ifdef STOKER_WITH_CUDA

bool HaveGpu() { return !client::ListGpus().empty(); }

#define EXPECT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

// Copies a device view to the host (on `stream`, then waits for it).
std::vector<uint8_t> ToHost(const void* device, size_t bytes, cudaStream_t stream) {
  std::vector<uint8_t> host(bytes);
  EXPECT_EQ(cudaMemcpyAsync(host.data(), device, bytes, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return host;
}

// The batch as the device holds it equals the host reference: the converted pixels bit for bit, the labels and the
// sample ids.
void ExpectDeviceBatchMatchesHost(const LoadedBatch& b, const OutputFormat& format, cudaStream_t stream) {
  const BatchView& v = b.view();
  const auto n = static_cast<uint32_t>(v.shape[0]);
  const size_t bytes = ElementCount(v) * DTypeSize(format.dtype);
  std::vector<uint8_t> expected(bytes);
  client::ConvertOnHost(b.host_pixels(), n, static_cast<uint32_t>(v.shape[2]), static_cast<uint32_t>(v.shape[3]), format,
                expected.data());
  EXPECT_EQ(ToHost(v.data, bytes, stream), expected)
      << DTypeName(format.dtype) << " " << LayoutName(format.layout) << " batch " << b.position();
  auto labels = ToHost(v.labels, n * sizeof(int64_t), stream);
  auto ids = ToHost(v.sample_ids, n * sizeof(uint64_t), stream);
  EXPECT_EQ(std::memcmp(labels.data(), b.labels().data(), labels.size()), 0) << "batch " << b.position();
  EXPECT_EQ(std::memcmp(ids.data(), b.sample_ids().data(), ids.size()), 0) << "batch " << b.position();
}

// Hands `take` every batch `loader` delivers on `stream`, in order, until the end of the job.
void ForEachBatch(Loader& loader, cudaStream_t stream, const std::function<void(LoadedBatch& b)>& take) {
  while (true) {
    auto d = loader.Next(stream, kBatchTimeout);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    if (d->kind == LoaderDelivery::Kind::kEndOfJob) return;
    if (d->kind == LoaderDelivery::Kind::kBatch) take(d->batch);
  }
}

TEST_F(LoaderTest, GpuPathMatchesTheHostReferenceBitForBitInEveryFormat) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU here";
  cudaStream_t stream;
  EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int formats = 0;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kUInt8}) {
    for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
      LoaderOptions o = GpuOptions(std::string("gpu-") + DTypeName(dtype) + "-" + LayoutName(layout), 1);
      o.output.dtype = dtype;
      o.output.layout = layout;
      auto loader = Loader::Open(o);
      ASSERT_TRUE(loader.ok()) << loader.status().ToString();
      ASSERT_TRUE((*loader)->on_device());
      const LoaderStats s = (*loader)->Stats();
      EXPECT_EQ(s.slot_bytes, 8u * 32 * 32 * 3 + 8u * 16);  // pixels end 16-byte aligned here: no padding
      // Sealed: depth slots and prefetch - depth + 1 spares that batches are opened into.
      EXPECT_EQ(s.pinned_bytes, uint64_t{o.client.prefetch + 1} * s.slot_bytes) << "pinned memory: depth + spares";
      ExactlyOnce exact;
      ForEachBatch(**loader, stream, [&](const LoadedBatch& b) {
        const BatchView& v = b.view();
        ASSERT_EQ(v.device, 0);
        ASSERT_EQ(v.shape, (std::array<int64_t, 4>{8, 3, 32, 32}));
        ExpectDeviceBatchMatchesHost(b, o.output, stream);
        exact.Add(b);
      });
      exact.ExpectEpochs(1, 64, data_->samples);
      const LoaderStats after = (*loader)->Stats();
      EXPECT_GT(after.client.wait_seconds, 0);
      EXPECT_LE(after.client.stall_seconds, after.client.wait_seconds + 1e-9);
      ++formats;
    }
  }
  EXPECT_EQ(formats, 8);
  EXPECT_CUDA(cudaStreamDestroy(stream));
}

// Labels and sample ids follow the pixels in a slot; for image sizes whose pixel bytes are not a multiple of 8
// they still start 16-byte aligned (int64 tensors of PyTorch need it), and they are the right values.
TEST_F(LoaderTest, GpuOddImageSizesKeepLabelsAlignedAndRight) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU here";
  LoaderOptions o = GpuOptions("gpu-odd", 1);
  o.client.spec->batch_size = 7;
  o.client.spec->pipeline.output_height = 33;
  o.client.spec->pipeline.output_width = 35;
  auto loader = Loader::Open(o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  cudaStream_t stream;
  EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  uint32_t batches = 0;
  ForEachBatch(**loader, stream, [&](const LoadedBatch& b) {
    const BatchView& v = b.view();
    ASSERT_EQ(v.shape, (std::array<int64_t, 4>{7, 3, 33, 35}));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.labels) % 16, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.sample_ids) % 8, 0u);
    ExpectDeviceBatchMatchesHost(b, o.output, stream);
    ++batches;
  });
  EXPECT_EQ(batches, 70u / 7);
  EXPECT_CUDA(cudaStreamDestroy(stream));
}

// Batches large enough for the openers are opened there, and the openers' time is the client's receive stage (its
// heartbeats carry it to the coordinator's stoker_coordinator_job_stage_seconds_total).
TEST_F(LoaderTest, TheOpenersTimeIsTheClientsReceiveStage) {
  auto loader = Loader::Open(LargeOptions("openers-time"));
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  ForEachBatch(**loader, nullptr, [](const LoadedBatch&) {});
  const ClientStats s = (*loader)->Stats().client;
  EXPECT_GT(s.receive_seconds, 0);
  EXPECT_EQ(s.h2d_seconds, 0) << "the host path copies nothing to a device";
}

// Sealed batches are opened straight into spare pinned buffers, which then take turns as the slots' buffers: every
// sample's pixels on the device are the ones the host path (opened in place) delivers for the same job, epoch
// after epoch, so no buffer is handed out twice or swapped into the wrong slot (LargeOptions' batches).
TEST_F(LoaderTest, GpuSealedBatchesOpenedIntoPinnedMemoryMatchTheHostPathSampleBySample) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU here";
  using Pixels = std::vector<uint8_t>;
  constexpr size_t kImage = kLargeSide * kLargeSide * 3;
  std::map<std::pair<uint32_t, uint64_t>, Pixels> host;  // (epoch, sample id) -> pixels
  {
    auto loader = Loader::Open(LargeOptions("pinned-host"));
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    ForEachBatch(**loader, nullptr, [&](const LoadedBatch& b) {
      for (size_t i = 0; i < b.sample_ids().size(); ++i) {
        host[{b.epoch(), b.sample_ids()[i]}] = Pixels(b.host_pixels() + i * kImage, b.host_pixels() + (i + 1) * kImage);
      }
    });
    EXPECT_EQ((*loader)->Stats().client.batches_opened_into_pinned, 0u) << "the host path opens in place";
  }
  ASSERT_EQ(host.size(), 128u);
  cudaStream_t stream;
  EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  LoaderOptions o = LargeOptions("pinned-gpu");
  o.device = 0;
  auto loader = Loader::Open(o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  size_t compared = 0;
  ForEachBatch(**loader, stream, [&](const LoadedBatch& b) {
    const Pixels device = ToHost(b.view().data, b.sample_ids().size() * kImage, stream);
    for (size_t i = 0; i < b.sample_ids().size(); ++i) {
      auto it = host.find({b.epoch(), b.sample_ids()[i]});
      ASSERT_NE(it, host.end());
      EXPECT_TRUE(std::equal(it->second.begin(), it->second.end(), device.begin() + i * kImage))
          << "epoch " << b.epoch() << " sample " << b.sample_ids()[i];
      ++compared;
    }
  });
  EXPECT_EQ(compared, 128u);
  const LoaderStats s = (*loader)->Stats();
  EXPECT_GT(s.client.batches_opened_into_pinned, 0u);
  EXPECT_LE(s.client.batches_opened_into_pinned, s.client.batches_received);
  EXPECT_GT(s.client.receive_seconds, 0) << "opening into pinned memory is the receive stage";
  EXPECT_GT(s.client.h2d_seconds, 0) << "the copies to the device, from CUDA events";
  EXPECT_CUDA(cudaStreamDestroy(stream));
}

// A consumer stream of another device would make the slot's release unrecordable: refused at Next(), nothing
// taken (needs two GPUs).
TEST_F(LoaderTest, GpuConsumerStreamOfAnotherDeviceIsRefused) {
  if (client::ListGpus().size() < 2) GTEST_SKIP() << "needs two GPUs";
  LoaderOptions o = GpuOptions("gpu-other-stream", 1);
  auto loader = Loader::Open(o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  cudaStream_t other;
  EXPECT_CUDA(cudaSetDevice(1));
  EXPECT_CUDA(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  EXPECT_CUDA(cudaSetDevice(0));
  auto refused = (*loader)->Next(other, kBatchTimeout);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status().ToString();
  auto d = (*loader)->Next(nullptr, kBatchTimeout);  // the same batch, on the right stream
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->kind, LoaderDelivery::Kind::kBatch);
  EXPECT_EQ(d->batch.position(), 0u);
  d->batch.Release();
  EXPECT_CUDA(cudaStreamDestroy(other));
}

// The consumer's stream is far slower than the copies and the host runs ahead of it, releasing each batch as
// soon as its work is queued: a slot reused too early would change what the stream's checksum kernel reads.
TEST_F(LoaderTest, ConsumerStreamSlowerThanTheCopiesSeesNoCorruption) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU here";
  LoaderOptions o = GpuOptions("gpu-slow", 3);
  o.depth = 2;
  o.output.dtype = DType::kBFloat16;
  auto loader = Loader::Open(o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  cudaStream_t stream;
  EXPECT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const uint32_t batches = 24;
  unsigned long long* sums = nullptr;
  EXPECT_CUDA(cudaMalloc(reinterpret_cast<void**>(&sums), batches * 3 * sizeof(unsigned long long)));
  std::vector<uint64_t> expected_pixels, expected_labels, expected_ids;
  uint32_t taken = 0;
  ForEachBatch(**loader, stream, [&](LoadedBatch& b) {
    ASSERT_LT(taken, batches) << "more batches than the job has";
    const BatchView& v = b.view();
    std::vector<uint8_t> converted(ElementCount(v) * 2);
    client::ConvertOnHost(b.host_pixels(), 8, 32, 32, o.output, converted.data());
    expected_pixels.push_back(cuda::testing::HostChecksum(converted.data(), converted.size()));
    uint64_t l = 0, s = 0;
    for (int64_t x : b.labels()) l += static_cast<uint64_t>(x);
    for (uint64_t x : b.sample_ids()) s += x;
    expected_labels.push_back(l);
    expected_ids.push_back(s);
    EXPECT_EQ(cuda::testing::LaunchSpin(stream, 3000), 0);  // 3 ms: far slower than a 24 KB copy
    EXPECT_EQ(cuda::testing::LaunchChecksum(static_cast<const uint8_t*>(v.data), converted.size(), v.labels,
                                            v.sample_ids, 8, sums + 3 * taken, stream),
              0);
    b.Release();  // the host is done; the stream is not
    ++taken;
  });
  ASSERT_EQ(expected_pixels.size(), batches);
  std::vector<unsigned long long> got(batches * 3);
  EXPECT_CUDA(cudaMemcpyAsync(got.data(), sums, got.size() * sizeof(got[0]), cudaMemcpyDeviceToHost, stream));
  EXPECT_CUDA(cudaStreamSynchronize(stream));
  for (uint32_t k = 0; k < batches; ++k) {
    EXPECT_EQ(got[3 * k], expected_pixels[k]) << "batch " << k << ": pixels changed under the consumer";
    EXPECT_EQ(got[3 * k + 1], expected_labels[k]) << "batch " << k;
    EXPECT_EQ(got[3 * k + 2], expected_ids[k]) << "batch " << k;
  }
  EXPECT_CUDA(cudaFree(sums));
  EXPECT_CUDA(cudaStreamDestroy(stream));
}

TEST_F(LoaderTest, GpuConsumerHoldingEverySlotIsToldNotStuck) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU here";
  LoaderOptions o = GpuOptions("gpu-held", 1);
  o.depth = 2;
  auto loader = Loader::Open(o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  auto a = (*loader)->Next(nullptr, kBatchTimeout);
  auto b = (*loader)->Next(nullptr, kBatchTimeout);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = (*loader)->Next(nullptr, kBatchTimeout);
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted) << c.status().ToString();
  a->batch.Release();
  auto again = (*loader)->Next(nullptr, kBatchTimeout);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->batch.position(), 2u);
}

#endif  // STOKER_WITH_CUDA

}  // namespace
}  // namespace stoker
