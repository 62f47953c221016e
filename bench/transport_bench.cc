// Worker -> client throughput on loopback against raw ZeroMQ moving messages of the same size, in the same run.
//
//   transport_bench [--batch-size 64] [--seconds 8] [--workers 1] [--worker-threads 2] [--prefetch 16]
//
// Baseline: a sender process pushes two-frame messages (a 64-byte header + a payload of exactly one batch, sent
// zero-copy from one buffer) over tcp://127.0.0.1 to a receiver in this process, which counts bytes.
// stoker: a real coordinator and worker process (--bench-skip-decode: batches are filled with a pattern instead of
// decoded, so only the transport and the control plane are measured) and the real client in this process,
// consuming and releasing each batch. The ratio stoker / raw is the figure (goal >= 0.8), and sealed (the default:
// batches sealed with AES-256-GCM) / --insecure (goal >= 0.9).
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "base/env.h"
#include "bench/bench_main.h"
#include "stoker/client.h"
#include "base/subprocess.h"
#include "bench/consume_rate.h"
#include "tools/local_cluster.h"

namespace stoker {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void NoFree(void*, void*) {}

// The baseline's sender: pushes messages until killed.
int RawSender(const std::string& endpoint, size_t bytes) {
  zmq::context_t context(1);
  zmq::socket_t push(context, zmq::socket_type::push);
  push.set(zmq::sockopt::sndhwm, 4);  // bounded, like credits
  push.set(zmq::sockopt::linger, 0);
  push.connect(endpoint);
  std::vector<uint8_t> payload(bytes, 0x5a);
  char header[64] = {0};
  while (true) {
    push.send(zmq::buffer(header, sizeof(header)), zmq::send_flags::sndmore);
    zmq::message_t body(payload.data(), payload.size(), &NoFree, nullptr);
    push.send(body, zmq::send_flags::none);
  }
}

struct Rate {
  double bytes_per_second = 0;
  double messages_per_second = 0;
};

Rate MeasureRaw(size_t bytes, double seconds) {
  zmq::context_t context(1);
  zmq::socket_t pull(context, zmq::socket_type::pull);
  pull.set(zmq::sockopt::rcvhwm, 4);
  pull.set(zmq::sockopt::linger, 0);
  pull.bind("tcp://127.0.0.1:*");
  std::string endpoint = pull.get(zmq::sockopt::last_endpoint);
  auto sender = Subprocess::Start({ExecutableDirectory() + "/transport_bench", "--raw-sender", endpoint, "--bytes",
                                   std::to_string(bytes)});
  if (!sender.ok()) {
    std::fprintf(stderr, "%s\n", sender.status().ToString().c_str());
    return {};
  }
  auto receive_for = [&](double s) {
    uint64_t total = 0, messages = 0;
    auto start = Clock::now();
    while (SecondsSince(start) < s) {
      zmq::message_t header, body;
      if (!pull.recv(header)) continue;
      if (!pull.recv(body)) continue;
      total += body.size();
      ++messages;
    }
    double elapsed = SecondsSince(start);
    return Rate{total / elapsed, messages / elapsed};
  };
  receive_for(1.0);  // warm-up: connection, buffers
  Rate r = receive_for(seconds);
  sender->Kill();
  return r;
}

struct Options : bench::CommonOptions {
  Options() : CommonOptions{.batch = 64, .seconds = 8, .workers = 1, .worker_threads = 2} {}
  uint32_t prefetch = 16, credits = 4;
  std::string raw_sender;
  uint64_t bytes = 0;
};

// One stoker configuration: a skip-decode cluster in `dir` secured as `security` says, the client in this process.
Rate MeasureStoker(const std::string& dir, const Options& o, bench::DataSecurity security) {
  PosixEnv env;  // the workers never read a sample of the manifest
  if (!env.CreateDirectories(dir).ok()) return {};
  auto rate = [&]() -> StatusOr<bench::Rate> {
    STOKER_ASSIGN_OR_RETURN(std::string manifest, bench::WriteNeverReadManifest(dir, 100000, "transport"));
    STOKER_ASSIGN_OR_RETURN(auto cluster, bench::StartSkipDecodeCluster(dir, o.workers, o.worker_threads, security));
    JobSpec spec{.name = "transport", .manifest_path = manifest, .batch_size = o.batch, .epochs = 1000};
    return bench::ConsumeFor(*cluster, spec, o.prefetch, o.credits, 1.0, o.seconds);
  }();
  if (!rate.ok()) {
    std::fprintf(stderr, "%s\n", rate.status().ToString().c_str());
    return {};
  }
  return Rate{rate->bytes_per_second, rate->batches_per_second};
}

// The figures of one run, against the raw baseline and against each other.
struct Figures {
  size_t batch_bytes = 0;
  Rate raw, sealed, insecure;
  static double Over(const Rate& a, const Rate& b) {
    return b.bytes_per_second > 0 ? a.bytes_per_second / b.bytes_per_second : 0;
  }
};

void Print(const Options& o, const Figures& f) {
  std::printf("message: one batch of %u x 224x224x3 = %.1f MB\n", o.batch, f.batch_bytes / 1e6);
  std::printf("%-46s %10s %10s %8s\n", "loopback, one receiver", "GB/s", "msgs/s", "ratio");
  std::printf("%-46s %10.2f %10.1f %8s\n", "baseline: raw ZeroMQ PUSH->PULL, zero-copy send",
              f.raw.bytes_per_second / 1e9, f.raw.messages_per_second, "1.00");
  const std::pair<const char*, const Rate*> rows[] = {{"stoker: worker -> client, sealed (the default)", &f.sealed},
                                                       {"stoker: worker -> client, --insecure", &f.insecure}};
  for (const auto& [name, rate] : rows) {
    std::printf("%-46s %10.2f %10.1f %8.2f\n", name, rate->bytes_per_second / 1e9, rate->messages_per_second,
                Figures::Over(*rate, f.raw));
  }
  std::printf("sealed / insecure: %.2f (goal >= 0.9)\n", Figures::Over(f.sealed, f.insecure));
  std::printf("(stoker images/s at that rate: %.0f)\n", f.sealed.messages_per_second * o.batch);
}

std::string Json(const Options& o, const Figures& f) {
  std::ostringstream j;
  j << "{\"batch_size\": " << o.batch << ", \"message_bytes\": " << f.batch_bytes
    << ", \"raw_gbps\": " << f.raw.bytes_per_second / 1e9 << ", \"stoker_gbps\": " << f.sealed.bytes_per_second / 1e9
    << ", \"ratio\": " << Figures::Over(f.sealed, f.raw) << ", \"insecure_gbps\": " << f.insecure.bytes_per_second / 1e9
    << ", \"insecure_ratio\": " << Figures::Over(f.insecure, f.raw)
    << ", \"sealed_over_insecure\": " << Figures::Over(f.sealed, f.insecure)
    << ", \"stoker_images_per_second\": " << f.sealed.messages_per_second * o.batch << ", \"workers\": " << o.workers
    << ", \"worker_threads\": " << o.worker_threads << "}";
  return j.str();
}

void AddFlags(FlagSet& flags, Options& o) {
  using enum bench::CommonFlag;
  bench::AddCommonFlags(flags, o, "timed seconds per measurement", {kBatchSize, kWorkers, kWorkerThreads});
  flags.AddUint32("prefetch", &o.prefetch, "client window");
  flags.AddUint32("credits", &o.credits, "client credits per worker");
  flags.AddString("raw-sender", &o.raw_sender, "(internal) run as the baseline's sender, pushing to this endpoint");
  flags.AddUint("bytes", &o.bytes, "(internal) the baseline sender's payload size");
}

bench::Outcome RunBench(const Options& o) {
  if (!o.raw_sender.empty()) return {RawSender(o.raw_sender, o.bytes)};

  bench::ScratchDir scratch("transport");
  const std::string& dir = scratch.path();
  Figures f;
  f.batch_bytes = size_t{o.batch} * 224 * 224 * 3;
  f.raw = MeasureRaw(f.batch_bytes, o.seconds);
  f.sealed = MeasureStoker(dir + "/sealed", o, bench::DataSecurity::kSealed);
  f.insecure = MeasureStoker(dir + "/plain", o, bench::DataSecurity::kInsecure);
  Print(o, f);
  return {0, Json(o, f)};
}

}  // namespace
}  // namespace stoker

STOKER_BENCH_MAIN("transport_bench",
                  "Worker -> client throughput on loopback vs raw ZeroMQ messages of the same size, same run. The "
                  "stoker path's worker processes skip decoding: their threads only fill 224x224x3-byte samples.");
