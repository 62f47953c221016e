// Two GPUs: the tensor-parallel broadcast against cudaMemcpyPeer of the same bytes, the agreement step's cost per
// batch, and the two arrangements end to end (two data-parallel ranks with agreement; one tensor-parallel pair).
//
//   nccl_bench [--batch-size 256] [--iterations 100] [--seconds 8] [--workers 4] [--data-plane curve|plain|insecure]
//              [--json FILE]
//
// 1. Broadcast: device 0 -> device 1 of one batch's bytes (pixels, labels, ids) through the Loader's Collective
//    (NCCL, loaded at run time), N times, against cudaMemcpyPeerAsync of the same bytes in the same run (peer
//    access on where the GPUs allow it). Median of 5 repeats.
// 2. Agreement: Collective::AgreeMax (a 4-byte all-reduce and the host wait for its result) between two
//    members, 2,000 times; microseconds per step — what every batch pays when agreement is on.
// 3. End to end with skip-decode workers (their pixels are patterns: the feed, not decoding, is measured):
//    (a) two ranks, one Loader per GPU, agreement on: img/s per GPU and agreement time per batch;
//    (b) one tensor-parallel pair: the leader fetches, both GPUs get every batch: img/s per GPU, and the workers'
//        output (batches fetched) against what the GPUs received (the worker load cut by the group size).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/consume_rate.h"
#include "client/cuda/cuda_handles.h"
#include "client/nccl/collective.h"
#include "bench/bench_main.h"
#include "stoker/loader.h"
#include "tools/local_cluster.h"

namespace stoker {
namespace {

using Clock = std::chrono::steady_clock;
using bench::Median;
constexpr auto Die = bench::DieUnlessOk;

// Joins a two-member communicator, one thread per device.
std::vector<std::unique_ptr<client::Collective>> JoinPair() {
  auto id = client::NewNcclIdHex();
  Die(id.status(), "NCCL id");
  auto join = [&](int member) {
    auto c = client::Collective::Join({*id, 2, static_cast<uint32_t>(member), std::chrono::seconds(120)}, member);
    Die(c.status(), "client::Collective::Join");
    return std::move(*c);
  };
  auto a = std::async(std::launch::async, join, 0);
  auto b = std::async(std::launch::async, join, 1);
  std::vector<std::unique_ptr<client::Collective>> pair;
  pair.push_back(a.get());
  pair.push_back(b.get());
  return pair;
}

struct BroadcastResult {
  double nccl_gbps = 0, peer_gbps = 0, ratio = 0;
  bool peer_access = false;
};

BroadcastResult MeasureBroadcast(std::vector<std::unique_ptr<client::Collective>>& pair, size_t bytes, uint32_t iterations) {
  std::vector<cuda::DeviceMemory> buf;
  for (int d = 0; d < 2; ++d) {
    Die(cuda::CudaStatus(cudaSetDevice(d), "cudaSetDevice"), "device");
    auto m = cuda::AllocateDevice(bytes);
    Die(m.status(), "cudaMalloc");
    Die(cuda::CudaStatus(cudaMemset(m->get(), d == 0 ? 0x5a : 0, bytes), "cudaMemset"), "memset");
    buf.push_back(std::move(*m));
  }
  auto timed = [&](auto&& one_run) {
    one_run(4);
    std::vector<double> t;
    for (int r = 0; r < 5; ++r) {
      auto start = Clock::now();
      one_run(iterations);
      t.push_back(bench::SecondsSince(start));
    }
    return Median(t);
  };
  // NCCL: both members queue `n` broadcasts on their own streams and wait for them, each on its own thread.
  auto nccl_run = [&](uint32_t n) {
    auto member = [&](int m) {
      Die(cuda::CudaStatus(cudaSetDevice(m), "cudaSetDevice"), "device");
      for (uint32_t i = 0; i < n; ++i) Die(pair[m]->Broadcast(buf[m].get(), bytes), "Broadcast");
      Die(pair[m]->WaitQueued(), "WaitQueued");
    };
    std::thread t1(member, 1);
    member(0);
    t1.join();
  };
  BroadcastResult r;
  r.nccl_gbps = double(bytes) * iterations / timed(nccl_run) / 1e9;
  int can = 0;
  cudaDeviceCanAccessPeer(&can, 1, 0);
  if (can) {
    Die(cuda::CudaStatus(cudaSetDevice(1), "cudaSetDevice"), "device");
    cudaError_t e = cudaDeviceEnablePeerAccess(0, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) Die(cuda::CudaStatus(e, "peer access"), "peer");
    cudaGetLastError();
    r.peer_access = true;
  }
  Die(cuda::CudaStatus(cudaSetDevice(1), "cudaSetDevice"), "device");
  auto stream = cuda::MakeStream();
  Die(stream.status(), "stream");
  auto peer_run = [&](uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
      Die(cuda::CudaStatus(cudaMemcpyPeerAsync(buf[1].get(), 1, buf[0].get(), 0, bytes, stream->get()),
                           "cudaMemcpyPeerAsync"), "peer copy");
    }
    Die(cuda::CudaStatus(cudaStreamSynchronize(stream->get()), "cudaStreamSynchronize"), "peer copy");
  };
  r.peer_gbps = double(bytes) * iterations / timed(peer_run) / 1e9;
  r.ratio = r.nccl_gbps / r.peer_gbps;
  return r;
}

double MeasureAgreementMicros(std::vector<std::unique_ptr<client::Collective>>& pair, uint32_t steps) {
  std::vector<double> per_step(2);
  auto member = [&](int m) {
    Die(cuda::CudaStatus(cudaSetDevice(m), "cudaSetDevice"), "device");
    for (int i = 0; i < 50; ++i) Die(pair[m]->AgreeMax(0).status(), "AgreeMax");  // warm-up
    auto start = Clock::now();
    for (uint32_t i = 0; i < steps; ++i) {
      auto v = pair[m]->AgreeMax(0);
      Die(v.status(), "AgreeMax");
    }
    per_step[m] = bench::SecondsSince(start) / steps * 1e6;
  };
  std::thread t1(member, 1);
  member(0);
  t1.join();
  return std::max(per_step[0], per_step[1]);
}

struct PerGpu {
  double images_per_second = 0, agreement_micros_per_batch = 0, wait_fraction = 0, seconds = 0;
  uint64_t batches = 0, fetched_batches = 0, broadcast_bytes = 0;
};

// Runs two Loaders (one per GPU) made by `options(member)` for warm-up + seconds, consuming on a stream each.
std::vector<PerGpu> RunPair(const std::function<LoaderOptions(int)>& options, double seconds) {
  std::vector<PerGpu> out(2);
  auto member = [&](int m) {
    auto loader = Loader::Open(options(m));
    Die(loader.status(), "Loader::Open");
    Die(cuda::CudaStatus(cudaSetDevice(m), "cudaSetDevice"), "device");
    cudaStream_t stream = nullptr;
    Die(cuda::CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream"), "stream");
    // Member 0 asks to stop once it has measured `seconds`; the Loaders carry that to member 1 (the agreement
    // step, or the leader's broadcast), so both end at the same batch and neither waits in a collective alone.
    const uint64_t warmup_batches = 20;
    uint64_t b = 0, i = 0, seen = 0;
    LoaderStats before;
    Clock::time_point start;
    bool stop_asked = false;
    while (true) {
      auto d = (*loader)->Next(stream, std::chrono::seconds(120));
      Die(d.status(), "Next");
      if (d->kind == LoaderDelivery::Kind::kStopped || d->kind == LoaderDelivery::Kind::kEndOfJob) break;
      if (d->kind != LoaderDelivery::Kind::kBatch) continue;
      if (++seen == warmup_batches) {
        cudaStreamSynchronize(stream);
        before = (*loader)->Stats();
        start = Clock::now();
      } else if (seen > warmup_batches) {
        ++b;
        i += d->batch.size();
        if (m == 0 && !stop_asked && bench::SecondsSince(start) >= seconds) {
          (*loader)->RequestStop();
          stop_asked = true;
        }
      }
    }
    cudaStreamSynchronize(stream);
    const double elapsed = bench::SecondsSince(start);
    const LoaderStats after = (*loader)->Stats();
    PerGpu& r = out[m];
    r.images_per_second = i / elapsed;
    r.seconds = elapsed;
    r.batches = b;
    r.wait_fraction = (after.wait_seconds - before.wait_seconds) / elapsed;
    r.fetched_batches = after.client.batches_received - before.client.batches_received;
    r.broadcast_bytes = after.broadcast_bytes - before.broadcast_bytes;
    if (after.agreements > before.agreements) {
      r.agreement_micros_per_batch = (after.agreement_seconds - before.agreement_seconds) /
                                     double(after.agreements - before.agreements) * 1e6;
    }
    cudaStreamDestroy(stream);
  };
  std::thread t1(member, 1);
  member(0);
  t1.join();
  return out;
}

struct Options : bench::CommonOptions {
  Options() : CommonOptions{.batch = 256, .seconds = 8, .workers = 4, .worker_threads = 2} {}
  uint32_t iterations = 100, agreement_steps = 2000;
  bench::DataSecurity security = bench::DataSecurity::kSealed;
};

// What the device-to-device parts and the end-to-end arrangements measured.
struct Figures {
  std::string device_name;
  size_t bytes = 0;
  BroadcastResult broadcast;
  double agree_us = 0;
  std::vector<PerGpu> dp, tp;
};

// 1. and 2.: NCCL broadcast against cudaMemcpyPeer, and the agreement step, on a pair of communicators.
void MeasureCollectives(const Options& o, Figures* f) {
  auto pair = JoinPair();
  f->broadcast = MeasureBroadcast(pair, f->bytes, o.iterations);
  f->agree_us = MeasureAgreementMicros(pair, o.agreement_steps);
  // Each member finalizes its communicator, which may wait for the other: both at once.
  std::thread other([&] { pair[1].reset(); });
  pair[0].reset();
  other.join();
}

// 3.: a skip-decode cluster feeding two ranks that agree on every batch, then a tensor-parallel pair.
void MeasureEndToEnd(const Options& o, Figures* f) {
  bench::ScratchDir scratch("nccl");
  const std::string& dir = scratch.path();
  auto manifest = bench::WriteNeverReadManifest(dir, 200000, "nccl_bench");
  Die(manifest.status(), "manifest");
  auto cluster = bench::StartSkipDecodeCluster(dir, o.workers, o.worker_threads, o.security);
  Die(cluster.status(), "cluster");
  auto base = [&](const std::string& job, uint32_t ranks, uint32_t rank, int device) {
    JobSpec spec{.name = job, .manifest_path = *manifest, .batch_size = o.batch, .world_size = ranks, .epochs = 1000};
    LoaderOptions l;
    l.client = bench::ClientOf(**cluster, spec, rank);
    l.client.prefetch = 16;
    l.client.credits_per_worker = 4;
    l.device = device;
    l.depth = 4;
    l.output.dtype = DType::kBFloat16;
    l.output.layout = Layout::kNHWC;
    return l;
  };
  auto agree_id = client::NewNcclIdHex();
  Die(agree_id.status(), "NCCL id");
  f->dp = RunPair([&](int m) {
    LoaderOptions l = base("dp", 2, m, m);
    l.agreement = {*agree_id, 2, static_cast<uint32_t>(m), std::chrono::seconds(120)};
    return l;
  }, o.seconds);
  auto tp_id = client::NewNcclIdHex();
  Die(tp_id.status(), "NCCL id");
  f->tp = RunPair([&](int m) {
    LoaderOptions l = base("tp", 1, 0, m);
    l.tensor_parallel = {*tp_id, 2, static_cast<uint32_t>(m), std::chrono::seconds(120)};
    return l;
  }, o.seconds);
}

void PrintEndToEnd(const Options& o, const Figures& f) {
  const std::vector<PerGpu>& dp = f.dp;
  const std::vector<PerGpu>& tp = f.tp;
  std::printf("data plane of the end-to-end runs: %s\n", bench::DataSecurityName(o.security));
  std::printf("3a. two ranks with agreement: %.0f + %.0f img/s, agreement %.1f / %.1f us per batch, waited %.1f / "
              "%.1f %%\n", dp[0].images_per_second, dp[1].images_per_second, dp[0].agreement_micros_per_batch,
              dp[1].agreement_micros_per_batch, 100 * dp[0].wait_fraction, 100 * dp[1].wait_fraction);
  std::printf("3b. tensor-parallel pair: %.0f img/s on each GPU (%.0f / %.0f); batches fetched from workers %llu, "
              "delivered to GPUs %llu (%.2fx); broadcast %.2f GB/s\n",
              std::min(tp[0].images_per_second, tp[1].images_per_second), tp[0].images_per_second,
              tp[1].images_per_second, static_cast<unsigned long long>(tp[0].fetched_batches),
              static_cast<unsigned long long>(tp[0].batches + tp[1].batches),
              tp[0].fetched_batches ? double(tp[0].batches + tp[1].batches) / tp[0].fetched_batches : 0.0,
              tp[0].seconds > 0 ? tp[0].broadcast_bytes / tp[0].seconds / 1e9 : 0.0);
}

std::string Json(const Options& o, const Figures& f) {
  const BroadcastResult& bc = f.broadcast;
  std::ostringstream j;
  j << "{\"device\": \"" << f.device_name << "\", \"batch_bytes\": " << f.bytes << ", \"nccl_broadcast_gbps\": "
    << bc.nccl_gbps << ", \"memcpy_peer_gbps\": " << bc.peer_gbps << ", \"broadcast_ratio\": " << bc.ratio
    << ", \"peer_access\": " << (bc.peer_access ? "true" : "false") << ", \"agreement_us_per_step\": " << f.agree_us
    << ", \"data_plane\": \"" << bench::DataSecurityName(o.security) << "\", \"dp\": [";
  for (int m = 0; m < 2; ++m) {
    j << (m ? ", " : "") << "{\"img_s\": " << f.dp[m].images_per_second << ", \"agreement_us_per_batch\": "
      << f.dp[m].agreement_micros_per_batch << ", \"wait_fraction\": " << f.dp[m].wait_fraction << "}";
  }
  j << "], \"tp\": [";
  for (int m = 0; m < 2; ++m) {
    j << (m ? ", " : "") << "{\"img_s\": " << f.tp[m].images_per_second << ", \"batches\": " << f.tp[m].batches
      << ", \"fetched_batches\": " << f.tp[m].fetched_batches << ", \"broadcast_bytes\": " << f.tp[m].broadcast_bytes
      << "}";
  }
  j << "]}";
  return j.str();
}

void AddFlags(FlagSet& flags, Options& o) {
  using enum bench::CommonFlag;
  bench::AddCommonFlags(flags, o, "timed seconds per end-to-end arrangement", {kBatchSize, kWorkers, kWorkerThreads});
  flags.AddUint32("iterations", &o.iterations, "broadcasts per timed repeat");
  flags.AddUint32("agreement-steps", &o.agreement_steps, "agreement steps timed");
  flags.AddEnum("data-plane", &o.security,
                {{"sealed", bench::DataSecurity::kSealed}, {"insecure", bench::DataSecurity::kInsecure}},
                "the end-to-end runs' data plane: sealed (the default) or --insecure");
}

bench::Outcome RunBench(const Options& o) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 2) {
    std::fprintf(stderr, "nccl_bench: needs two GPUs (found %d)\n", gpus);
    return {1};
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  Figures f;
  f.device_name = prop.name;
  f.bytes = size_t{o.batch} * 224 * 224 * 3 + size_t{o.batch} * 16;
  MeasureCollectives(o, &f);
  std::printf("2 x %s; one batch = %.1f MB\n", prop.name, f.bytes / 1e6);
  std::printf("1. broadcast 0 -> 1: NCCL %.1f GB/s vs cudaMemcpyPeer %.1f GB/s (peer access %s): ratio %.3f\n",
              f.broadcast.nccl_gbps, f.broadcast.peer_gbps, f.broadcast.peer_access ? "on" : "off",
              f.broadcast.ratio);
  std::printf("2. agreement step (4-byte all-reduce + host wait): %.1f us per batch\n", f.agree_us);
  MeasureEndToEnd(o, &f);
  PrintEndToEnd(o, f);
  return {0, Json(o, f)};
}

}  // namespace
}  // namespace stoker

STOKER_BENCH_MAIN("nccl_bench",
                  "Two GPUs: NCCL broadcast vs cudaMemcpyPeer, agreement cost, end to end with skip-decode workers "
                  "(samples 224x224x3).");
