// stoker-coordinator: plans every job's epochs and leases the work to workers. See docs/design.md.
#include <csignal>
#include <cstdio>

#include "common/admin_server.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/env.h"
#include "coordinator/impl.h"
#include "coordinator/journal.h"
#include "coordinator/metrics.h"
#include "coordinator/service.h"

namespace {
std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }
}  // namespace

int main(int argc, char** argv) {
  using namespace stoker;
  using namespace stoker::coordinator;
  SetLogComponent("coordinator");
  ServiceOptions service;
  CoordinatorOptions options;
  std::string endpoint_file;
  std::string log_level = "info";
  std::string heartbeat = "250ms", lease_ttl = "1500ms", client_timeout = "10s", ack_timeout = "5s";
  std::string reconcile = "1500ms", journal_path, crash, retention = "1h";
  uint64_t compact_bytes = 64ull << 20;
  std::string metrics_listen = ":9400", metrics_address_file;
  uint32_t max_workers = 0;
  FlagSet flags("stoker-coordinator [flags]",
                "Plans each job's epochs (which samples every rank gets, in which batch) and leases the work to "
                "workers; clients register ranks and acknowledge what they received.");
  flags.AddString("listen", &service.listen, "control endpoint to bind (ZeroMQ ROUTER); port 0 picks a free one");
  flags.AddString("endpoint-file", &endpoint_file, "write the bound endpoint to this file once listening");
  flags.AddString("heartbeat-interval", &heartbeat, "how often workers and clients must report");
  flags.AddString("lease-ttl", &lease_ttl, "a lease (and a worker) not renewed for this long is re-leased");
  flags.AddString("client-timeout", &client_timeout, "a client silent for this long frees its rank");
  flags.AddString("ack-timeout", &ack_timeout, "a unit sent but not acknowledged for this long is re-leased");
  flags.AddString("manifest-root", &options.manifest_root, "dataset root to use instead of the manifests' own");
  flags.AddString("journal", &journal_path,
                  "journal file (on a persistent volume): jobs, commits and membership survive a restart. Empty: "
                  "nothing survives (a warning says so)");
  flags.AddString("reconcile-window", &reconcile, "after a restart, time for workers to report the leases they hold");
  flags.AddString("inject-crash", &crash, "fault injection for tests: synced|replied|torn[:N]");
  flags.AddString("job-retention", &retention, "a job no client has held for this long is forgotten");
  flags.AddUint("journal-compact-bytes", &compact_bytes, "rewrite the journal as a snapshot beyond this size");
  flags.AddString("metrics-listen", &metrics_listen,
                  "HTTP address for /metrics, /healthz, /readyz and /state (host:port; port 0 picks one; empty: "
                  "none)");
  flags.AddString("metrics-address-file", &metrics_address_file, "write the bound metrics address here");
  flags.AddUint32("max-workers", &max_workers,
                  "the autoscaler's ceiling on workers, exported for the 'workers saturated' alert (0: unknown)");
  flags.AddString("log-level", &log_level, "debug|info|warning|error");
  Status parsed = flags.Parse(argc, argv);
  if (parsed.code() == StatusCode::kCancelled) return 0;
  auto duration = [&](const std::string& name, const std::string& text, Duration* out) {
    auto ms = ParseDurationMs(text);
    if (!ms.ok() || *ms <= 0) {
      parsed = InvalidArgumentError("--" + name + ": '" + text + "' is not a positive duration");
      return;
    }
    *out = Millis(*ms);
  };
  if (parsed.ok()) duration("heartbeat-interval", heartbeat, &options.heartbeat_interval);
  if (parsed.ok()) duration("lease-ttl", lease_ttl, &options.lease_ttl);
  if (parsed.ok()) duration("client-timeout", client_timeout, &options.client_timeout);
  if (parsed.ok()) duration("ack-timeout", ack_timeout, &options.ack_timeout);
  if (parsed.ok()) duration("reconcile-window", reconcile, &options.reconcile_window);
  if (parsed.ok()) duration("job-retention", retention, &options.job_retention);
  if (parsed.ok()) {
    auto crash_point = CrashPoint::Parse(crash);
    if (crash_point.ok()) service.crash = *crash_point; else parsed = crash_point.status();
  }
  if (parsed.ok() && !SetLogLevelFromString(log_level)) parsed = InvalidArgumentError("--log-level: " + log_level);
  if (!parsed.ok()) {
    std::fprintf(stderr, "stoker-coordinator: %s\n", parsed.ToString().c_str());
    return 2;
  }

  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  RealClock clock;
  PosixEnv env;
  // The admin port comes up first, so probes answer (not ready) while a long journal replays.
  MetricsHub hub("coordinator");
  std::atomic<bool> ready{false};
  std::atomic<const CoordinatorImpl*> serving{nullptr};
  std::atomic<const LoopWatch*> watch{nullptr};
  std::unique_ptr<AdminServer> admin;
  if (!metrics_listen.empty()) {
    AdminHandlers handlers;
    handlers.live = [&] { return watch.load() ? watch.load()->Check(Millis(10000)) : Status::Ok(); };
    handlers.ready = [&] { return ready.load() ? Status::Ok() : UnavailableError("replaying the journal"); };
    handlers.state = [&] {
      const CoordinatorImpl* impl = serving.load();
      return impl ? impl->StateJson() : std::string("{\"component\": \"coordinator\", \"starting\": true}");
    };
    auto started = AdminServer::StartForFlags(metrics_listen, metrics_address_file, hub, std::move(handlers));
    if (!started.ok()) {
      STOKER_LOG(kError) << started.status().ToString();
      return 1;
    }
    admin = std::move(*started);
  }
  std::unique_ptr<Journal> journal;
  std::vector<Update> replayed;
  if (journal_path.empty()) {
    STOKER_LOG(kWarning) << "no --journal: a restart of this coordinator loses every job's progress";
  } else {
    JournalReplay replay;
    JournalOptions journal_options;
    journal_options.compact_threshold_bytes = compact_bytes;
    auto opened = Journal::Open(env, journal_path, journal_options,
                                [&](const Update& u) { replayed.push_back(u); }, &replay);
    if (!opened.ok()) {
      STOKER_LOG(kError) << "cannot start: " << opened.status().ToString();
      return 1;
    }
    journal = std::move(*opened);
    STOKER_LOG(kInfo) << "journal " << journal_path << ": replayed " << replay.records << " records (" << replay.bytes
                      << " bytes)" << (replay.torn_bytes ? ", dropped a torn tail" : "");
  }
  CoordinatorImpl impl(options, clock, journal.get());
  for (const Update& u : replayed) impl.Restore(u);
  impl.FinishRestore();
  zmq::context_t context(1);
  CoordinatorService server(impl, journal.get(), context, service);
  auto bound = server.Bind();
  if (!bound.ok()) {
    STOKER_LOG(kError) << bound.status().ToString();
    return 1;
  }
  if (!endpoint_file.empty()) {
    Status written = env.WriteFileAtomically(endpoint_file, bound->data(), bound->size());
    if (!written.ok()) {
      STOKER_LOG(kError) << written.ToString();
      return 1;
    }
  }
  STOKER_LOG(kInfo) << "listening on " << *bound;
  uint64_t collector = hub.Add(CoordinatorCollector(impl, server, journal.get(), max_workers));
  serving.store(&impl);
  watch.store(&server.watch());
  ready.store(true);
  Status run = server.Run(g_stop);
  admin.reset();  // joins the HTTP thread: no handler can be reading the Impl or the Service past this line
  hub.Remove(collector);
  if (!run.ok()) {
    STOKER_LOG(kError) << run.ToString();
    return 1;
  }
  STOKER_LOG(kInfo) << "stopped";
  return 0;
}
