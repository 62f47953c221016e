// stoker-worker: a CPU pod that reads, decodes, augments and batches samples for the clients that give it credit,
// under leases from the coordinator. SIGTERM drains it (finish or hand back held work, deregister, exit 0).
#include <csignal>
#include <cstdlib>
#include <cstdio>

#include "common/admin_server.h"
#include "common/env.h"
#include "common/flags.h"
#include "common/logging.h"
#include "worker/metrics.h"
#include "worker/worker.h"

namespace {
std::atomic<bool> g_stop{false};
std::atomic<bool> g_drain{false};
void OnTerm(int) { g_drain.store(true); }
void OnInterrupt(int) {
  if (g_drain.load()) g_stop.store(true);  // a second Ctrl-C stops at once
  g_drain.store(true);
}
}  // namespace

int main(int argc, char** argv) {
  using namespace stoker;
  SetLogComponent("worker");
  WorkerOptions options;
  std::string endpoint_file;
  std::string log_level = "info";
  std::string drain_grace = "30s", sample_delay = "0";
  std::string metrics_listen = ":9401", metrics_address_file;
  FlagSet flags("stoker-worker [flags]",
                "Reads, decodes (libjpeg-turbo, crop region only) and augments samples into batches and streams "
                "them to training clients over ZeroMQ, under leases from the coordinator.");
  flags.AddString("coordinator", &options.coordinator, "coordinator control endpoint");
  flags.AddString("listen", &options.listen, "data endpoint to bind for clients; port 0 picks a free one");
  flags.AddString("advertise-host", &options.advertise_host,
                  "host to advertise when --listen is a wildcard (in Kubernetes: the pod IP)");
  flags.AddString("advertise", &options.advertise_endpoint,
                  "endpoint to advertise to clients instead of the one bound (something in front of this worker)");
  flags.AddUint32("threads", &options.threads, "pipeline threads (0: one per core)");
  flags.AddString("manifest-root", &options.manifest_root, "dataset root to use instead of the manifests' own");
  flags.AddString("drain-grace", &drain_grace, "on SIGTERM, time to finish held units before handing them back");
  flags.AddString("worker-id", &options.worker_id, "worker id (default: random w-…)");
  flags.AddString("endpoint-file", &endpoint_file, "write the advertised data endpoint here once bound");
  flags.AddString("metrics-listen", &metrics_listen,
                  "HTTP address for /metrics, /healthz, /readyz and /state (host:port; port 0 picks one; empty: "
                  "none)");
  flags.AddString("metrics-address-file", &metrics_address_file, "write the bound metrics address here");
  flags.AddString("log-level", &log_level, "debug|info|warning|error");
  flags.AddString("inject-sample-delay", &sample_delay, "fault injection for tests: make every sample this slow");
  flags.AddBool("bench-skip-decode", &options.skip_decode,
                "diagnostics only: send batches without reading or decoding samples (each image holds only its "
                "sample id), to measure the transport alone");
  Status parsed = flags.Parse(argc, argv);
  if (parsed.code() == StatusCode::kCancelled) return 0;
  if (parsed.ok()) {
    auto ms = ParseDurationMs(drain_grace);
    if (ms.ok()) options.drain_grace = Millis(*ms); else parsed = ms.status().WithContext("--drain-grace");
  }
  if (parsed.ok()) {
    auto ms = ParseDurationMs(sample_delay);
    if (ms.ok()) options.inject_sample_delay = Millis(*ms); else parsed = ms.status().WithContext("--inject-sample-delay");
  }
  if (parsed.ok() && !SetLogLevelFromString(log_level)) parsed = InvalidArgumentError("--log-level: " + log_level);
  if (!parsed.ok()) {
    std::fprintf(stderr, "stoker-worker: %s\n", parsed.ToString().c_str());
    return 2;
  }
  // The same bound for OpenCV's decoders (PNG and other formats) as the JPEG decoder has (64 MP).
  ::setenv("OPENCV_IO_MAX_IMAGE_PIXELS", "67108864", /*overwrite=*/0);
  std::signal(SIGTERM, OnTerm);
  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGPIPE, SIG_IGN);

  PosixEnv env;
  RealClock clock;
  zmq::context_t context(1);
  Worker worker(options, env, clock, context);
  SetLogComponent("worker " + worker.id());
  auto bound = worker.Bind();
  if (!bound.ok()) {
    STOKER_LOG(kError) << bound.status().ToString();
    return 1;
  }
  MetricsHub hub("worker");
  uint64_t collector = hub.Add(WorkerCollector(worker));
  std::unique_ptr<AdminServer> admin;
  if (!metrics_listen.empty()) {
    AdminHandlers handlers;
    handlers.live = [&worker] { return worker.watch().Check(Millis(10000)); };
    handlers.ready = [&worker] {
      WorkerStats s = worker.Stats();
      if (s.draining) return UnavailableError("draining");
      return s.registered ? Status::Ok() : UnavailableError("not registered with the coordinator yet");
    };
    handlers.state = [&worker] { return worker.StateJson(); };
    auto started = AdminServer::StartForFlags(metrics_listen, metrics_address_file, hub, std::move(handlers));
    if (!started.ok()) {
      STOKER_LOG(kError) << started.status().ToString();
      return 1;
    }
    admin = std::move(*started);
  }
  // Published last: whoever waits for the endpoint file (scripts, LocalCluster) sees only a worker that started.
  if (!endpoint_file.empty()) {
    Status written = env.WriteFileAtomically(endpoint_file, bound->data(), bound->size());
    if (!written.ok()) {
      STOKER_LOG(kError) << written.ToString();
      return 1;
    }
  }
  if (options.skip_decode) STOKER_LOG(kWarning) << "--bench-skip-decode: batches hold sample ids, not images";
  STOKER_LOG(kInfo) << "serving batches on " << *bound << " with " << worker.Stats().threads << " threads";
  Status run = worker.Run(g_stop, g_drain);
  admin.reset();  // joins the HTTP thread: nothing reads the worker past this line
  hub.Remove(collector);
  WorkerStats stats = worker.Stats();
  STOKER_LOG(kInfo) << "exiting: " << stats.samples << " samples, " << stats.batches_sent << " batches, "
                    << stats.quarantined << " quarantined";
  if (run.code() == StatusCode::kCancelled) return 130;
  if (!run.ok()) {
    STOKER_LOG(kError) << run.ToString();
    return 1;
  }
  return 0;
}
