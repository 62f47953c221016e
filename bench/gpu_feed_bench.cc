// The GPU client's feed: how fast a batch goes from pinned memory to a normalised tensor on the device, against raw
// cudaMemcpyAsync of the same bytes in the same run, and what the client costs in host CPU per image delivered.
//
//   gpu_feed_bench [--device 0] [--batch-size 256] [--depth 4] [--iterations 200] [--seconds 10] [--workers 4]
//
// 1. Device path (goal >= 0.9 of raw): the Loader's DeviceStage moves each batch through `depth` slots — on its
//    copy stream, after the consumer's release, cudaMemcpyAsync of the batch (pixels, labels, ids) from its pinned
//    slot, then on its conversion stream the kernel to the output dtype and layout; the consumer stream waits for
//    each batch and releases it. Baseline: cudaMemcpyAsync of the same bytes from `depth` pinned buffers on one
//    stream, back to back. Both timed over `iterations` batches after a warm-up, 7 repeats alternating, medians;
//    for float32 NCHW, bfloat16 NHWC, float16 NCHW and uint8 NHWC.
// 2. Host staging: the whole Stage (one memcpy of the received message into the pinned slot, then the device path)
//    against memcpy of the same bytes between two host buffers on one core.
// 3. End to end: a real coordinator and `--workers` worker processes (--bench-skip-decode: batches are patterns,
//    so the workers are not the limit), a Loader on the device in this process consuming bfloat16 NHWC batches for
//    `--seconds`. Reports img/s and this process's CPU time (every client thread: receive, staging, consumer), as
//    cores per 20,000 img/s (goal <= 1).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <span>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/consume_rate.h"
#include "client/cuda/cuda_handles.h"
#include "client/cuda/device_stage.h"
#include "client/src/received_batch.h"
#include "auth/seal.h"
#include "bench/bench_main.h"
#include "stoker/loader.h"
#include "tools/local_cluster.h"

namespace stoker {
namespace {

using Clock = std::chrono::steady_clock;
using bench::Median;
constexpr auto Die = bench::DieUnlessOk;

double ProcessCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

// CPU seconds of this process's threads, summed by thread name (/proc/self/task/*/stat: comm, utime, stime).
std::map<std::string, double> ThreadCpuSeconds() {
  std::map<std::string, double> by_name;
  const double tick = 1.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    const size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::string name = line.substr(open + 1, close - open - 1);
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {  // fields 14 and 15: utime, stime
      if (i == 14) utime = std::stod(field);
      if (i == 15) stime = std::stod(field);
    }
    by_name[name] += (utime + stime) * tick;
  }
  return by_name;
}

struct Config {
  int device = 0;
  uint32_t batch = 0;  // device and batch: the flags', set when the run starts
  uint32_t depth = 4, iterations = 200, height = 224, width = 224;
};

// `n` raw copies of `bytes` from `depth` pinned buffers, back to back on one stream, waited for.
void RawCopies(const Config& c, uint64_t bytes, const std::vector<cuda::PinnedMemory>& pinned,
               const std::vector<cuda::DeviceMemory>& device, cudaStream_t stream, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    const size_t slot = i % c.depth;
    Die(cuda::CudaStatus(cudaMemcpyAsync(device[slot].get(), pinned[slot].get(), bytes, cudaMemcpyHostToDevice,
                                         stream), "cudaMemcpyAsync"), "raw copy");
  }
  Die(cuda::CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize"), "raw copy");
}

client::ReceivedBatch MakeReceived(const Config& c, std::mt19937_64& rng) {
  client::ReceivedBatch b;
  b.count = c.batch;
  b.height = c.height;
  b.width = c.width;
  b.channels = 3;
  b.pixel_bytes = size_t{c.batch} * c.height * c.width * 3;
  b.payload = zmq::message_t(b.pixel_bytes);
  auto* p = static_cast<uint8_t*>(b.payload.data());
  for (size_t i = 0; i < b.pixel_bytes; i += 8) {
    const uint64_t v = rng();
    std::memcpy(p + i, &v, std::min<size_t>(8, b.pixel_bytes - i));
  }
  for (uint32_t i = 0; i < c.batch; ++i) {
    b.labels.push_back(static_cast<int64_t>(rng() % 1000));
    b.sample_ids.push_back(i);
    b.flags.push_back(0);
  }
  return b;
}

struct FormatResult {
  std::string name;
  double raw_gbps = 0, feed_gbps = 0, ratio = 0, feed_images_per_second = 0;
};

FormatResult MeasureFormat(const Config& c, const OutputFormat& format, const std::string& name,
                           const std::vector<cuda::PinnedMemory>& pinned, const std::vector<cuda::DeviceMemory>& device,
                           cudaStream_t raw_stream, cudaStream_t consumer) {
  auto stage = client::DeviceStage::Create(c.device, {c.batch, c.height, c.width}, c.depth, format);
  Die(stage.status(), "client::DeviceStage::Create");
  std::mt19937_64 rng(42);
  // Fill every pinned slot once, through the real Stage.
  for (uint32_t s = 0; s < c.depth; ++s) {
    client::ReceivedBatch b = MakeReceived(c, rng);
    client::StageReport report;
    Die((*stage)->Stage(s, b, &report), "Stage");
    Die((*stage)->ConsumerWaitsFor(s, consumer), "ConsumerWaitsFor");
    Die((*stage)->RecordRelease(s, consumer), "RecordRelease");
  }
  auto run = [&](uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
      const size_t slot = i % c.depth;
      Die((*stage)->Transfer(slot), "Transfer");
      Die((*stage)->ConsumerWaitsFor(slot, consumer), "ConsumerWaitsFor");
      Die((*stage)->RecordRelease(slot, consumer), "RecordRelease");
    }
    Die(cuda::CudaStatus(cudaStreamSynchronize(consumer), "cudaStreamSynchronize"), "feed");
  };
  const uint64_t bytes = (*stage)->slot_bytes();
  run(c.depth * 4);
  RawCopies(c, bytes, pinned, device, raw_stream, c.depth * 4);
  // Baseline and feed alternate, repeat by repeat, so that a drift of the machine (clocks, a neighbour) falls on
  // both alike.
  std::vector<double> feed_times, raw_times;
  for (int r = 0; r < 7; ++r) {
    auto t = Clock::now();
    RawCopies(c, bytes, pinned, device, raw_stream, c.iterations);
    raw_times.push_back(bench::SecondsSince(t));
    t = Clock::now();
    run(c.iterations);
    feed_times.push_back(bench::SecondsSince(t));
  }
  const double feed = Median(feed_times);
  const double raw = Median(raw_times);
  FormatResult r;
  r.name = name;
  r.raw_gbps = bytes * double(c.iterations) / raw / 1e9;
  r.feed_gbps = bytes * double(c.iterations) / feed / 1e9;
  r.ratio = r.feed_gbps / r.raw_gbps;
  r.feed_images_per_second = double(c.batch) * c.iterations / feed;
  return r;
}

struct StagingResult {
  double stage_gbps = 0, memcpy_gbps = 0, ratio = 0, images_per_second = 0;
};

// The whole Stage, on this thread, as the client's staging thread runs it: received message -> pinned -> device.
StagingResult MeasureStaging(const Config& c, cudaStream_t consumer) {
  OutputFormat format;
  format.dtype = DType::kBFloat16;
  format.layout = Layout::kNHWC;
  auto stage = client::DeviceStage::Create(c.device, {c.batch, c.height, c.width}, c.depth, format);
  Die(stage.status(), "client::DeviceStage::Create");
  std::mt19937_64 rng(7);
  const uint32_t n = std::max<uint32_t>(c.iterations / 4, c.depth * 4);
  std::vector<client::ReceivedBatch> received;
  for (uint32_t i = 0; i < c.depth * 2; ++i) received.push_back(MakeReceived(c, rng));
  std::vector<zmq::message_t> payloads;
  for (auto& r : received) payloads.emplace_back(r.payload.data(), r.payload.size());  // copies to restore from
  std::vector<double> times;
  for (int rep = 0; rep < 3; ++rep) {
    auto t = Clock::now();
    for (uint32_t i = 0; i < n; ++i) {
      const size_t slot = i % c.depth;
      client::ReceivedBatch& b = received[i % received.size()];
      if (b.payload.size() == 0) b.payload.copy(payloads[i % received.size()]);  // Stage let the last one go
      b.staged_pixels = nullptr;
      client::StageReport report;
      Die((*stage)->Stage(slot, b, &report), "Stage");
      Die((*stage)->ConsumerWaitsFor(slot, consumer), "ConsumerWaitsFor");
      Die((*stage)->RecordRelease(slot, consumer), "RecordRelease");
    }
    Die(cuda::CudaStatus(cudaStreamSynchronize(consumer), "cudaStreamSynchronize"), "staging");
    times.push_back(bench::SecondsSince(t));
  }
  // Restoring the payload (b.payload.copy) is a memcpy too, but zmq's copy shares the buffer (refcounted): free.
  const double bytes = double((*stage)->slot_bytes()) * n;
  StagingResult r;
  r.stage_gbps = bytes / Median(times) / 1e9;
  r.images_per_second = double(c.batch) * n / Median(times);
  // Baseline: plain memcpy of the same bytes between two host buffers (fresh destinations, like pinned slots).
  std::vector<uint8_t> src(size_t((*stage)->slot_bytes()), 1);
  std::vector<std::vector<uint8_t>> dst(c.depth, std::vector<uint8_t>(src.size(), 0));
  times.clear();
  for (int rep = 0; rep < 3; ++rep) {
    auto t = Clock::now();
    for (uint32_t i = 0; i < n; ++i) std::memcpy(dst[i % c.depth].data(), src.data(), src.size());
    times.push_back(bench::SecondsSince(t));
  }
  r.memcpy_gbps = bytes / Median(times) / 1e9;
  r.ratio = r.stage_gbps / r.memcpy_gbps;
  return r;
}

struct EndToEndResult {
  double images_per_second = 0, cpu_cores = 0, cores_per_20k = 0, wait_fraction = 0, h2d_gbps = 0;
  double opened_into_pinned = 0;  // of the batches received, the share opened straight into a pinned buffer
  uint64_t batches = 0;
  std::map<std::string, double> thread_cores;  // by thread name: cores over the timed window
};

EndToEndResult MeasureEndToEnd(const Config& c, uint32_t workers, uint32_t worker_threads, double seconds,
                               bench::DataSecurity security) {
  bench::ScratchDir scratch("gpufeed");
  const std::string& dir = scratch.path();
  auto manifest = bench::WriteNeverReadManifest(dir, 200000, "gpu_feed_bench");
  Die(manifest.status(), "manifest");
  auto cluster = bench::StartSkipDecodeCluster(dir, workers, worker_threads, security);
  Die(cluster.status(), "cluster");
  LoaderOptions o;
  o.client.coordinator = (*cluster)->coordinator_endpoint();
  (*cluster)->Secure(o.client);
  o.client.job = "gpufeed";
  JobSpec spec;
  spec.name = "gpufeed";
  spec.manifest_path = *manifest;
  spec.batch_size = c.batch;
  spec.epochs = 1000;
  o.client.spec = spec;
  o.client.prefetch = 16;
  o.client.credits_per_worker = 4;
  o.device = c.device;
  o.depth = c.depth;
  o.output.dtype = DType::kBFloat16;
  o.output.layout = Layout::kNHWC;
  auto loader = Loader::Open(o);
  Die(loader.status(), "Loader::Open");
  cudaStream_t consumer = nullptr;
  Die(cuda::CudaStatus(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), "cudaStreamCreate"), "stream");
  auto consume_for = [&](double s, uint64_t* images, uint64_t* batches) {
    auto t = Clock::now();
    while (bench::SecondsSince(t) < s) {
      auto d = (*loader)->Next(consumer, std::chrono::seconds(60));
      Die(d.status(), "Next");
      if (d->kind != LoaderDelivery::Kind::kBatch) continue;
      *images += d->batch.size();
      ++*batches;
    }  // the batch is released at the end of each iteration: the consumer stream does nothing with it
    Die(cuda::CudaStatus(cudaStreamSynchronize(consumer), "cudaStreamSynchronize"), "consume");
    return bench::SecondsSince(t);
  };
  uint64_t images = 0, batches = 0;
  consume_for(2.0, &images, &batches);  // warm-up: connections, pipelines full
  images = batches = 0;
  const LoaderStats before = (*loader)->Stats();
  const double cpu0 = ProcessCpuSeconds();
  const auto threads0 = ThreadCpuSeconds();
  const double elapsed = consume_for(seconds, &images, &batches);
  const double cpu = ProcessCpuSeconds() - cpu0;
  auto threads = ThreadCpuSeconds();
  const LoaderStats after = (*loader)->Stats();
  EndToEndResult r;
  r.images_per_second = images / elapsed;
  r.batches = batches;
  r.cpu_cores = cpu / elapsed;
  r.cores_per_20k = r.cpu_cores / (r.images_per_second / 20000.0);
  r.wait_fraction = (after.wait_seconds - before.wait_seconds) / elapsed;
  r.h2d_gbps = double(after.slot_bytes) * batches / elapsed / 1e9;
  const uint64_t received = after.client.batches_received - before.client.batches_received;
  r.opened_into_pinned = received == 0 ? 0
                                       : double(after.client.batches_opened_into_pinned -
                                                before.client.batches_opened_into_pinned) / received;
  for (auto& [name, seconds_used] : threads) {
    auto it = threads0.find(name);
    const double used = seconds_used - (it == threads0.end() ? 0.0 : it->second);
    if (used > 0.005 * elapsed) r.thread_cores[name] = used / elapsed;
  }
  cudaStreamDestroy(consumer);
  loader->reset();
  return r;
}

// The device path's Config takes its batch and device from these when the run starts.
struct Options : bench::CommonOptions {
  Options() : CommonOptions{.batch = 256, .seconds = 10, .workers = 4, .worker_threads = 2} {}
  Config c;
  int64_t device = 0;
  bool skip_end_to_end = false, only_sealed = false;
};

// What the three parts measured.
// Opening sealed batches (the client's openers): each of `threads` threads opens whole batches of `bytes`, sealed in
// frames of 8 MiB as a worker seals them for a GPU client, from a received buffer into a buffer of its own, for
// about a second and a half. Images per second over all threads.
double MeasureOpening(const Config& c, uint64_t bytes, unsigned threads) {
  const SealOffer client = SealOffer::Make(), worker = SealOffer::Make();
  const SealTranscript t{"client:bench", "w-bench", client.random(), client.public_key(), worker.random(),
                         worker.public_key()};
  const std::string pair_key(kSealKeyBytes, 'k');
  auto sealer = SealSession::Derive(pair_key, t, worker, SealDirection::kWorkerToClient);
  auto opener = SealSession::Derive(pair_key, t, client, SealDirection::kClientToWorker);
  Die(sealer.ok() ? opener.status() : sealer.status(), "SealSession::Derive");
  const size_t frame = size_t{8} << 20;
  std::vector<uint8_t> sealed(bytes, 3);
  const std::vector<uint8_t> header(4096, 'h');
  const std::span<const uint8_t> associated[] = {header};
  std::vector<std::array<uint8_t, kSealTagBytes>> tags((bytes + frame - 1) / frame);
  for (size_t f = 0; f * frame < bytes; ++f) {
    (*sealer)->Seal(f, associated, {sealed.data() + f * frame, std::min(frame, bytes - f * frame)}, tags[f]);
  }
  std::atomic<uint64_t> batches{0};
  const auto until = Clock::now() + std::chrono::milliseconds(1500);
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < threads; ++i) {
    pool.emplace_back([&] {
      std::vector<uint8_t> out(bytes);
      while (Clock::now() < until) {
        for (size_t f = 0; f * frame < bytes; ++f) {
          const size_t n = std::min(frame, bytes - f * frame);
          Die((*opener)->Open(f, associated, {sealed.data() + f * frame, n}, {out.data() + f * frame, n}, tags[f]),
              "Open");
        }
        batches.fetch_add(1);
      }
    });
  }
  for (std::thread& th : pool) th.join();
  return double(batches.load()) * c.batch / bench::SecondsSince(start);
}

struct Figures {
  std::string device_name;
  std::vector<std::pair<unsigned, double>> opening;  // (threads, img/s)
  uint64_t slot_bytes = 0;
  std::vector<FormatResult> formats;
  StagingResult staging;
  EndToEndResult e2e;           // the default data plane: sealed batches
  EndToEndResult e2e_insecure;  // the same with --insecure, the baseline of the same run
};

// 1. pinned -> device tensor, for each output format against raw copies of the same bytes.
std::vector<FormatResult> MeasureDevicePath(const Config& c, uint64_t slot_bytes) {
  std::vector<cuda::PinnedMemory> pinned;
  std::vector<cuda::DeviceMemory> device_bufs;
  for (uint32_t i = 0; i < c.depth; ++i) {
    auto p = cuda::AllocatePinned(slot_bytes);
    Die(p.status(), "cudaHostAlloc");
    std::memset(p->get(), 0x5a, slot_bytes);
    pinned.push_back(std::move(*p));
    auto d = cuda::AllocateDevice(slot_bytes);
    Die(d.status(), "cudaMalloc");
    device_bufs.push_back(std::move(*d));
  }
  auto raw_stream = cuda::MakeStream();
  auto consumer = cuda::MakeStream();
  Die(raw_stream.status(), "stream");
  Die(consumer.status(), "stream");
  struct Named {
    const char* name;
    DType dtype;
    Layout layout;
  };
  const Named formats[] = {{"float32 nchw", DType::kFloat32, Layout::kNCHW},
                           {"bfloat16 nhwc", DType::kBFloat16, Layout::kNHWC},
                           {"float16 nchw", DType::kFloat16, Layout::kNCHW},
                           {"uint8 nhwc", DType::kUInt8, Layout::kNHWC}};
  std::vector<FormatResult> results;
  std::printf("\n1. pinned -> device tensor, %u batches x 7 repeats alternating with the baseline (medians)\n",
              c.iterations);
  std::printf("%-16s %14s %16s %8s %12s\n", "output", "raw copy GB/s", "copy+convert GB/s", "ratio", "img/s");
  for (const Named& f : formats) {
    OutputFormat format;
    format.dtype = f.dtype;
    format.layout = f.layout;
    results.push_back(MeasureFormat(c, format, f.name, pinned, device_bufs, raw_stream->get(), consumer->get()));
    const FormatResult& r = results.back();
    std::printf("%-16s %14.2f %16.2f %8.3f %12.0f\n", r.name.c_str(), r.raw_gbps, r.feed_gbps, r.ratio,
                r.feed_images_per_second);
  }
  return results;
}

// 2. host staging, and 3. end to end unless skipped.
void MeasureHostParts(const Options& o, Figures* f) {
  auto consumer = cuda::MakeStream();
  Die(consumer.status(), "stream");
  f->staging = MeasureStaging(o.c, consumer->get());
  std::printf("\n2. host staging (received message -> pinned slot -> device, bfloat16 nhwc), one thread\n");
  std::printf("   Stage %.2f GB/s (%.0f img/s) vs memcpy on one core %.2f GB/s: ratio %.3f\n", f->staging.stage_gbps,
              f->staging.images_per_second, f->staging.memcpy_gbps, f->staging.ratio);
  std::printf("\n2b. opening sealed batches (AES-256-GCM, frames of 8 MiB) from a received buffer into another\n");
  const uint64_t pixel_bytes = uint64_t{o.c.batch} * o.c.height * o.c.width * 3;
  for (unsigned threads : {1u, 2u, 4u, 8u}) {
    const double rate = MeasureOpening(o.c, pixel_bytes, threads);
    f->opening.emplace_back(threads, rate);
    std::printf("   %u thread%s: %.0f img/s (%.2f GB/s)\n", threads, threads > 1 ? "s" : "", rate,
                rate * (double(pixel_bytes) / o.c.batch) / 1e9);
  }
  if (o.skip_end_to_end) return;
  std::printf("\n3. end to end: %u skip-decode workers x %u threads -> Loader (bfloat16 nhwc) on device %d\n",
              o.workers, o.worker_threads, o.c.device);
  for (bench::DataSecurity security : {bench::DataSecurity::kSealed, bench::DataSecurity::kInsecure}) {
    if (security == bench::DataSecurity::kInsecure && o.only_sealed) break;
    EndToEndResult& e2e = security == bench::DataSecurity::kSealed ? f->e2e : f->e2e_insecure;
    e2e = MeasureEndToEnd(o.c, o.workers, o.worker_threads, o.seconds, security);
    std::printf("   %s: %.0f img/s (%.2f GB/s to the device), client process CPU %.2f cores = %.3f cores per "
                "20,000 img/s (goal <= 1.3 sealed), consumer waited %.1f %%\n",
                bench::DataSecurityName(security), e2e.images_per_second, e2e.h2d_gbps, e2e.cpu_cores,
                e2e.cores_per_20k, 100 * e2e.wait_fraction);
    std::printf("     batches opened straight into pinned memory: %.1f %%\n", 100 * e2e.opened_into_pinned);
    std::printf("     by thread (cores):");
    for (const auto& [name, cores] : e2e.thread_cores) std::printf(" %s %.2f", name.c_str(), cores);
    std::printf("\n");
  }
  if (!o.only_sealed && f->e2e_insecure.images_per_second > 0) {
    std::printf("   sealed / insecure throughput: %.3f (goal >= 0.95)\n",
                f->e2e.images_per_second / f->e2e_insecure.images_per_second);
  }
}

void EndToEndJson(std::ostringstream& j, const char* key, const Options& o, const EndToEndResult& e2e) {
  j << ", \"" << key << "\": {\"workers\": " << o.workers << ", \"worker_threads\": " << o.worker_threads
    << ", \"images_per_second\": " << e2e.images_per_second << ", \"h2d_gbps\": " << e2e.h2d_gbps
    << ", \"client_cpu_cores\": " << e2e.cpu_cores << ", \"cores_per_20k_img_s\": " << e2e.cores_per_20k
    << ", \"wait_fraction\": " << e2e.wait_fraction << ", \"batches\": " << e2e.batches
    << ", \"opened_into_pinned\": " << e2e.opened_into_pinned << ", \"thread_cores\": {";
  bool first = true;
  for (const auto& [name, cores] : e2e.thread_cores) {
    j << (first ? "" : ", ") << "\"" << name << "\": " << cores;
    first = false;
  }
  j << "}}";
}

std::string Json(const Options& o, const Figures& f) {
  std::ostringstream j;
  j << "{\"device\": \"" << f.device_name << "\", \"batch_size\": " << o.batch << ", \"depth\": " << o.c.depth
    << ", \"slot_bytes\": " << f.slot_bytes << ", \"formats\": [";
  for (size_t i = 0; i < f.formats.size(); ++i) {
    const FormatResult& r = f.formats[i];
    j << (i ? ", " : "") << "{\"output\": \"" << r.name << "\", \"raw_gbps\": " << r.raw_gbps
      << ", \"feed_gbps\": " << r.feed_gbps << ", \"ratio\": " << r.ratio
      << ", \"feed_images_per_second\": " << r.feed_images_per_second << "}";
  }
  j << "], \"staging\": {\"stage_gbps\": " << f.staging.stage_gbps << ", \"memcpy_gbps\": " << f.staging.memcpy_gbps
    << ", \"ratio\": " << f.staging.ratio << ", \"images_per_second\": " << f.staging.images_per_second << "}";
  j << ", \"opening_img_s_by_threads\": {";
  for (size_t i = 0; i < f.opening.size(); ++i) {
    j << (i ? ", " : "") << "\"" << f.opening[i].first << "\": " << f.opening[i].second;
  }
  j << "}";
  if (!o.skip_end_to_end) {
    EndToEndJson(j, "end_to_end", o, f.e2e);
    if (!o.only_sealed) {
      EndToEndJson(j, "end_to_end_insecure", o, f.e2e_insecure);
      j << ", \"sealed_over_insecure\": "
        << (f.e2e_insecure.images_per_second > 0 ? f.e2e.images_per_second / f.e2e_insecure.images_per_second : 0);
    }
  }
  j << "}";
  return j.str();
}

void AddFlags(FlagSet& flags, Options& o) {
  Config& c = o.c;
  flags.AddInt("device", &o.device, "CUDA device");
  flags.AddUint32("depth", &c.depth, "slots");
  flags.AddUint32("iterations", &c.iterations, "batches per timed repeat (device path)");
  using enum bench::CommonFlag;
  bench::AddCommonFlags(flags, o, "timed seconds of the end-to-end run", {kBatchSize, kWorkers, kWorkerThreads});
  flags.AddBool("skip-end-to-end", &o.skip_end_to_end, "only the device and staging parts");
  flags.AddBool("only-sealed", &o.only_sealed,
                "the end-to-end run with the default (sealed) data plane only, without its --insecure baseline");
}

bench::Outcome RunBench(Options& o) {
  Config& c = o.c;
  c.device = static_cast<int>(o.device);
  c.batch = o.batch;

  Die(cuda::CudaStatus(cudaSetDevice(c.device), "cudaSetDevice"), "device");
  cudaDeviceProp prop{};
  Die(cuda::CudaStatus(cudaGetDeviceProperties(&prop, c.device), "cudaGetDeviceProperties"), "device");
  Figures f;
  f.device_name = prop.name;
  f.slot_bytes = uint64_t{c.batch} * c.height * c.width * 3 + uint64_t{c.batch} * 16;
  std::printf("device %d: %s; batch %u x %ux%ux3 uint8 + labels + ids = %.1f MB, depth %u\n", c.device, prop.name,
              c.batch, c.height, c.width, f.slot_bytes / 1e6, c.depth);
  f.formats = MeasureDevicePath(c, f.slot_bytes);
  MeasureHostParts(o, &f);
  return {0, Json(o, f)};
}

}  // namespace
}  // namespace stoker

STOKER_BENCH_MAIN("gpu_feed_bench",
                  "H2D + normalise vs raw cudaMemcpyAsync, host staging vs memcpy, client CPU per img/s (samples "
                  "224x224x3; end to end with skip-decode workers).");
