// Worker -> client throughput on loopback against raw ZeroMQ moving messages of the same size, in the same run.
//
//   transport_bench [--batch-size 64] [--seconds 8] [--workers 1] [--worker-threads 2] [--prefetch 16]
//
// Baseline: a sender process pushes two-frame messages (a 64-byte header + a payload of exactly one batch, sent
// zero-copy from one buffer) over tcp://127.0.0.1 to a receiver in this process, which counts bytes.
// stoker: a real coordinator and worker process (--bench-skip-decode: batches are filled with a pattern instead of
// decoded, so only the transport and the control plane are measured) and the real client in this process,
// consuming and releasing each batch. The ratio stoker / raw is the figure (goal >= 0.8).
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>
#include <zmq.hpp>

#include "base/flags.h"
#include "dataset/manifest.h"
#include "stoker/client.h"
#include "tools/subprocess.h"
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
  auto sender = tools::Subprocess::Start({tools::ExecutableDirectory() + "/transport_bench", "--raw-sender", endpoint, "--bytes",
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

Rate MeasureStoker(const std::string& dir, uint32_t batch, double seconds, uint32_t workers, uint32_t threads,
                   uint32_t prefetch, uint32_t credits, bench::DataSecurity security) {
  // A manifest of samples that are never read (the workers skip decoding).
  PosixEnv env;
  if (!env.CreateDirectories(dir).ok()) return {};
  ManifestWriter writer(dir, SourceKind::kTarShards);
  uint32_t shard = writer.AddShard("never-read.tar", uint64_t{1} << 40, 0);
  for (uint32_t i = 0; i < 100000; ++i) writer.AddSample(shard, 512ull * i, 1, i % 1000, ImageFormat::kJpeg, "s");
  std::string manifest = dir + "/transport.stoker";
  if (!writer.Write(env, manifest, "transport_bench").ok()) return {};
  tools::LocalClusterOptions options{dir, "", true, {"--log-level", "warning"}};
  bench::ApplyDataSecurity(security, options);
  tools::LocalCluster cluster(options);
  Status started = cluster.StartCoordinator();
  for (uint32_t i = 0; i < workers && started.ok(); ++i) {
    started = cluster.StartWorker(threads, {"--bench-skip-decode", "--log-level", "warning"}).status();
  }
  if (!started.ok()) {
    std::fprintf(stderr, "%s\n", started.ToString().c_str());
    return {};
  }
  JobSpec spec;
  spec.name = "transport";
  spec.manifest_path = manifest;
  spec.batch_size = batch;
  spec.epochs = 1000;
  auto rate = bench::ConsumeFor(cluster, spec, prefetch, credits, 1.0, seconds);
  if (!rate.ok()) {
    std::fprintf(stderr, "%s\n", rate.status().ToString().c_str());
    return {};
  }
  return Rate{rate->bytes_per_second, rate->batches_per_second};
}

int Main(int argc, char** argv) {
  uint32_t batch = 64, workers = 1, threads = 2, prefetch = 16, credits = 4;
  double seconds = 8;
  std::string raw_sender, json;
  uint64_t bytes = 0;
  FlagSet flags("transport_bench [flags]",
                "Worker -> client throughput on loopback vs raw ZeroMQ messages of the same size, same run.");
  flags.AddUint32("batch-size", &batch, "samples per batch (224x224x3 bytes each)");
  flags.AddDouble("seconds", &seconds, "timed seconds per measurement");
  flags.AddUint32("workers", &workers, "worker processes on the stoker path");
  flags.AddUint32("worker-threads", &threads, "threads per worker (they only fill buffers)");
  flags.AddUint32("prefetch", &prefetch, "client window");
  flags.AddUint32("credits", &credits, "client credits per worker");
  flags.AddString("json", &json, "write the figures here");
  flags.AddString("raw-sender", &raw_sender, "(internal) run as the baseline's sender, pushing to this endpoint");
  flags.AddUint("bytes", &bytes, "(internal) the baseline sender's payload size");
  if (auto exit_code = flags.ParseOrExitCode(argc, argv)) return *exit_code;
  if (!raw_sender.empty()) return RawSender(raw_sender, bytes);

  const size_t batch_bytes = size_t{batch} * 224 * 224 * 3;
  bench::ScratchDir scratch("transport");
  const std::string& dir = scratch.path();
  Rate raw = MeasureRaw(batch_bytes, seconds);
  Rate ours = MeasureStoker(dir + "/curve", batch, seconds, workers, threads, prefetch, credits,
                            bench::DataSecurity::kCurve);
  Rate tickets = MeasureStoker(dir + "/tickets", batch, seconds, workers, threads, prefetch, credits,
                               bench::DataSecurity::kPlainData);
  Rate plain = MeasureStoker(dir + "/plain", batch, seconds, workers, threads, prefetch, credits,
                             bench::DataSecurity::kInsecure);
  auto over = [](const Rate& a, const Rate& b) { return b.bytes_per_second > 0 ? a.bytes_per_second / b.bytes_per_second : 0; };
  double ratio = over(ours, raw);
  double tickets_ratio = over(tickets, raw);
  double plain_ratio = over(plain, raw);
  double curve_cost = over(ours, plain);
  std::printf("message: one batch of %u x 224x224x3 = %.1f MB\n", batch, batch_bytes / 1e6);
  std::printf("%-46s %10s %10s %8s\n", "loopback, one receiver", "GB/s", "msgs/s", "ratio");
  std::printf("%-46s %10.2f %10.1f %8s\n", "baseline: raw ZeroMQ PUSH->PULL, zero-copy send", raw.bytes_per_second / 1e9,
              raw.messages_per_second, "1.00");
  std::printf("%-46s %10.2f %10.1f %8.2f\n", "stoker: worker -> client, CURVE (the default)",
              ours.bytes_per_second / 1e9, ours.messages_per_second, ratio);
  std::printf("%-46s %10.2f %10.1f %8.2f\n", "stoker: worker -> client, --plain-data",
              tickets.bytes_per_second / 1e9, tickets.messages_per_second, tickets_ratio);
  std::printf("%-46s %10.2f %10.1f %8.2f\n", "stoker: worker -> client, --insecure", plain.bytes_per_second / 1e9,
              plain.messages_per_second, plain_ratio);
  std::printf("CURVE / insecure: %.2f, --plain-data / insecure: %.2f\n", curve_cost, over(tickets, plain));
  std::printf("(stoker images/s at that rate: %.0f)\n", ours.messages_per_second * batch);
  if (!json.empty()) {
    std::ofstream(json) << "{\"batch_size\": " << batch << ", \"message_bytes\": " << batch_bytes
                        << ", \"raw_gbps\": " << raw.bytes_per_second / 1e9
                        << ", \"stoker_gbps\": " << ours.bytes_per_second / 1e9 << ", \"ratio\": " << ratio
                        << ", \"insecure_gbps\": " << plain.bytes_per_second / 1e9
                        << ", \"insecure_ratio\": " << plain_ratio << ", \"curve_over_insecure\": " << curve_cost
                        << ", \"plain_data_gbps\": " << tickets.bytes_per_second / 1e9
                        << ", \"plain_data_ratio\": " << tickets_ratio
                        << ", \"stoker_images_per_second\": " << ours.messages_per_second * batch
                        << ", \"workers\": " << workers << ", \"worker_threads\": " << threads << "}\n";
  }
  return 0;
}

}  // namespace
}  // namespace stoker

int main(int argc, char** argv) { return stoker::Main(argc, argv); }
