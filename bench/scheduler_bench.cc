// The coordinator's scheduler at a platform's scale, on one core: by default 10,000 workers, 200 jobs of 100 ranks
// (20,000 ranks) in 20 teams of weights 1, 2 and 3, every job hungry, a quarter of them with samples twice as dear.
//
//   scheduler_bench [--workers 10000] [--jobs 200] [--ranks 100] [--teams 20] [--streams 16] [--dear 2]
//                   [--seconds 15] [--warmup 5] [--verbose] [--json FILE]
//
// The coordinator's Impl (coordinator/impl.h: every decision, no sockets, no journal) runs in this process on a
// simulated clock, driven by simulated peers as its service would drive it. Each worker has one pipeline thread that
// makes a batch of a job in that job's batch time (100 ms, or 200 ms for a dear job), holds credit for 16 ranks of
// random jobs (--streams: every rank gets 8 workers), asks for each of them as its credit frees (requests park at the
// coordinator), reports each unit with what it cost, and heartbeats every 250 ms with the leases it holds. Each
// rank's client takes every batch at once and acknowledges in its heartbeat every 250 ms, saying it has stalled 0,
// 30, 60 or 90 % of its steps (by job: within their shares, the more stalled go first). The coordinator's timer
// runs every 50 ms.
//
// Measured, after the warm-up: coordinator operations (every call into the Impl) per second of this thread's CPU
// time inside those calls; the process's memory; and each job's share of the workers' time against its fair
// share (all jobs hungry: a team's weight over all the teams' weights, split equally between the team's jobs):
// the largest and the mean distance, and how many jobs are within 5 %. The baseline, in the same run, is the same
// simulation at a tenth of the scale (1,000 workers, 20 jobs of 100 ranks in 2 teams): the ratio says what the
// scale costs per operation. Goal (issue 30): >= 20,000 operations/s with every job within 5 % of its fair share.
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <queue>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/logging.h"
#include "bench/bench_main.h"
#include "bench/consume_rate.h"
#include "coordinator/impl.h"
#include "dataset/manifest.h"
#include "stoker/clock.h"

namespace stoker {
namespace {

struct Options : bench::CommonOptions {
  Options() : CommonOptions{.seconds = 15, .workers = 10000, .dir = "/tmp/stoker-scheduler-bench"} {}
  uint32_t jobs = 200, ranks = 100, teams = 20, streams = 16, window = 16, seed = 7, dear = 2;
  double warmup = 5;
  bool baseline = true, verbose = false;
};

// One simulation's shape.
struct Scale {
  uint32_t workers, jobs, ranks, teams;
};

constexpr uint32_t kCredits = 2;       // batches a worker may hold per stream (ClientOptions' default)
constexpr uint32_t kBatchSize = 8;
constexpr int64_t kBatchMs = 100;      // a cheap job's batch on one pipeline thread; a dear job's is twice that
constexpr int64_t kHeartbeatMs = 250;  // workers' and clients' (CoordinatorOptions' default)
constexpr int64_t kTickMs = 50;

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double RssMegabytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

struct Held {  // a leased unit in a worker's queue
  uint32_t job = 0, rank = 0, stream = 0;
  uint64_t unit = 0, attempt = 0, first_global = 0;
  uint32_t count = 0, made = 0;
};

struct SimWorker {
  std::string id;
  struct Stream {
    uint32_t job = 0, rank = 0;
    bool asking = false;
    uint32_t held = 0;  // batches leased and not yet made
  };
  std::vector<Stream> streams;
  std::deque<Held> queue;
  bool building = false;
  Duration started{0};  // of the batch being made
  double busy_seconds = 0;
  uint64_t samples = 0;
};

struct SimRank {
  std::string client;
  std::string session;           // its secret (RegisterClientRequest::session): every ack is checked against it
  uint64_t watermark = 0;        // batches received in order (and consumed at once)
  std::set<uint64_t> above;      // received beyond it
};

struct SimJob {
  std::string name, identity;
  uint32_t team = 0;
  int64_t batch_ms = kBatchMs;
  uint64_t steps_per_epoch = 0;
  std::vector<SimRank> ranks;
  uint64_t batches_counted = 0;  // made after the warm-up
};

struct Figures {
  double ops = 0, cpu = 0, rss_mb = 0, register_ms_per_client = 0;
  double worst = 0, mean = 0;
  uint32_t within_5 = 0, jobs = 0;
  double pool_busy = 0;
  uint64_t batches = 0, refused = 0;
};

class Sim {
 public:
  Sim(const Scale& scale, const std::string& manifest, const Options& o) : s_(scale), o_(o) {
    coordinator::CoordinatorOptions options;
    options.max_jobs = std::max<uint32_t>(64, scale.jobs);
    options.max_jobs_per_team = options.max_jobs;
    options.max_registered_workers = std::max<uint32_t>(1024, scale.workers);
    options.max_ranks_per_job = std::max<uint32_t>(4096, scale.ranks);
    options.worker_registrations_per_second = 0;  // every worker at once: the pace is not what is measured
    for (uint32_t t = 0; t < scale.teams; ++t) options.teams["team-" + std::to_string(t)].weight = 1 + t % 3;
    impl_ = std::make_unique<coordinator::CoordinatorImpl>(options, clock_, env_);
    jobs_.resize(scale.jobs);
    for (uint32_t j = 0; j < scale.jobs; ++j) {
      SimJob& job = jobs_[j];
      job.name = "job-" + std::to_string(j);
      job.team = j % scale.teams;
      job.identity = "client:team-" + std::to_string(job.team);
      job.batch_ms = j % 4 == 3 ? o.dear * kBatchMs : kBatchMs;
      job.ranks.resize(scale.ranks);
      spec_.push_back({.name = job.name, .manifest_path = manifest, .batch_size = kBatchSize,
                       .world_size = scale.ranks, .epochs = 100000});
      spec_.back().shuffle = false;
    }
  }

  Figures Run() {
    Figures f;
    // Workers first, so that a client's registration carries the whole list once and its heartbeats none.
    workers_.resize(s_.workers);
    for (uint32_t w = 0; w < s_.workers; ++w) {
      workers_[w].id = "w-" + std::to_string(w);
      Check(impl_->RegisterWorker({workers_[w].id, "tcp://" + workers_[w].id + ":1", 1, "bench"}).status(), "worker");
    }
    const double register_began = ThreadCpuSeconds();
    for (uint32_t j = 0; j < s_.jobs; ++j) {
      for (uint32_t r = 0; r < s_.ranks; ++r) {
        SimRank& rank = jobs_[j].ranks[r];
        rank.client = "c-" + std::to_string(j) + "-" + std::to_string(r);
        rank.session = rank.client;
        rank.session.resize(32, '.');  // unique per rank; randomness is not what is measured
        RegisterClientRequest request{rank.client, jobs_[j].name, r, spec_[j], o_.window};
        request.session = rank.session;
        auto reg = impl_->RegisterClient(request, {jobs_[j].identity});
        Check(reg.status(), "client");
        jobs_[j].steps_per_epoch = reg->steps_per_epoch;
        membership_ = reg->membership_version;
      }
    }
    f.register_ms_per_client = 1000 * (ThreadCpuSeconds() - register_began) / (s_.jobs * s_.ranks);
    // Each worker's streams: the ranks dealt round-robin into workers x --streams places (eight per rank at the
    // default scale), shuffled.
    const uint64_t ranks = uint64_t{s_.jobs} * s_.ranks;
    std::vector<std::pair<uint32_t, uint32_t>> slots;
    for (uint64_t i = 0; i < uint64_t{s_.workers} * o_.streams; ++i) {
      slots.emplace_back(static_cast<uint32_t>(i % ranks / s_.ranks), static_cast<uint32_t>(i % ranks % s_.ranks));
    }
    std::mt19937_64 random(o_.seed);
    std::shuffle(slots.begin(), slots.end(), random);
    for (size_t i = 0; i < slots.size(); ++i) {
      workers_[i % s_.workers].streams.push_back({slots[i].first, slots[i].second});
    }
    for (uint32_t w = 0; w < s_.workers; ++w) {
      for (uint32_t s = 0; s < workers_[w].streams.size(); ++s) Ask(w, s);
      // Heartbeats spread over the interval, as peers started at different times send them.
      events_.push({Millis(static_cast<int64_t>(w % kHeartbeatMs)), kWorkerHeartbeat, w});
    }
    for (uint32_t j = 0; j < s_.jobs; ++j) {
      for (uint32_t r = 0; r < s_.ranks; ++r) {
        events_.push({Millis(static_cast<int64_t>((j * s_.ranks + r) % kHeartbeatMs)), kClientHeartbeat,
                      j * s_.ranks + r});
      }
    }
    events_.push({Millis(kTickMs), kTick, 0});
    const Duration warmup = warmup_ = Millis(static_cast<int64_t>(o_.warmup * 1000));
    const Duration end = warmup + Millis(static_cast<int64_t>(o_.seconds * 1000));
    bool counting = false;
    while (!events_.empty() && events_.top().at <= end) {
      Event e = events_.top();
      events_.pop();
      if (e.at > now_) {
        clock_.Advance(e.at - now_);
        now_ = e.at;
      }
      if (!counting && now_ >= warmup) {
        counting = true;
        ops_ = 0;
        cpu_ = 0;
        for (SimWorker& w : workers_) w.busy_seconds = 0;
      }
      switch (e.kind) {
        case kBatchDone: BatchDone(e.index, counting); break;
        case kWorkerHeartbeat: WorkerHeartbeat(e.index); break;
        case kClientHeartbeat: ClientHeartbeat(e.index / s_.ranks, e.index % s_.ranks); break;
        case kTick: Tick(); break;
      }
    }
    f.ops = cpu_ > 0 ? static_cast<double>(ops_) / cpu_ : 0;
    f.refused = refused_;
    f.cpu = cpu_;
    f.rss_mb = RssMegabytes();
    Shares(f);
    return f;
  }

 private:
  enum Kind { kBatchDone, kWorkerHeartbeat, kClientHeartbeat, kTick };
  struct Event {
    Duration at;
    Kind kind;
    uint32_t index;
    bool operator>(const Event& o) const { return at > o.at; }
  };

  static void Check(const Status& s, const char* what) { bench::DieUnlessOk(s, what); }

  // Every call into the Impl is one operation, timed on this thread's CPU clock; the replies it woke go out after.
  template <typename F>
  auto Call(F&& f) -> decltype(f()) {
    const double began = ThreadCpuSeconds();
    auto result = f();
    cpu_ += ThreadCpuSeconds() - began;
    ++ops_;
    Deliver();
    return result;
  }

  void Deliver() {
    const double began = ThreadCpuSeconds();
    std::vector<coordinator::DeferredLeaseReply> woken = impl_->TakeDeferredReplies();
    cpu_ += ThreadCpuSeconds() - began;
    for (coordinator::DeferredLeaseReply& reply : woken) {
      auto it = parked_.find(reply.handle);
      if (it == parked_.end()) continue;
      const auto [w, s] = it->second;
      parked_.erase(it);
      workers_[w].streams[s].asking = false;
      Granted(w, s, reply.response.leases);
      if (reply.response.leases.empty()) Ask(w, s);  // its wait ran out: it asks again, as a worker's timer does
    }
  }

  // A stream with credit free asks for work; the request parks at the coordinator when there is none now.
  void Ask(uint32_t w, uint32_t s) {
    SimWorker::Stream& stream = workers_[w].streams[s];
    if (stream.asking || stream.held >= kCredits) return;
    const coordinator::RequestHandle handle = next_handle_++;
    stream.asking = true;
    auto reply = Call([&] {
      return impl_->RequestLease(handle, {workers_[w].id, jobs_[stream.job].name, stream.rank, kCredits - stream.held,
                                          1000});
    });
    if (!reply.ok()) {
      stream.asking = false;  // asked again at the next heartbeat
      return;
    }
    if (!reply->has_value()) {
      parked_[handle] = {w, s};
      return;
    }
    stream.asking = false;
    Granted(w, s, (*reply)->leases);
  }

  void Granted(uint32_t w, uint32_t s, const std::vector<LeaseGrant>& leases) {
    SimWorker& worker = workers_[w];
    SimJob& job = jobs_[worker.streams[s].job];
    for (const LeaseGrant& g : leases) {
      Held h{worker.streams[s].job, g.rank, s, g.unit, g.attempt, g.epoch * job.steps_per_epoch + g.first_batch,
             g.batch_count, static_cast<uint32_t>(g.skip.size())};
      worker.streams[s].held += h.count - h.made;
      worker.queue.push_back(h);
    }
    StartNext(w);
    if (leases.empty()) return;  // an empty answer: asked again at the next heartbeat
    Ask(w, s);
  }

  void StartNext(uint32_t w) {
    SimWorker& worker = workers_[w];
    if (worker.building || worker.queue.empty()) return;
    worker.building = true;
    worker.started = now_;
    events_.push({now_ + Millis(jobs_[worker.queue.front().job].batch_ms), kBatchDone, w});
  }

  void BatchDone(uint32_t w, bool counting) {
    SimWorker& worker = workers_[w];
    worker.building = false;
    if (worker.queue.empty()) return;  // revoked meanwhile
    Held& h = worker.queue.front();
    SimJob& job = jobs_[h.job];
    const double seconds = static_cast<double>(job.batch_ms) / 1000;
    worker.busy_seconds += seconds;
    worker.samples += kBatchSize;
    if (counting && worker.started >= warmup_) ++job.batches_counted;  // made wholly in the measured time
    Receive(job.ranks[h.rank], h.first_global + h.made);
    ++h.made;
    --worker.streams[h.stream].held;
    if (h.made == h.count) {
      const Held done = h;
      worker.queue.pop_front();
      Ask(w, done.stream);  // before the report, as a worker does: the place it frees can come back to it
      const Status reported = Call([&] {
        return impl_->UnitDone({worker.id, job.name, done.rank, done.unit, done.attempt, UnitOutcome::kSent,
                                done.count, {}, seconds * done.count});
      });
      if (!reported.ok()) ++refused_;
    }
    StartNext(w);
  }

  static void Receive(SimRank& rank, uint64_t batch) {
    if (batch < rank.watermark) return;
    rank.above.insert(batch);
    while (!rank.above.empty() && *rank.above.begin() == rank.watermark) {
      rank.above.erase(rank.above.begin());
      ++rank.watermark;
    }
  }

  void Tick() {
    Call([&] {
      impl_->Tick();
      return 0;
    });
    events_.push({now_ + Millis(kTickMs), kTick, 0});
  }

  void WorkerHeartbeat(uint32_t w) {
    SimWorker& worker = workers_[w];
    WorkerHeartbeatRequest hb{worker.id, {}, false, worker.busy_seconds, worker.samples};
    for (const Held& h : worker.queue) hb.leases.push_back({jobs_[h.job].name, h.rank, h.unit, h.attempt});
    auto reply = Call([&] { return impl_->WorkerHeartbeat(hb); });
    if (reply.ok()) {
      for (const LeaseRef& revoked : reply->revoked) {
        for (auto it = worker.queue.begin(); it != worker.queue.end(); ++it) {
          if (it->unit != revoked.unit || it->attempt != revoked.attempt || jobs_[it->job].name != revoked.job) continue;
          if (it == worker.queue.begin() && worker.building) {  // the batch being made ends it
            worker.streams[it->stream].held -= it->count - it->made - 1;
            it->count = it->made + 1;
          } else {
            worker.streams[it->stream].held -= it->count - it->made;
            worker.queue.erase(it);
          }
          break;
        }
      }
    }
    for (uint32_t s = 0; s < worker.streams.size(); ++s) Ask(w, s);
    events_.push({now_ + Millis(kHeartbeatMs), kWorkerHeartbeat, w});
  }

  void ClientHeartbeat(uint32_t j, uint32_t r) {
    SimRank& rank = jobs_[j].ranks[r];
    ClientHeartbeatRequest hb;
    hb.client_id = rank.client;
    hb.job = jobs_[j].name;
    hb.rank = r;
    hb.consumed = hb.received_watermark = rank.watermark;
    hb.received_above.assign(rank.above.begin(), rank.above.end());
    hb.membership_version = membership_;
    hb.session = rank.session;
    // What its training loop reports: stepping all along, having waited for input 0, 30, 60 or 90 % of it by job,
    // so that the order within shares (FairShare::SetStalls) brings some jobs' turns forward more than others'.
    hb.step_seconds = ToSeconds(now_);
    hb.stall_seconds = hb.step_seconds * 0.3 * static_cast<double>(j % 4);
    hb.samples_delivered = rank.watermark * kBatchSize;
    if (!Call([&] { return impl_->ClientHeartbeat(hb, {jobs_[j].identity}).status(); }).ok()) ++refused_;
    events_.push({now_ + Millis(kHeartbeatMs), kClientHeartbeat, j * s_.ranks + r});
  }

  // Each job's share of the workers' time made after the warm-up against its fair share: every job is hungry, so a
  // team's is its weight over all the teams', split equally between its jobs.
  void Shares(Figures& f) {
    double time = 0, weights = 0;
    std::map<uint32_t, uint32_t> jobs_of_team;
    for (const SimJob& job : jobs_) {
      time += static_cast<double>(job.batches_counted * job.batch_ms);
      ++jobs_of_team[job.team];
    }
    for (const auto& [team, n] : jobs_of_team) weights += 1 + team % 3;
    f.jobs = static_cast<uint32_t>(jobs_.size());
    for (const SimJob& job : jobs_) {
      const double fair = (1 + job.team % 3) / weights / jobs_of_team[job.team];
      const double got = time > 0 ? static_cast<double>(job.batches_counted * job.batch_ms) / time : 0;
      const double distance = std::abs(got / fair - 1);
      if (o_.verbose) {
        std::printf("    %-8s team %2u (weight %u)%s: %.4f of the time, fair %.4f (%+.1f %%)\n", job.name.c_str(), job.team,
                    1 + job.team % 3, job.batch_ms > kBatchMs ? ", dear" : "", got, fair, 100 * (got / fair - 1));
      }
      f.worst = std::max(f.worst, distance);
      f.mean += distance / static_cast<double>(jobs_.size());
      f.within_5 += distance <= 0.05;
      f.batches += job.batches_counted;
    }
    f.pool_busy = time / 1000 / (o_.seconds * s_.workers);
  }

  const Scale s_;
  const Options& o_;
  FakeClock clock_;
  PosixEnv env_;
  std::unique_ptr<coordinator::CoordinatorImpl> impl_;
  std::vector<JobSpec> spec_;
  std::vector<SimJob> jobs_;
  std::vector<SimWorker> workers_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::map<coordinator::RequestHandle, std::pair<uint32_t, uint32_t>> parked_;  // -> (worker, stream)
  coordinator::RequestHandle next_handle_ = 1;
  uint64_t membership_ = 0;
  Duration now_{0};
  Duration warmup_{0};
  uint64_t ops_ = 0;
  double cpu_ = 0;
  uint64_t refused_ = 0;  // reports and heartbeats the coordinator refused (a lease or rank lost)
};

// Samples that are never read (the scheduler is all that is measured): 100 steps an epoch at the full scale.
StatusOr<std::string> Manifest(const Options& o) {
  STOKER_RETURN_IF_ERROR(bench::FreshDirectory(o.dir));
  PosixEnv env;
  ManifestWriter writer(o.dir, SourceKind::kTarShards);
  const uint32_t shard = writer.AddShard("never-read.tar", uint64_t{1} << 40, 0);
  const uint64_t samples = uint64_t{100} * kBatchSize * o.ranks;
  for (uint64_t i = 0; i < samples; ++i) writer.AddSample(shard, 512 * i, 1, static_cast<int64_t>(i % 1000), ImageFormat::kJpeg, "");
  const std::string path = o.dir + "/samples.stoker";
  STOKER_RETURN_IF_ERROR(writer.Write(env, path, "scheduler_bench").status());
  return path;
}

void Print(const char* name, const Scale& s, const Figures& f) {
  std::printf("%s: %u workers, %u jobs x %u ranks, %u teams\n", name, s.workers, s.jobs, s.ranks, s.teams);
  std::printf("  %.0f operations/s on one core (%.1f s of coordinator CPU), %.0f MB resident, registering a "
              "client %.3f ms\n", f.ops, f.cpu, f.rss_mb, f.register_ms_per_client);
  std::printf("  shares of the workers' time: %u of %u jobs within 5 %% of fair, worst %.1f %%, mean %.1f %%; "
              "pool %.1f %% busy, %llu batches, %llu reports or heartbeats refused\n", f.within_5, f.jobs,
              100 * f.worst, 100 * f.mean, 100 * f.pool_busy, static_cast<unsigned long long>(f.batches),
              static_cast<unsigned long long>(f.refused));
  std::fflush(stdout);
}

std::string Json(const Scale& s, const Figures& f) {
  std::ostringstream j;
  j << "{\"workers\": " << s.workers << ", \"jobs\": " << s.jobs << ", \"ranks_per_job\": " << s.ranks
    << ", \"teams\": " << s.teams << ", \"ops_per_second\": " << f.ops << ", \"coordinator_cpu_seconds\": " << f.cpu
    << ", \"rss_mb\": " << f.rss_mb << ", \"register_client_ms\": " << f.register_ms_per_client
    << ", \"jobs_within_5_percent\": " << f.within_5 << ", \"worst_share_distance\": " << f.worst
    << ", \"mean_share_distance\": " << f.mean << ", \"pool_busy\": " << f.pool_busy << "}";
  return j.str();
}

void AddFlags(FlagSet& flags, Options& o) {
  flags.AddUint32("workers", &o.workers, "simulated workers, one pipeline thread each");
  flags.AddUint32("jobs", &o.jobs, "jobs, every one hungry");
  flags.AddUint32("ranks", &o.ranks, "ranks per job, each with its own client");
  flags.AddUint32("teams", &o.teams, "teams the jobs are dealt to, of weights 1, 2, 3, 1, ...");
  flags.AddUint32("window", &o.window, "each rank's prefetch window, in batches (ClientOptions' default)");
  flags.AddUint32("dear", &o.dear, "how many times a cheap job's batch time every fourth job's takes");
  flags.AddUint32("seed", &o.seed, "how the ranks are dealt to the workers");
  flags.AddUint32("streams", &o.streams, "ranks each worker holds credit for (a client's connections)");
  flags.AddDouble("warmup", &o.warmup, "simulated seconds before the figures start");
  flags.AddBool("verbose", &o.verbose, "every job's share");
  flags.AddBool("baseline", &o.baseline, "also run the simulation at a tenth of the scale, first (the ratio)");
  bench::AddCommonFlags(flags, o, "simulated seconds measured", {bench::CommonFlag::kDir});
}

bench::Outcome RunBench(const Options& o) {
  SetLogLevel(LogLevel::kWarning);  // a line per registration is not what is measured
  auto manifest = Manifest(o);
  bench::DieUnlessOk(manifest.status(), "manifest");
  const Scale full{o.workers, o.jobs, o.ranks, o.teams};
  std::string json = "{\"full\": ";
  Figures base;
  const Scale tenth{std::max<uint32_t>(1, o.workers / 10), std::max<uint32_t>(1, o.jobs / 10), o.ranks,
                    std::max<uint32_t>(1, o.teams / 10)};
  if (o.baseline) {
    base = Sim(tenth, *manifest, o).Run();
    Print("baseline (a tenth)", tenth, base);
  }
  const Figures f = Sim(full, *manifest, o).Run();
  Print("full scale", full, f);
  json += Json(full, f);
  if (o.baseline) {
    std::printf("operations/s at full scale / at a tenth: %.2f\n", base.ops > 0 ? f.ops / base.ops : 0);
    json += ", \"baseline\": " + Json(tenth, base) + ", \"ops_ratio\": " + std::to_string(base.ops > 0 ? f.ops / base.ops : 0);
  }
  const bool met = f.ops >= 20000 && f.within_5 == f.jobs;
  std::printf("goal (>= 20,000 operations/s, every job within 5 %% of its fair share): %s\n", met ? "met" : "not met");
  return {0, json + "}"};
}

}  // namespace
}  // namespace stoker

STOKER_BENCH_MAIN("scheduler_bench",
                  "The coordinator's scheduler at 10,000 workers, 200 jobs and 20,000 ranks, simulated on one core: "
                  "operations per second, memory, and each job's share of the workers' time against its fair share.");
