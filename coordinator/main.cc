// stoker-coordinator: plans every job's epochs and leases the work to workers. See docs/design.md.
//
// Start-up order: flags, then the admin port (so probes answer "not ready" while a long journal replays), then the
// journal's replay into the Impl, then the control socket; the endpoint file is written last.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <tuple>

#include "base/admin_server.h"
#include "auth/curve.h"
#include "base/env.h"
#include "base/flags.h"
#include "base/lifeline.h"
#include "base/logging.h"
#include "coordinator/impl.h"
#include "auth/data_tickets.h"
#include "coordinator/journal.h"
#include "coordinator/metrics.h"
#include "coordinator/service.h"

namespace stoker::coordinator {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

struct Config {
  ServiceOptions service;
  CoordinatorOptions options;
  std::string endpoint_file;
  std::string journal_path;
  uint64_t compact_bytes = 64ull << 20;
  std::string metrics_listen = ":9400";
  std::string metrics_address_file;
  uint32_t max_workers = 0;
  KeySources keys;
  int64_t lifeline_fd = -1;
};

// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> SplitCommas(const std::string& list) {
  std::vector<std::string> out;
  for (size_t begin = 0; begin < list.size();) {
    const size_t comma = std::min(list.find(',', begin), list.size());
    if (comma > begin) out.push_back(list.substr(begin, comma - begin));
    begin = comma + 1;
  }
  return out;
}

// The flags that are lists: --manifest-dirs and the teams' policies.
struct Lists {
  std::string manifest_dirs, team_weights, team_priorities, team_max_workers, team_min_workers;
};
Status ParseLists(const Lists& lists, CoordinatorOptions* options) {
  options->manifest_dirs = SplitCommas(lists.manifest_dirs);
  STOKER_ASSIGN_OR_RETURN(options->teams,
                          ParseTeamPolicies(lists.team_weights, lists.team_priorities, lists.team_max_workers,
                                            lists.team_min_workers));
  return Status::Ok();
}

// The teams' policies (fair_share.h). A team is the name of its client key (client:team-a is team-a).
void AddTeamFlags(FlagSet& flags, Lists& lists) {
  for (auto [name, target, help] : {
           std::tuple{"team-weights", &lists.team_weights,
                      "each team's weight in the pool's fair shares; a team not named has weight 1"},
           std::tuple{"team-priorities", &lists.team_priorities,
                      "each team's priority (-1000 to 1000): a waiting team of a higher priority takes each place on "
                      "a worker as the unit in it ends; a team not named has priority 0"},
           std::tuple{"team-max-workers", &lists.team_max_workers,
                      "each team's cap: at most N workers' worth of the pool; a team not named has no cap"},
           std::tuple{"team-min-workers", &lists.team_min_workers,
                      "each team's guarantee: at least N workers' worth of the pool while it waits, before any "
                      "priority; a team not named has none"}}) {
    flags.AddString(name, target, std::string(help) + " (team=value,...; a team is the name of its client key)");
  }
}

// What peers can make the coordinator hold (CoordinatorOptions' caps).
void AddCapFlags(FlagSet& flags, CoordinatorOptions& o) {
  flags.AddUint32("max-jobs", &o.max_jobs, "jobs held at once (more are refused)");
  flags.AddUint32("max-jobs-per-team", &o.max_jobs_per_team,
                  "jobs one team (the name of its client key) may hold at once, so that no team takes every slot "
                  "(0: half of --max-jobs)");
  flags.AddUint32("max-ranks-per-job", &o.max_ranks_per_job, "ranks a job may have");
  flags.AddUint32("max-registered-workers", &o.max_registered_workers,
                  "workers registered at once (the pool's; node-local workers have as many places again)");
  flags.AddUint32("max-worker-registrations-per-second", &o.worker_registrations_per_second,
                  "new worker ids one key may register a second, 4 seconds' worth at once; more are asked to try "
                  "again (0: no limit)");
  flags.AddUint32("max-window", &o.max_window, "batches a client's prefetch window may hold");
  flags.AddUint32("max-quarantine-reports", &o.max_quarantine_reports,
                  "quarantine reports ((epoch, sample) pairs) kept over all jobs; more are counted, not kept");
}

// The flags into a Config; Cancelled after --help.
StatusOr<Config> ParseFlags(int argc, char** argv) {
  Config c;
  std::string log_level = "info";
  std::string heartbeat = "250ms", lease_ttl = "1500ms", client_timeout = "10s", ack_timeout = "5s";
  std::string reconcile = "1500ms", crash, retention = "1h";
  Lists lists;
  FlagSet flags("stoker-coordinator [flags]",
                "Plans each job's epochs (which samples every rank gets, in which batch) and leases the work to "
                "workers; clients register ranks and acknowledge what they received.");
  flags.AddString("listen", &c.service.listen, "control endpoint to bind (ZeroMQ ROUTER); port 0 picks a free one");
  flags.AddString("endpoint-file", &c.endpoint_file, "write the bound endpoint to this file once listening");
  flags.AddInt("lifeline-fd", &c.lifeline_fd,
               "exit at once when this inherited pipe reaches end-of-file: the process that started this one is gone (stoker's local mode; -1: none)");
  flags.AddString("heartbeat-interval", &heartbeat, "how often workers and clients must report");
  flags.AddString("lease-ttl", &lease_ttl, "a lease (and a worker) not renewed for this long is re-leased");
  flags.AddString("client-timeout", &client_timeout, "a client silent for this long frees its rank");
  flags.AddString("ack-timeout", &ack_timeout, "a unit sent but not acknowledged for this long is re-leased");
  flags.AddString("manifest-root", &c.options.manifest_root, "dataset root to use instead of the manifests' own");
  flags.AddString("manifest-dirs", &lists.manifest_dirs,
                  "comma-separated directories the manifests clients name must lie in (links and .. resolved); "
                  "empty: any regular file the coordinator can read");
  flags.AddString("journal", &c.journal_path,
                  "journal file (on a persistent volume): jobs, commits and membership survive a restart. Empty: "
                  "nothing survives (a warning says so)");
  flags.AddString("reconcile-window", &reconcile, "after a restart, time for workers to report the leases they hold");
  flags.AddString("inject-crash", &crash, "fault injection for tests: synced|replied|torn[:N]");
  flags.AddString("job-retention", &retention, "a job no client has held for this long is forgotten");
  flags.AddUint("journal-compact-bytes", &c.compact_bytes, "rewrite the journal as a snapshot beyond this size");
  flags.AddString("metrics-listen", &c.metrics_listen,
                  "HTTP address for /metrics, /healthz, /readyz and /state (host:port, or up to 4 comma-separated, "
                  "e.g. POD_IP:PORT,127.0.0.1:PORT; port 0 picks one; empty: none)");
  flags.AddString("metrics-address-file", &c.metrics_address_file, "write the bound metrics address here");
  flags.AddUint32("max-workers", &c.max_workers,
                  "the autoscaler's ceiling on workers, exported for the 'workers saturated' alert (0: unknown)");
  flags.AddString("key-file", &c.keys.key_file,
                  "this coordinator's CURVE key pair (stoker keygen --role coordinator); or $STOKER_KEY with the "
                  "file's text");
  flags.AddString("trust-file", &c.keys.trust_file,
                  "the public keys of the workers and clients allowed to connect (stoker keygen writes the lines); "
                  "or $STOKER_TRUST with the file's text");
  flags.AddBool("allow-readable-key", &c.keys.allow_readable_key,
                "use a key file that other users can read or write, or a trust file they can write (refused "
                "otherwise; also $STOKER_ALLOW_READABLE_KEY=1)");
  flags.AddBool("insecure", &c.keys.insecure,
                "no CURVE: anyone who reaches the port is trusted and traffic is clear text (trusted networks only)");
  AddCapFlags(flags, c.options);
  flags.AddUint32("worker-queue-batches", &c.options.worker_queue_batches,
                  "batches one worker may hold leased and unsent, over all its clients (0: max(2, 2 x threads / "
                  "batch size, batches per unit), enough to keep its threads busy; more queues work behind busy "
                  "workers while others idle)");
  flags.AddUint("max-cached-senders", &c.service.max_cached_senders,
                "senders whose recent lease replies are kept for retries (least recently used go)");
  flags.AddUint("max-cached-reply-bytes", &c.service.max_cached_reply_bytes,
                "bytes of lease replies kept for retries over all senders (least recently used go)");
  AddTeamFlags(flags, lists);
  flags.AddString("log-level", &log_level, "debug|info|warning|error");
  STOKER_RETURN_IF_ERROR(flags.Parse(argc, argv));
  const std::pair<const char*, std::pair<std::string*, Duration*>> durations[] = {
      {"heartbeat-interval", {&heartbeat, &c.options.heartbeat_interval}},
      {"lease-ttl", {&lease_ttl, &c.options.lease_ttl}},
      {"client-timeout", {&client_timeout, &c.options.client_timeout}},
      {"ack-timeout", {&ack_timeout, &c.options.ack_timeout}},
      {"reconcile-window", {&reconcile, &c.options.reconcile_window}},
      {"job-retention", {&retention, &c.options.job_retention}}};
  for (const auto& [name, target] : durations) {
    auto ms = ParseDurationMs(*target.first);
    if (!ms.ok() || *ms <= 0) {
      return InvalidArgumentError(std::string("--") + name + ": '" + *target.first + "' is not a positive duration");
    }
    *target.second = Millis(*ms);
  }
  STOKER_ASSIGN_OR_RETURN(c.service.crash, CrashPoint::Parse(crash));
  STOKER_RETURN_IF_ERROR(ParseLists(lists, &c.options));
  c.options.ipc_data_endpoints = c.service.listen.rfind("ipc://", 0) == 0;  // every peer is on this host
  if (!SetLogLevelFromString(log_level)) return InvalidArgumentError("--log-level: " + log_level);
  return c;
}

// What the admin port's handlers read; set once the coordinator serves.
struct Serving {
  std::atomic<bool> ready{false};
  std::atomic<const CoordinatorImpl*> impl{nullptr};
  std::atomic<const LoopWatch*> watch{nullptr};
};

StatusOr<std::unique_ptr<AdminServer>> StartAdmin(const Config& c, MetricsHub& hub, Serving& serving) {
  if (c.metrics_listen.empty()) return std::unique_ptr<AdminServer>();
  AdminHandlers handlers;
  handlers.live = [&serving] {
    const LoopWatch* watch = serving.watch.load();
    return watch ? watch->Check(Millis(10000)) : Status::Ok();
  };
  handlers.ready = [&serving] { return serving.ready.load() ? Status::Ok() : UnavailableError("replaying the journal"); };
  handlers.state = [&serving] {
    const CoordinatorImpl* impl = serving.impl.load();
    return impl ? impl->StateJson() : std::string("{\"component\": \"coordinator\", \"starting\": true}");
  };
  return AdminServer::StartForFlags(c.metrics_listen, c.metrics_address_file, hub, std::move(handlers));
}

// Opens (or creates) the journal and collects what it replays; null without --journal.
StatusOr<std::unique_ptr<Journal>> OpenJournal(Env& env, const Config& c, std::vector<Update>* replayed) {
  if (c.journal_path.empty()) {
    STOKER_LOG(kWarning) << "no --journal: a restart of this coordinator loses every job's progress";
    return std::unique_ptr<Journal>();
  }
  JournalReplay replay;
  JournalOptions options;
  options.compact_threshold_bytes = c.compact_bytes;
  STOKER_ASSIGN_OR_RETURN(auto journal, Journal::Open(env, c.journal_path, options,
                                                      [&](const Update& u) { replayed->push_back(u); }, &replay));
  STOKER_LOG(kInfo) << "journal " << c.journal_path << ": replayed " << replay.updates << " updates in "
                    << replay.records << " records (" << replay.bytes << " bytes, format " << replay.format << ")"
                    << (replay.torn_bytes ? ", dropped a torn tail" : "");
  return journal;
}

// CURVE: the coordinator's own key for its port, a ZAP handler admitting the trusted workers and clients, and the
// key plain data ports' tickets derive from.
StatusOr<std::unique_ptr<ZapHandler>> StartSecurity(zmq::context_t& context, const Config& c,
                                                    ServiceOptions* service, CoordinatorOptions* options) {
  STOKER_ASSIGN_OR_RETURN(Security security, LoadSecurity(Role::kCoordinator, c.keys));
  if (security.insecure) return std::unique_ptr<ZapHandler>();
  std::vector<TrustedKey> admitted = security.Trusted(Role::kWorker);
  for (TrustedKey& k : security.Trusted(Role::kClient)) admitted.push_back(std::move(k));
  if (admitted.empty()) STOKER_LOG(kWarning) << "the trust file lists no worker or client key: nobody can connect";
  service->curve_public_key = security.own.public_z85;
  service->curve_secret_key = security.own.secret_z85;
  STOKER_ASSIGN_OR_RETURN(options->data_ticket_master, DataTicketMasterKey(security.own));
  STOKER_LOG(kInfo) << "CURVE on: this coordinator is " << security.own.identity() << "; " << admitted.size()
                    << " worker and client keys admitted";
  return ZapHandler::Start(context, std::move(admitted));
}

Status Serve(const Config& c) {
  RealClock clock;
  PosixEnv env;
  MetricsHub hub("coordinator");
  Serving serving;
  zmq::context_t context(1);
  ServiceOptions service_options = c.service;
  CoordinatorOptions options = c.options;
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<ZapHandler> zap, StartSecurity(context, c, &service_options, &options));
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<AdminServer> admin, StartAdmin(c, hub, serving));
  std::vector<Update> replayed;
  auto journal = OpenJournal(env, c, &replayed);
  if (!journal.ok()) return journal.status().WithContext("cannot start");
  CoordinatorImpl impl(options, clock, env, journal->get());
  for (const Update& u : replayed) impl.Restore(u);
  impl.FinishRestore();
  CoordinatorService server(impl, journal->get(), context, service_options, clock);
  STOKER_ASSIGN_OR_RETURN(std::string bound, server.Bind());
  if (!c.endpoint_file.empty()) {
    STOKER_RETURN_IF_ERROR(env.WriteFileAtomically(c.endpoint_file, bound.data(), bound.size()));
  }
  STOKER_LOG(kInfo) << "listening on " << bound;
  const uint64_t collector = hub.Add(CoordinatorCollector(impl, server, journal->get(), c.max_workers));
  const uint64_t handshakes = hub.Add([&zap](MetricFamilies& out) { CollectHandshakes("coordinator", zap.get(), out); });
  serving.impl.store(&impl);
  serving.watch.store(&server.watch());
  serving.ready.store(true);
  Status run = server.Run(g_stop);
  admin.reset();  // joins the HTTP thread: no handler can be reading the Impl or the Service past this line
  hub.Remove(collector);
  hub.Remove(handshakes);
  return run;
}

}  // namespace
}  // namespace stoker::coordinator

int main(int argc, char** argv) {
  using namespace stoker;
  SetLogComponent("coordinator");
  auto config = coordinator::ParseFlags(argc, argv);
  if (config.status().code() == StatusCode::kCancelled) return 0;  // --help
  if (!config.ok()) {
    std::fprintf(stderr, "stoker-coordinator: %s\n", config.status().ToString().c_str());
    return 2;
  }
  if (config->lifeline_fd >= 0) {
    if (Status watched = WatchLifeline(static_cast<int>(config->lifeline_fd)); !watched.ok()) {
      std::fprintf(stderr, "stoker-coordinator: %s\n", watched.ToString().c_str());
      return 2;
    }
  }
  std::signal(SIGTERM, coordinator::OnSignal);
  std::signal(SIGINT, coordinator::OnSignal);
  Status served = coordinator::Serve(*config);
  if (!served.ok()) {
    STOKER_LOG(kError) << served.ToString();
    return 1;
  }
  STOKER_LOG(kInfo) << "stopped";
  return 0;
}
