// The coordinator's control plane on one core: lease requests, unit reports and client acks per second with
// 1,000 simulated workers and 1,000 simulated clients, the journal on (fsync'd, group-committed), and the
// journal's bytes per epoch per million samples.
//
//   control_plane_bench [--workers 1000] [--clients 1000] [--jobs 10] [--threads 4] [--seconds 10] [--cpu 0]
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

#include "bench/consume_rate.h"
#include "wire/control_codec.h"
#include "auth/curve.h"
#include "auth/keys.h"
#include "wire/frames.h"
#include "base/flags.h"
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

void Drive(const std::string& endpoint, const std::optional<PeerKeys>& keys, const std::vector<JobSpec>& jobs,
           const std::vector<Plan>& plans, uint32_t first_pair, uint32_t pairs, uint32_t ranks_per_job,
           const std::atomic<bool>& stop, Counters& counters, std::latch& ready) {
  zmq::context_t context(1);
  const std::string server = keys ? keys->coordinator_public : "";
  zmq::socket_t ws = PeerSocket(context, endpoint, keys ? &keys->worker : nullptr, server);
  zmq::socket_t cs = PeerSocket(context, endpoint, keys ? &keys->client : nullptr, server);
  const std::string data_key = keys ? std::string(40, 'k') : "";  // never dialled: the workers are simulated
  struct Pair {
    std::string worker, client;
    const JobSpec* job;
    const Plan* plan;
    uint32_t rank;
    uint64_t consumed = 0;
  };
  uint64_t membership = 0;  // like a real client: the worker list is sent again only when it changed
  std::vector<Pair> sim;
  for (uint32_t i = 0; i < pairs; ++i) {
    uint32_t global = first_pair + i;
    char w[32], c[32];
    std::snprintf(w, sizeof(w), "w-%016x", global);
    std::snprintf(c, sizeof(c), "c-%016x", global);
    sim.push_back({w, c, &jobs[global / ranks_per_job], &plans[global / ranks_per_job], global % ranks_per_job});
  }
  uint64_t next_id = 1;
  std::unordered_map<uint64_t, uint32_t> lease_requests;  // request id -> pair
  // The last unit report of a lease reply -> (pair, position): its client acks once the report is answered, as a
  // real client acks only what a worker has sent (on two sockets, an earlier ack could overtake the report).
  std::unordered_map<uint64_t, std::pair<uint32_t, uint64_t>> acks_due;
  auto send = [&](zmq::socket_t& s, const RequestBody& body) {
    uint64_t id = next_id++;
    zmq::message_t frame = EncodeRequest(id, body);
    s.send(frame, zmq::send_flags::none);
    return id;
  };
  auto receive_all = [&](zmq::socket_t& s, size_t expected) {
    for (size_t got = 0; got < expected;) {
      zmq::message_t frame;
      if (!s.recv(frame)) continue;
      ++got;
    }
  };
  // Registration: every client and every worker, answered before the timed run.
  for (const Pair& p : sim) {
    send(cs, RegisterClientRequest{p.client, p.job->name, p.rank, *p.job, 16, std::nullopt});
    send(ws, RegisterWorkerRequest{p.worker, "tcp://simulated:1", 1, "bench", data_key});
  }
  receive_all(cs, sim.size());
  receive_all(ws, sim.size());
  ready.count_down();
  for (uint32_t i = 0; i < sim.size(); ++i) {
    lease_requests[send(ws, LeaseRequest{sim[i].worker, sim[i].job->name, sim[i].rank, 4, 0})] = i;
  }
  while (!stop.load()) {
    zmq::pollitem_t items[] = {{ws.handle(), 0, ZMQ_POLLIN, 0}, {cs.handle(), 0, ZMQ_POLLIN, 0}};
    (void)PollOnce(items, std::chrono::milliseconds(50));  // a failed poll shows as nothing received
    for (int k = 0; k < 256 && (items[1].revents & ZMQ_POLLIN); ++k) {  // acks' replies: counted, nothing to do
      zmq::message_t frame;
      if (!cs.recv(frame, zmq::recv_flags::dontwait)) break;
      counters.replies.fetch_add(1, std::memory_order_relaxed);
      auto reply = DecodeReply(std::move(frame));
      if (!reply.ok() || !reply->status.ok()) counters.errors.fetch_add(1, std::memory_order_relaxed);
      if (reply.ok() && reply->status.ok()) {
        if (const auto* hb = std::get_if<ClientHeartbeatResponse>(&reply->body)) membership = hb->membership_version;
      }
    }
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    for (int k = 0; k < 256; ++k) {
      zmq::message_t frame;
      if (!ws.recv(frame, zmq::recv_flags::dontwait)) break;
      counters.replies.fetch_add(1, std::memory_order_relaxed);
      auto reply = DecodeReply(std::move(frame));
      if (!reply.ok() || !reply->status.ok()) {
        counters.errors.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (auto due = acks_due.find(reply->request_id); due != acks_due.end()) {
        Pair& p = sim[due->second.first];
        const uint64_t end = due->second.second;
        acks_due.erase(due);
        if (end > p.consumed) {
          p.consumed = end;
          send(cs, ClientHeartbeatRequest{p.client, p.job->name, p.rank, end, end, {}, membership});
          counters.acks.fetch_add(1, std::memory_order_relaxed);
        }
        continue;
      }
      auto it = lease_requests.find(reply->request_id);
      if (it == lease_requests.end()) continue;  // another unit report's reply
      Pair& p = sim[it->second];
      uint32_t index = it->second;
      lease_requests.erase(it);
      const auto* lease = std::get_if<LeaseResponse>(&reply->body);
      if (lease != nullptr) {
        uint64_t end = p.consumed;
        uint64_t last_report = 0;
        for (const LeaseGrant& g : lease->leases) {
          last_report = send(ws, UnitDoneRequest{p.worker, g.job, g.rank, g.unit, g.attempt, UnitOutcome::kSent,
                                                 g.batch_count, {}});
          end = std::max(end, p.plan->GlobalBatch(g.epoch, g.first_batch + g.batch_count));
          counters.leases.fetch_add(1, std::memory_order_relaxed);
          counters.unit_reports.fetch_add(1, std::memory_order_relaxed);
          counters.samples_acked.fetch_add(uint64_t{g.batch_count} * p.job->batch_size, std::memory_order_relaxed);
        }
        if (last_report != 0) acks_due[last_report] = {index, end};
      }
      lease_requests[send(ws, LeaseRequest{p.worker, p.job->name, p.rank, 4, 0})] = index;
    }
  }
}

int Main(int argc, char** argv) {
  uint32_t workers = 1000, jobs = 10, threads = 4, cpu = 0, batch = 256;
  double seconds = 10;
  std::string dir = "/tmp/stoker-control-plane", json;
  bool insecure = false;
  FlagSet flags("control_plane_bench [flags]",
                "Coordinator operations per second on one core with simulated workers and clients, journal on.");
  flags.AddUint32("workers", &workers, "simulated workers (and as many clients: one rank each)");
  flags.AddUint32("jobs", &jobs, "jobs the ranks are spread over");
  flags.AddUint32("threads", &threads, "driver threads");
  flags.AddUint32("cpu", &cpu, "core to pin the coordinator to");
  flags.AddUint32("batch-size", &batch, "batch size of the simulated jobs");
  flags.AddDouble("seconds", &seconds, "timed seconds");
  flags.AddString("dir", &dir, "working directory (manifest, journal, logs)");
  flags.AddString("json", &json, "write the figures here");
  flags.AddBool("insecure", &insecure, "CURVE off (to measure what it costs the coordinator)");
  if (auto exit_code = flags.ParseOrExitCode(argc, argv)) return *exit_code;
  std::string mkdir = "rm -rf " + dir + " && mkdir -p " + dir;
  if (std::system(mkdir.c_str()) != 0) return 1;
  // A million samples that are never read: the control plane is all that is measured.
  PosixEnv env;
  ManifestWriter writer(dir, SourceKind::kTarShards);
  uint32_t shard = writer.AddShard("never-read.tar", uint64_t{1} << 40, 0);
  for (uint32_t i = 0; i < 1000000; ++i) writer.AddSample(shard, 512ull * i, 1, i % 1000, ImageFormat::kJpeg, "");
  std::string manifest = dir + "/million.stoker";
  if (Status s = writer.Write(env, manifest, "control_plane_bench").status(); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  uint32_t ranks_per_job = workers / jobs;
  std::vector<JobSpec> specs(jobs);
  std::vector<Plan> plans;
  for (uint32_t j = 0; j < jobs; ++j) {
    specs[j].name = "job-" + std::to_string(j);
    specs[j].manifest_path = manifest;
    specs[j].world_size = ranks_per_job;
    specs[j].batch_size = batch;
    specs[j].epochs = 100000;
    plans.push_back(*Plan::Make(specs[j], 1000000));
  }
  tools::LocalClusterOptions options{dir, "", true, {"--log-level", "warning"}, {"taskset", "-c", std::to_string(cpu)}};
  options.insecure = insecure;
  tools::LocalCluster cluster(options);
  if (Status s = cluster.StartCoordinator(); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::optional<PeerKeys> keys;
  if (!insecure) {
    auto w = ReadKeyFile(cluster.keyring().worker_key);
    auto c = ReadKeyFile(cluster.keyring().client_key);
    auto k = ReadKeyFile(cluster.keyring().coordinator_key);
    if (!w.ok() || !c.ok() || !k.ok()) {
      std::fprintf(stderr, "cannot read the cluster's keys\n");
      return 1;
    }
    keys = PeerKeys{*w, *c, k->public_z85};
  }
  Counters counters;
  std::atomic<bool> stop{false};
  std::latch ready(threads);
  std::vector<std::thread> drivers;
  uint32_t per_thread = (workers + threads - 1) / threads;
  for (uint32_t t = 0; t < threads; ++t) {
    uint32_t first = t * per_thread;
    uint32_t n = std::min(per_thread, workers - std::min(workers, first));
    drivers.emplace_back(Drive, cluster.coordinator_endpoint(), std::cref(keys), std::cref(specs), std::cref(plans), first, n,
                         ranks_per_job, std::cref(stop), std::ref(counters), std::ref(ready));
  }
  // The journal's size right after registration (jobs, sessions, workers) is the base of the growth figure.
  ready.wait();  // every simulated peer registered
  std::this_thread::sleep_for(std::chrono::seconds(2));  // warm-up
  pid_t pid = cluster.coordinator().pid();
  auto journal_size = [&] {
    auto info = env.Stat(dir + "/coordinator.journal");
    return info.ok() ? info->size : 0;
  };
  uint64_t r0 = counters.replies.load(), l0 = counters.leases.load(), a0 = counters.acks.load();
  uint64_t u0 = counters.unit_reports.load(), s0 = counters.samples_acked.load(), j0 = journal_size();
  double cpu0 = ProcessCpuSeconds(pid);
  auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));  // the measured interval
  double elapsed = bench::SecondsSince(start);
  uint64_t replies = counters.replies.load() - r0, leases = counters.leases.load() - l0;
  uint64_t acks = counters.acks.load() - a0, reports = counters.unit_reports.load() - u0;
  uint64_t samples = counters.samples_acked.load() - s0, journal = journal_size() - j0;
  double cpu_used = (ProcessCpuSeconds(pid) - cpu0) / elapsed;
  stop.store(true);
  for (auto& t : drivers) t.join();
  double ops = replies / elapsed;
  double journal_per_million = samples > 0 ? journal / (samples / 1e6) : 0;
  std::printf("%u simulated workers and %u clients over %u jobs; coordinator pinned to core %u, journal on\n",
              workers, workers, jobs, cpu);
  std::printf("operations/s (all replies): %.0f  (lease requests %.0f/s, unit reports %.0f/s, acks %.0f/s)\n", ops,
              ops - (reports + acks) / elapsed, reports / elapsed, acks / elapsed);
  std::printf("leases granted/s: %.0f; samples committed/s: %.0f; coordinator CPU: %.2f cores; errors: %llu\n",
              leases / elapsed, samples / elapsed, cpu_used, static_cast<unsigned long long>(counters.errors.load()));
  std::printf("journal: %.0f bytes per million samples committed (%.1f KB/s)\n", journal_per_million,
              journal / elapsed / 1024);
  std::printf("ratio to the 20,000 operations/s goal: %.2f\n", ops / 20000);
  if (!json.empty()) {
    std::ofstream(json) << "{\"workers\": " << workers << ", \"clients\": " << workers << ", \"jobs\": " << jobs
                        << ", \"ops_per_second\": " << ops << ", \"leases_per_second\": " << leases / elapsed
                        << ", \"acks_per_second\": " << acks / elapsed << ", \"unit_reports_per_second\": "
                        << reports / elapsed << ", \"coordinator_cores\": " << cpu_used
                        << ", \"journal_bytes_per_million_samples\": " << journal_per_million
                        << ", \"batch_size\": " << batch << "}\n";
  }
  return 0;
}

}  // namespace
}  // namespace stoker

int main(int argc, char** argv) { return stoker::Main(argc, argv); }
