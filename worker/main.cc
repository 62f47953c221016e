// stoker-worker: a CPU pod that reads, decodes, augments and batches samples for the clients that give it credit,
// under leases from the coordinator. SIGTERM drains it (finish or hand back held work, deregister, exit 0).
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/admin_server.h"
#include "base/env.h"
#include "base/flags.h"
#include "base/lifeline.h"
#include "base/local_group.h"
#include "base/logging.h"
#include "wire/frames.h"
#include "worker/metrics.h"
#include "worker/worker.h"

namespace stoker::worker {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_drain{false};
void OnTerm(int) { g_drain.store(true); }
void OnInterrupt(int) {
  if (g_drain.load()) g_stop.store(true);  // a second Ctrl-C stops at once
  g_drain.store(true);
}

struct Config {
  WorkerOptions options;
  std::string endpoint_file;
  std::string metrics_listen = ":9401";
  std::string metrics_address_file;
  int64_t lifeline_fd = -1;
};

// The keys and what security to give up (--insecure); --plain-data is accepted and ignored.
void AddSecurityFlags(FlagSet& flags, KeySources& keys, bool& plain_data) {
  flags.AddString("key-file", &keys.key_file,
                  "this worker's CURVE key pair (stoker keygen --role worker); or $STOKER_KEY with the file's text");
  flags.AddString("trust-file", &keys.trust_file, "public keys: the coordinator's; or $STOKER_TRUST");
  flags.AddBool("allow-readable-key", &keys.allow_readable_key,
                "use a key file that other users can read or write, or a trust file they can write (refused "
                "otherwise; also $STOKER_ALLOW_READABLE_KEY=1)");
  flags.AddBool("insecure", &keys.insecure,
                "no CURVE, no data tickets, no sealing: anyone who reaches the ports is trusted and traffic is clear "
                "text (trusted networks only)");
  flags.AddBool("plain-data", &plain_data,
                "retired: batches are always sealed (AES-256-GCM) unless --insecure; accepted and ignored, with a "
                "warning");
}

// The keys; and for a node-local worker (--local-dir) its group, id and socket, and a client's key accepted.
Status ResolveLocalAndKeys(WorkerOptions& o, const KeySources& keys) {
  if (o.local_dir.empty()) {
    STOKER_ASSIGN_OR_RETURN(o.security, LoadSecurity(Role::kWorker, keys));
    return Status::Ok();
  }
  STOKER_ASSIGN_OR_RETURN(o.local_group, ReadOrMakeLocalGroup(o.local_dir));
  if (o.worker_id.empty()) o.worker_id = NewPeerId("w");
  if (o.worker_id.find('/') != std::string::npos) return InvalidArgumentError("--worker-id: no '/' in an id");
  if (!IpcEndpointIn(o.listen, o.local_dir)) o.listen = "ipc://" + o.local_dir + "/" + o.worker_id + ".sock";
  if (!o.advertise_endpoint.empty() || !o.advertise_host.empty()) {
    return InvalidArgumentError("--local-dir: a node-local worker advertises its ipc:// socket, not --advertise");
  }
  STOKER_ASSIGN_OR_RETURN(o.security, LoadSecurity(Role::kWorker, keys, Role::kClient));
  return Status::Ok();
}

// The flags into a Config; Cancelled after --help.
StatusOr<Config> ParseFlags(int argc, char** argv) {
  Config c;
  WorkerOptions& o = c.options;
  std::string log_level = "info";
  std::string drain_grace = "30s", sample_delay = "0", decode_budget = "2s";
  uint32_t max_megapixels = static_cast<uint32_t>(o.jpeg_limits.max_pixels >> 20);
  uint32_t decode_memory_mib = static_cast<uint32_t>(o.jpeg_limits.max_memory_bytes >> 20);
  uint32_t max_scans = static_cast<uint32_t>(o.jpeg_limits.max_scans);
  FlagSet flags("stoker-worker [flags]",
                "Reads, decodes (libjpeg-turbo, crop region only) and augments samples into batches and streams "
                "them to training clients over ZeroMQ, under leases from the coordinator.");
  flags.AddString("coordinator", &o.coordinator, "coordinator control endpoint");
  flags.AddString("listen", &o.listen, "data endpoint to bind for clients; port 0 picks a free one");
  flags.AddString("advertise-host", &o.advertise_host,
                  "host to advertise when --listen is a wildcard (in Kubernetes: the pod IP)");
  flags.AddString("advertise", &o.advertise_endpoint,
                  "endpoint to advertise to clients instead of the one bound (something in front of this worker)");
  flags.AddUint32("threads", &o.threads, "pipeline threads (0: one per core)");
  flags.AddString("manifest-root", &o.manifest_root, "dataset root to use instead of the manifests' own");
  flags.AddString("drain-grace", &drain_grace, "on SIGTERM, time to finish held units before handing them back");
  flags.AddString("worker-id", &o.worker_id, "worker id (default: random w-…)");
  flags.AddString("local-dir", &o.local_dir,
                  "node-local worker for the training process sharing this directory (absolute; its file `group` "
                  "is made if absent): binds ipc://DIR/<worker-id>.sock unless --listen names an ipc:// socket in "
                  "DIR, sends batches unsealed over it, and is listed to that process only, which it serves first; "
                  "may run with the client's key (it then serves only that key's ranks)");
  flags.AddString("endpoint-file", &c.endpoint_file, "write the advertised data endpoint here once bound");
  flags.AddInt("lifeline-fd", &c.lifeline_fd,
               "exit at once when this inherited pipe reaches end-of-file: the process that started this one is gone (stoker's local mode; -1: none)");
  flags.AddString("metrics-listen", &c.metrics_listen,
                  "HTTP address for /metrics, /healthz, /readyz and /state (host:port, or up to 4 comma-separated, "
                  "e.g. POD_IP:PORT,127.0.0.1:PORT; port 0 picks one; empty: none)");
  flags.AddString("metrics-address-file", &c.metrics_address_file, "write the bound metrics address here");
  flags.AddString("log-level", &log_level, "debug|info|warning|error");
  flags.AddUint32("max-image-megapixels", &max_megapixels,
                  "images with more pixels (MiB) are quarantined as decode_limit, read from the header alone");
  flags.AddUint32("max-jpeg-scans", &max_scans,
                  "progressive JPEGs with more scans are quarantined as decode_limit (legitimate ones have <= 190)");
  flags.AddUint32("decode-memory-mb", &decode_memory_mib,
                  "libjpeg working memory one image may take per pipeline thread (MiB); beyond: decode_limit");
  flags.AddString("decode-cpu-budget", &decode_budget,
                  "CPU time one image may take to decode (its thread's own clock); beyond: decode_limit");
  flags.AddString("inject-sample-delay", &sample_delay, "fault injection for tests: make every sample this slow");
  flags.AddBool("inject-wrong-samples", &o.inject_wrong_samples,
                "fault injection for tests: label every batch with the wrong sample ids (a compromised worker)");
  flags.AddBool("bench-skip-decode", &o.skip_decode,
                "diagnostics only: send batches without reading or decoding samples (each image holds only its "
                "sample id), to measure the transport alone");
  storage::StorageFlags storage;
  storage.Register(flags);
  flags.AddUint("read-ahead-bytes", &o.read_ahead_bytes,
                "object storage: most bytes fetched ahead of the pipeline and not yet used (bounds its memory)");
  KeySources keys;
  bool plain_data = false;
  AddSecurityFlags(flags, keys, plain_data);
  STOKER_RETURN_IF_ERROR(flags.Parse(argc, argv));
  if (plain_data) {
    STOKER_LOG(kWarning) << "--plain-data is retired and ignored: batches are sealed (AES-256-GCM, keyed per "
                            "connection) at about the cost of a copy; --insecure turns all security off";
  }
  auto grace = ParseDurationMs(drain_grace);
  if (!grace.ok()) return grace.status().WithContext("--drain-grace");
  o.drain_grace = Millis(*grace);
  auto budget = ParseDurationMs(decode_budget);
  if (!budget.ok()) return budget.status().WithContext("--decode-cpu-budget");
  if (max_megapixels == 0 || max_scans == 0 || decode_memory_mib == 0) {
    return InvalidArgumentError("--max-image-megapixels, --max-jpeg-scans and --decode-memory-mb must be above 0");
  }
  o.jpeg_limits.max_pixels = uint64_t{max_megapixels} << 20;
  o.jpeg_limits.max_scans = static_cast<int>(max_scans);
  o.jpeg_limits.max_memory_bytes = size_t{decode_memory_mib} << 20;
  o.jpeg_limits.max_cpu_time = std::chrono::milliseconds(*budget);
  auto delay = ParseDurationMs(sample_delay);
  if (!delay.ok()) return delay.status().WithContext("--inject-sample-delay");
  o.inject_sample_delay = Millis(*delay);
  if (!SetLogLevelFromString(log_level)) return InvalidArgumentError("--log-level: " + log_level);
  STOKER_RETURN_IF_ERROR(ResolveLocalAndKeys(o, keys));
  STOKER_ASSIGN_OR_RETURN(o.storage, storage.Resolve([](const char* name) { return std::getenv(name); }));
  return c;
}

StatusOr<std::unique_ptr<AdminServer>> StartAdmin(const Config& c, Worker& worker, MetricsHub& hub) {
  if (c.metrics_listen.empty()) return std::unique_ptr<AdminServer>();
  AdminHandlers handlers;
  handlers.live = [&worker] { return worker.watch().Check(Millis(10000)); };
  handlers.ready = [&worker] {
    WorkerStats s = worker.Stats();
    if (s.draining) return UnavailableError("draining");
    return s.registered ? Status::Ok() : UnavailableError("not registered with the coordinator yet");
  };
  handlers.state = [&worker] { return worker.StateJson(); };
  return AdminServer::StartForFlags(c.metrics_listen, c.metrics_address_file, hub, std::move(handlers));
}

// Serves until drained (OK) or stopped (Cancelled).
Status Serve(const Config& c) {
  PosixEnv env;
  RealClock clock;
  zmq::context_t context(1);
  Worker worker(c.options, env, clock, context);
  SetLogComponent("worker " + worker.id());
  STOKER_ASSIGN_OR_RETURN(std::string bound, worker.Bind());
  MetricsHub hub("worker");
  const uint64_t collector = hub.Add(WorkerCollector(worker));
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<AdminServer> admin, StartAdmin(c, worker, hub));
  // Published last: whoever waits for the endpoint file (scripts, LocalCluster) sees only a worker that started.
  if (!c.endpoint_file.empty()) {
    STOKER_RETURN_IF_ERROR(env.WriteFileAtomically(c.endpoint_file, bound.data(), bound.size()));
  }
  if (c.options.skip_decode) STOKER_LOG(kWarning) << "--bench-skip-decode: batches hold sample ids, not images";
  STOKER_LOG(kInfo) << "serving batches on " << bound << " with " << worker.Stats().threads << " threads";
  STOKER_LOG(kInfo) << "object storage: S3 credentials from " << c.options.storage.credentials.source;
  Status run = worker.Run(g_stop, g_drain);
  admin.reset();  // joins the HTTP thread: nothing reads the worker past this line
  hub.Remove(collector);
  WorkerStats stats = worker.Stats();
  STOKER_LOG(kInfo) << "exiting: " << stats.samples << " samples, " << stats.batches_sent << " batches, "
                    << stats.quarantined << " quarantined";
  return run;
}

// Makes OPENCV_IO_MAX_IMAGE_PIXELS `max_pixels` for this process: returns true if it already is (or another value
// was set by whoever started the worker, which stands), else sets it and replaces the process with itself, and
// returns false only if that exec failed. Nothing has started yet when main calls this.
bool ImposeOpenCvPixelLimit(uint64_t max_pixels, char** argv) {
  if (std::getenv("OPENCV_IO_MAX_IMAGE_PIXELS") != nullptr) return true;
  ::setenv("OPENCV_IO_MAX_IMAGE_PIXELS", std::to_string(max_pixels).c_str(), 1);
  ::execv("/proc/self/exe", argv);
  return false;
}

}  // namespace
}  // namespace stoker::worker

int main(int argc, char** argv) {
  using namespace stoker;
  using namespace stoker::worker;
  SetLogComponent("worker");
  auto config = ParseFlags(argc, argv);
  if (config.status().code() == StatusCode::kCancelled) return 0;  // --help
  if (!config.ok()) {
    std::fprintf(stderr, "stoker-worker: %s\n", config.status().ToString().c_str());
    return 2;
  }
  // The same bound for OpenCV's decoders (PNG and other formats) as the JPEG decoder has. OpenCV reads
  // OPENCV_IO_MAX_IMAGE_PIXELS once, when its library loads, before main: setting it here would change nothing (a
  // 200-byte PBM claiming 716 MP made it allocate 2 GB). So the worker sets it and starts itself again.
  if (!ImposeOpenCvPixelLimit(config->options.jpeg_limits.max_pixels, argv)) {
    STOKER_LOG(kWarning) << "cannot restart with OPENCV_IO_MAX_IMAGE_PIXELS set: PNG and other non-JPEG images are "
                            "bounded only by OpenCV's default (1 GP)";
  }
  if (config->lifeline_fd >= 0) {  // after the exec above, which keeps the descriptor
    if (Status watched = WatchLifeline(static_cast<int>(config->lifeline_fd)); !watched.ok()) {
      std::fprintf(stderr, "stoker-worker: %s\n", watched.ToString().c_str());
      return 2;
    }
  }
  std::signal(SIGTERM, OnTerm);
  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGPIPE, SIG_IGN);
  Status served = Serve(*config);
  if (served.code() == StatusCode::kCancelled) return 130;
  if (!served.ok()) {
    STOKER_LOG(kError) << served.ToString();
    return 1;
  }
  return 0;
}
