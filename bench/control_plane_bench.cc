// The coordinator's control plane on one core: lease requests, unit reports and client acks per second with
// 1,000 simulated workers and 1,000 simulated clients, the journal on (fsync'd, group-committed), and the
// journal's bytes per epoch per million samples.
//
//   control_plane_bench [--workers 1000] [--jobs 10] [--threads 4] [--seconds 10] [--cpu 0]
//
// The coordinator is the real binary, pinned to one core with taskset. The peers are simulated by a few driver
// threads, each with two DEALER sockets (one with the worker key, one with the client key: CURVE as deployed, or
// --insecure) speaking for hundreds of peers (the coordinator knows peers by the sender id in each request). Each simulated worker serves one rank: it asks for up to 4 batches,
// reports each unit sent, and that rank's simulated client acknowledges them as received and consumed, which
// commits them and opens the window for the next lease. Goal: >= 20,000 operations/s with the journal on.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <latch>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <zmq.hpp>

#include "auth/data_tickets.h"
#include "bench/consume_rate.h"
#include "wire/control_codec.h"
#include "auth/curve.h"
#include "auth/keys.h"
#include "wire/frames.h"
#include "bench/bench_main.h"
#include "dataset/manifest.h"
#include "dataset/plan.h"
#include "tools/local_cluster.h"

namespace stoker {
namespace {

struct Counters {
  std::atomic<uint64_t> replies{0}, leases{0}, acks{0}, unit_reports{0}, samples_acked{0}, errors{0};
};

double ProcessCpuSeconds(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::istringstream in(text.substr(text.rfind(')') + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// One driver thread: `pairs` simulated (worker, client) pairs, each serving one rank of one job.
// Keys of the simulated peers (absent: --insecure).
struct PeerKeys {
  KeyPair worker, client;
  std::string coordinator_public;
};

zmq::socket_t PeerSocket(zmq::context_t& context, const std::string& endpoint, const KeyPair* key,
                         const std::string& server_public) {
  zmq::socket_t s(context, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 0);
  s.set(zmq::sockopt::rcvhwm, 0);
  if (key != nullptr) MakeCurveClient(s, *key, server_public);
  s.connect(endpoint);
  return s;
}

// One driver thread: `pairs` simulated (worker, client) pairs, each serving one rank of one job, on two sockets.
class Driver {
 public:
  Driver(const std::string& endpoint, const std::optional<PeerKeys>& keys, Counters& counters)
      : ws_(PeerSocket(context_, endpoint, keys ? &keys->worker : nullptr, keys ? keys->coordinator_public : "")),
        cs_(PeerSocket(context_, endpoint, keys ? &keys->client : nullptr, keys ? keys->coordinator_public : "")),
        sealed_(keys.has_value()),  // never dialled: the workers are simulated
        counters_(counters) {}

  void Simulate(const std::vector<JobSpec>& jobs, const std::vector<Plan>& plans, uint32_t first_pair, uint32_t pairs,
                uint32_t ranks_per_job) {
    for (uint32_t i = 0; i < pairs; ++i) {
      uint32_t global = first_pair + i;
      char w[32], c[32];
      std::snprintf(w, sizeof(w), "w-%016x", global);
      std::snprintf(c, sizeof(c), "c-%016x", global);
      sim_.push_back({w, c, &jobs[global / ranks_per_job], &plans[global / ranks_per_job], global % ranks_per_job});
    }
  }

  // Registration: every client and every worker, answered before the timed run.
  void Register() {
    for (const Pair& p : sim_) {
      RegisterClientRequest claim{p.client, p.job->name, p.rank, *p.job, 16, std::nullopt};
      claim.session = p.session;
      Send(cs_, claim);
      Send(ws_, RegisterWorkerRequest{p.worker, "tcp://simulated:1", 1, "bench", "", sealed_});
    }
    ReceiveAll(cs_, sim_.size());
    ReceiveAll(ws_, sim_.size());
  }

  // Every worker asks for a lease, and goes on asking, reporting and acking until `stop`.
  void Run(const std::atomic<bool>& stop) {
    for (uint32_t i = 0; i < sim_.size(); ++i) AskForLease(i);
    while (!stop.load()) {
      zmq::pollitem_t items[] = {{ws_.handle(), 0, ZMQ_POLLIN, 0}, {cs_.handle(), 0, ZMQ_POLLIN, 0}};
      (void)PollOnce(items, std::chrono::milliseconds(50));  // a failed poll shows as nothing received
      if (items[1].revents & ZMQ_POLLIN) TakeClientReplies();
      if (items[0].revents & ZMQ_POLLIN) TakeWorkerReplies();
    }
  }

 private:
  struct Pair {
    std::string worker, client;
    const JobSpec* job;
    const Plan* plan;
    uint32_t rank;
    uint64_t consumed = 0;
    std::string session = NewSessionSecret();  // as a real client's: every heartbeat is checked against it
  };

  uint64_t Send(zmq::socket_t& s, const RequestBody& body) {
    uint64_t id = next_id_++;
    zmq::message_t frame = EncodeRequest(id, body);
    s.send(frame, zmq::send_flags::none);
    return id;
  }

  static void ReceiveAll(zmq::socket_t& s, size_t expected) {
    for (size_t got = 0; got < expected;) {
      zmq::message_t frame;
      if (!s.recv(frame)) continue;
      ++got;
    }
  }

  void AskForLease(uint32_t i) {
    lease_requests_[Send(ws_, LeaseRequest{sim_[i].worker, sim_[i].job->name, sim_[i].rank, 4, 0})] = i;
  }

  // Up to 256 waiting replies on `s`, each counted: a failed one as an error (handed to `fail` if it decoded), a
  // good one handed to `take`.
  template <typename Take, typename Fail>
  void TakeReplies(zmq::socket_t& s, Take take, Fail fail) {
    for (int k = 0; k < 256; ++k) {
      zmq::message_t frame;
      if (!s.recv(frame, zmq::recv_flags::dontwait)) break;
      counters_.replies.fetch_add(1, std::memory_order_relaxed);
      auto reply = DecodeReply(std::move(frame));
      if (!reply.ok() || !reply->status.ok()) {
        counters_.errors.fetch_add(1, std::memory_order_relaxed);
        if (reply.ok()) fail(*reply);
        continue;
      }
      take(*reply);
    }
  }

  // Acks' replies: the membership version kept, as a real client does.
  void TakeClientReplies() {
    TakeReplies(
        cs_,
        [this](const DecodedReply& reply) {
          if (const auto* hb = std::get_if<ClientHeartbeatResponse>(&reply.body)) membership_ = hb->membership_version;
        },
        [](const DecodedReply&) {});
  }

  void TakeWorkerReplies() {
    TakeReplies(
        ws_,
        [this](const DecodedReply& reply) {
          if (AckIfDue(reply.request_id)) return;
          auto it = lease_requests_.find(reply.request_id);
          if (it == lease_requests_.end()) return;  // another unit report's reply
          const uint32_t index = it->second;
          lease_requests_.erase(it);
          if (const auto* lease = std::get_if<LeaseResponse>(&reply.body)) ReportUnits(index, *lease);
          AskForLease(index);
        },
        [this](const DecodedReply& reply) {
          // A simulated worker sends no heartbeats: on a busy machine one registered early can be past the lease
          // TTL before its first lease request, and the coordinator has let it go. It registers again and goes on.
          auto it = lease_requests_.find(reply.request_id);
          if (it == lease_requests_.end()) return;
          const uint32_t index = it->second;
          lease_requests_.erase(it);
          Send(ws_, RegisterWorkerRequest{sim_[index].worker, "tcp://simulated:1", 1, "bench", "", sealed_});
          AskForLease(index);
        });
  }

  // The last unit report of a lease reply answered: its client acks what it covered, as a real client acks only
  // what a worker has sent (on two sockets, an earlier ack could overtake the report).
  bool AckIfDue(uint64_t request_id) {
    auto due = acks_due_.find(request_id);
    if (due == acks_due_.end()) return false;
    Pair& p = sim_[due->second.first];
    const uint64_t end = due->second.second;
    acks_due_.erase(due);
    if (end > p.consumed) {
      p.consumed = end;
      ClientHeartbeatRequest ack{p.client, p.job->name, p.rank, end, end, {}, membership_};
      ack.session = p.session;
      Send(cs_, ack);
      counters_.acks.fetch_add(1, std::memory_order_relaxed);
    }
    return true;
  }

  void ReportUnits(uint32_t index, const LeaseResponse& lease) {
    Pair& p = sim_[index];
    uint64_t end = p.consumed;
    uint64_t last_report = 0;
    for (const LeaseGrant& g : lease.leases) {
      last_report = Send(ws_, UnitDoneRequest{p.worker, g.job, g.rank, g.unit, g.attempt, UnitOutcome::kSent,
                                              g.batch_count, {}});
      end = std::max(end, p.plan->GlobalBatch(g.epoch, g.first_batch + g.batch_count));
      counters_.leases.fetch_add(1, std::memory_order_relaxed);
      counters_.unit_reports.fetch_add(1, std::memory_order_relaxed);
      counters_.samples_acked.fetch_add(uint64_t{g.batch_count} * p.job->batch_size, std::memory_order_relaxed);
    }
    if (last_report != 0) acks_due_[last_report] = {index, end};
  }

  zmq::context_t context_{1};
  zmq::socket_t ws_, cs_;
  const bool sealed_;  // registers as a sealed data port (with CURVE on)
  Counters& counters_;
  std::vector<Pair> sim_;
  uint64_t next_id_ = 1;
  uint64_t membership_ = 0;  // like a real client: the worker list is sent again only when it changed
  std::unordered_map<uint64_t, uint32_t> lease_requests_;                  // request id -> pair
  std::unordered_map<uint64_t, std::pair<uint32_t, uint64_t>> acks_due_;  // report id -> (pair, position)
};

void Drive(const std::string& endpoint, const std::optional<PeerKeys>& keys, const std::vector<JobSpec>& jobs,
           const std::vector<Plan>& plans, uint32_t first_pair, uint32_t pairs, uint32_t ranks_per_job,
           const std::atomic<bool>& stop, Counters& counters, std::latch& ready) {
  Driver driver(endpoint, keys, counters);
  driver.Simulate(jobs, plans, first_pair, pairs, ranks_per_job);
  driver.Register();
  ready.count_down();
  driver.Run(stop);
}

// Its workers are simulated ones, not processes: it declares --workers itself.
struct Options : bench::CommonOptions {
  Options() : CommonOptions{.batch = 256, .seconds = 10, .workers = 1000, .dir = "/tmp/stoker-control-plane"} {}
  uint32_t jobs = 10, threads = 4, cpu = 0;
  bool insecure = false;
};

// A million samples that are never read (the control plane is all that is measured), and a job spec over them for
// each of the jobs the ranks are spread over.
StatusOr<std::vector<JobSpec>> Jobs(const Options& o) {
  STOKER_RETURN_IF_ERROR(bench::FreshDirectory(o.dir));
  PosixEnv env;
  ManifestWriter writer(o.dir, SourceKind::kTarShards);
  uint32_t shard = writer.AddShard("never-read.tar", uint64_t{1} << 40, 0);
  for (uint32_t i = 0; i < 1000000; ++i) writer.AddSample(shard, 512ull * i, 1, i % 1000, ImageFormat::kJpeg, "");
  const std::string manifest = o.dir + "/million.stoker";
  STOKER_RETURN_IF_ERROR(writer.Write(env, manifest, "control_plane_bench").status());
  std::vector<JobSpec> specs(o.jobs);
  for (uint32_t j = 0; j < o.jobs; ++j) {
    specs[j] = {.name = "job-" + std::to_string(j), .manifest_path = manifest, .batch_size = o.batch,
                .world_size = o.workers / o.jobs, .epochs = 100000};
  }
  return specs;
}

StatusOr<std::optional<PeerKeys>> ReadPeerKeys(const tools::LocalCluster& cluster, bool insecure) {
  if (insecure) return std::optional<PeerKeys>();
  auto w = ReadKeyFile(cluster.keyring().worker_key);
  auto c = ReadKeyFile(cluster.keyring().client_key);
  auto k = ReadKeyFile(cluster.keyring().coordinator_key);
  if (!w.ok() || !c.ok() || !k.ok()) return UnavailableError("cannot read the cluster's keys");
  return std::optional<PeerKeys>(PeerKeys{*w, *c, k->public_z85});
}

// What the coordinator did over the timed interval.
struct Figures {
  double elapsed = 0, cpu_used = 0;
  uint64_t replies = 0, leases = 0, acks = 0, reports = 0, samples = 0, journal = 0;
};

// Counts and the journal's size and the coordinator's CPU time, at the start and the end of the timed interval.
Figures MeasureInterval(const Options& o, const Counters& counters, pid_t coordinator) {
  PosixEnv env;
  auto journal_size = [&] {
    auto info = env.Stat(o.dir + "/coordinator.journal");
    return info.ok() ? info->size : 0;
  };
  uint64_t r0 = counters.replies.load(), l0 = counters.leases.load(), a0 = counters.acks.load();
  uint64_t u0 = counters.unit_reports.load(), s0 = counters.samples_acked.load(), j0 = journal_size();
  double cpu0 = ProcessCpuSeconds(coordinator);
  auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));  // the measured interval
  Figures f;
  f.elapsed = bench::SecondsSince(start);
  f.replies = counters.replies.load() - r0;
  f.leases = counters.leases.load() - l0;
  f.acks = counters.acks.load() - a0;
  f.reports = counters.unit_reports.load() - u0;
  f.samples = counters.samples_acked.load() - s0;
  f.journal = journal_size() - j0;
  f.cpu_used = (ProcessCpuSeconds(coordinator) - cpu0) / f.elapsed;
  return f;
}

// Prints the figures; returns them as JSON.
std::string Report(const Options& o, const Figures& f, uint64_t errors) {
  const double ops = f.replies / f.elapsed;
  const double journal_per_million = f.samples > 0 ? f.journal / (f.samples / 1e6) : 0;
  std::printf("%u simulated workers and %u clients over %u jobs; coordinator pinned to core %u, journal on\n",
              o.workers, o.workers, o.jobs, o.cpu);
  std::printf("operations/s (all replies): %.0f  (lease requests %.0f/s, unit reports %.0f/s, acks %.0f/s)\n", ops,
              ops - (f.reports + f.acks) / f.elapsed, f.reports / f.elapsed, f.acks / f.elapsed);
  std::printf("leases granted/s: %.0f; samples committed/s: %.0f; coordinator CPU: %.2f cores; errors: %llu\n",
              f.leases / f.elapsed, f.samples / f.elapsed, f.cpu_used, static_cast<unsigned long long>(errors));
  std::printf("journal: %.0f bytes per million samples committed (%.1f KB/s)\n", journal_per_million,
              f.journal / f.elapsed / 1024);
  std::printf("ratio to the 20,000 operations/s goal: %.2f\n", ops / 20000);
  std::ostringstream j;
  j << "{\"workers\": " << o.workers << ", \"clients\": " << o.workers << ", \"jobs\": " << o.jobs
    << ", \"ops_per_second\": " << ops << ", \"leases_per_second\": " << f.leases / f.elapsed
    << ", \"acks_per_second\": " << f.acks / f.elapsed << ", \"unit_reports_per_second\": " << f.reports / f.elapsed
    << ", \"coordinator_cores\": " << f.cpu_used << ", \"journal_bytes_per_million_samples\": " << journal_per_million
    << ", \"batch_size\": " << o.batch << "}";
  return j.str();
}

void AddFlags(FlagSet& flags, Options& o) {
  flags.AddUint32("workers", &o.workers, "simulated workers (and as many clients: one rank each)");
  flags.AddUint32("jobs", &o.jobs, "jobs the ranks are spread over");
  flags.AddUint32("threads", &o.threads, "driver threads");
  flags.AddUint32("cpu", &o.cpu, "core to pin the coordinator to");
  using enum bench::CommonFlag;
  bench::AddCommonFlags(flags, o, "timed seconds", {kBatchSize, kDir});
  flags.AddBool("insecure", &o.insecure, "CURVE off (to measure what it costs the coordinator)");
}

bench::Outcome RunBench(const Options& o) {
  auto specs = Jobs(o);
  bench::DieUnlessOk(specs.status(), "manifest");
  std::vector<Plan> plans;
  for (const JobSpec& spec : *specs) plans.push_back(*Plan::Make(spec, 1000000));
  // Every simulated worker registers at once under one key: the registration pace is not what is measured.
  tools::LocalClusterOptions options{o.dir, "", true,
                                    {"--log-level", "warning", "--max-worker-registrations-per-second", "0"},
                                    {"taskset", "-c", std::to_string(o.cpu)}};
  options.insecure = o.insecure;
  tools::LocalCluster cluster(options);
  bench::DieUnlessOk(cluster.StartCoordinator(), "coordinator");
  auto keys = ReadPeerKeys(cluster, o.insecure);
  bench::DieUnlessOk(keys.status(), "keys");
  Counters counters;
  std::atomic<bool> stop{false};
  std::latch ready(o.threads);
  std::vector<std::thread> drivers;
  uint32_t per_thread = (o.workers + o.threads - 1) / o.threads;
  for (uint32_t t = 0; t < o.threads; ++t) {
    uint32_t first = t * per_thread;
    uint32_t n = std::min(per_thread, o.workers - std::min(o.workers, first));
    drivers.emplace_back(Drive, cluster.coordinator_endpoint(), std::cref(*keys), std::cref(*specs), std::cref(plans),
                         first, n, o.workers / o.jobs, std::cref(stop), std::ref(counters), std::ref(ready));
  }
  // The journal's size right after registration (jobs, sessions, workers) is the base of the growth figure.
  ready.wait();  // every simulated peer registered
  std::this_thread::sleep_for(std::chrono::seconds(2));  // warm-up
  const Figures f = MeasureInterval(o, counters, cluster.coordinator().pid());
  stop.store(true);
  for (auto& t : drivers) t.join();
  return {0, Report(o, f, counters.errors.load())};
}

}  // namespace
}  // namespace stoker

STOKER_BENCH_MAIN("control_plane_bench",
                  "Coordinator operations per second on one core with simulated workers and clients, "
                  "journal on.");
