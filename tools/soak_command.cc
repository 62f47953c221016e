// stoker soak: the long fault test. It runs job after job (several epochs each) on a local cluster while Chaos
// kills, stops, restarts and partitions its processes at random, and also crashes training clients and restarts
// them from their checkpoint tokens. After every job the checker judges every epoch of every rank: lost,
// duplicated, unexpected and corrupt must all be zero. It also samples the servers' memory, descriptors and the
// journal's size, which must stay flat. Prints a line per job and a summary; --summary-json writes it.
#include <dirent.h>
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "dataset/checkpoint.h"
#include "tools/dataset_index.h"
#include "tools/delivery_check.h"
#include "base/flags.h"
#include "base/json_writer.h"
#include "tools/chaos.h"
#include "tools/commands.h"
#include "tools/delivery_log.h"
#include "tools/local_cluster.h"
#include "tools/soak_bounds.h"

namespace stoker::tools {
namespace {

struct ProcessSample {
  uint64_t rss_kb = 0;
  uint64_t fds = 0;
};

ProcessSample Sample(pid_t pid) {
  ProcessSample s;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) s.rss_kb = std::stoull(line.substr(6));
  }
  if (DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str())) {
    while (::readdir(d) != nullptr) ++s.fds;
    ::closedir(d);
  }
  return s;
}

// One rank's consumer processes over a job: each restart resumes from the previous one's checkpoint token, so
// the previous log counts only below the token's position.
struct RankRun {
  std::vector<size_t> incarnations;   // consumer indices in the cluster
  std::vector<uint64_t> cut;          // per incarnation: keep logged batches with global index < cut
  std::string checkpoint;             // token file
};

struct JobResult {
  bool ok = true;
  std::vector<EpochVerdict> verdicts;
  uint64_t client_restarts = 0;
  std::string error;
};

// The command's flags, as parsed.
struct SoakOptions {
  double minutes = 20;
  std::string data = "stoker-soak-data", summary_json;
  uint64_t images = 480, seed = 1;
  uint32_t workers = 4, ranks = 2, batch = 8, epochs = 3;
  int64_t fault_interval_ms = 1500;
};

StatusOr<SoakOptions> ParseSoakFlags(int argc, char** argv) {
  SoakOptions o;
  std::string interval = "1500ms";
  FlagSet flags("stoker soak [flags]",
                "Runs jobs back to back for --minutes on a local cluster while faults are injected at random "
                "(worker kill -9 and SIGTERM, coordinator kill -9 and restart on its journal, SIGSTOP past the "
                "lease, partitions and TCP resets, training-client crashes resumed from checkpoints), and checks "
                "every epoch delivered every planned sample exactly once.");
  flags.AddDouble("minutes", &o.minutes, "how long to run");
  flags.AddString("data", &o.data, "working directory (dataset, logs, journal)");
  flags.AddUint("images", &o.images, "images in the generated dataset");
  flags.AddUint32("workers", &o.workers, "workers kept running");
  flags.AddUint32("ranks", &o.ranks, "ranks per job");
  flags.AddUint32("batch-size", &o.batch, "samples per batch");
  flags.AddUint32("epochs", &o.epochs, "epochs per job");
  flags.AddString("fault-interval", &interval, "mean time between faults");
  flags.AddUint("seed", &o.seed, "seed of the fault schedule and the jobs");
  flags.AddString("summary-json", &o.summary_json, "write the summary here");
  STOKER_RETURN_IF_ERROR(flags.Parse(argc, argv, 2));
  auto interval_ms = ParseDurationMs(interval);
  if (!interval_ms.ok()) return interval_ms.status().WithContext("--fault-interval");
  o.fault_interval_ms = *interval_ms;
  return o;
}

// What the judged epochs added up to.
struct SoakTotals : DeliveryTotals {
  uint64_t jobs = 0, epochs_checked = 0, epochs_failed = 0, client_restarts = 0;
};

// The coordinator's memory and descriptors after each job, and the journal's size while jobs run and after each.
struct ResourceSamples {
  ProcessSample coordinator_first, coordinator_last;
  uint64_t journal_first = 0, journal_max = 0;
  std::vector<uint64_t> rss_kb, fds, journal_bytes;
};

// Runs the jobs, one after another, on a cluster under chaos, and judges each.
class Soak {
 public:
  Soak(Env& env, const SoakOptions& options, std::string manifest, LocalCluster& cluster, Chaos& chaos)
      : env_(env), o_(options), manifest_(std::move(manifest)), cluster_(cluster), chaos_(chaos),
        rng_(options.seed * 7919), journal_(options.data + "/run/coordinator.journal") {}

  // Jobs until `deadline` or the first that fails its check. An error is the harness's own failure.
  Status Run(std::chrono::steady_clock::time_point deadline) {
    resources_.coordinator_first = Sample(cluster_.coordinator().pid());
    while (std::chrono::steady_clock::now() < deadline) {
      STOKER_ASSIGN_OR_RETURN(bool job_ran_clean, RunJob());
      if (!job_ran_clean) break;
    }
    return Status::Ok();
  }

  const SoakTotals& totals() const { return totals_; }
  const ResourceSamples& resources() const { return resources_; }

 private:
  JobSpec NextSpec() const {
    JobSpec spec;
    spec.name = "soak-" + std::to_string(totals_.jobs);
    spec.manifest_path = manifest_;
    spec.world_size = o_.ranks;
    spec.batch_size = o_.batch;
    spec.epochs = o_.epochs;
    spec.seed = o_.seed + totals_.jobs;
    spec.remainder = totals_.jobs % 2 ? Remainder::kPad : Remainder::kDrop;
    return spec;
  }

  // One job: its consumers run to the end under chaos, then every epoch is judged. False if the job failed.
  StatusOr<bool> RunJob() {
    ++totals_.jobs;
    const JobSpec spec = NextSpec();
    STOKER_ASSIGN_OR_RETURN(Plan plan, Plan::Make(spec, o_.images));
    std::vector<RankRun> runs(o_.ranks);
    for (uint32_t r = 0; r < o_.ranks; ++r) STOKER_RETURN_IF_ERROR(StartConsumer(spec, r, false, runs));
    STOKER_ASSIGN_OR_RETURN(JobResult result, DriveJob(spec, runs));
    chaos_.Calm();
    Judge(spec, plan, runs, result);
    resources_.coordinator_last = Sample(cluster_.coordinator().pid());
    resources_.rss_kb.push_back(resources_.coordinator_last.rss_kb);
    resources_.fds.push_back(resources_.coordinator_last.fds);
    if (auto info = env_.Stat(journal_); info.ok()) resources_.journal_bytes.push_back(info->size);
    return result.ok;
  }

  Status StartConsumer(const JobSpec& spec, uint32_t r, bool resume, std::vector<RankRun>& runs) {
    RankRun& run = runs[r];
    run.checkpoint = o_.data + "/run/" + spec.name + "-rank" + std::to_string(r) + ".ckpt";
    std::vector<std::string> extra = {"--hold-ms", "15", "--checkpoint-every", "4", "--checkpoint-file",
                                      run.checkpoint, "--stall-timeout", "120s"};
    if (resume) {
      for (const char* f : {"--resume-from", run.checkpoint.c_str(), "--claim-timeout", "60s"}) extra.push_back(f);
    }
    std::string name = spec.name + "-r" + std::to_string(r) + "-" + std::to_string(run.incarnations.size());
    STOKER_ASSIGN_OR_RETURN(size_t id, cluster_.StartConsumer(name, spec, r, extra));
    run.incarnations.push_back(id);
    run.cut.push_back(UINT64_MAX);
    return Status::Ok();
  }

  // Injects faults until every rank's consumer has finished, one fails, or ten minutes pass.
  StatusOr<JobResult> DriveJob(const JobSpec& spec, std::vector<RankRun>& runs) {
    JobResult result;
    auto job_started = std::chrono::steady_clock::now();
    while (true) {
      if (ConsumersDone(runs, &result) || !result.ok) break;
      if (std::chrono::steady_clock::now() - job_started > std::chrono::minutes(10)) {
        result.ok = false;
        result.error = "job did not finish within 10 minutes";
        break;
      }
      STOKER_ASSIGN_OR_RETURN(std::vector<std::string> did, chaos_.Step());
      for (const auto& d : did) lines_.push_back("  job " + std::to_string(totals_.jobs) + ": " + d);
      // Now and then, a training process crashes and comes back from its last checkpoint.
      if (std::uniform_int_distribution<int>(0, 200)(rng_) == 0) {
        STOKER_RETURN_IF_ERROR(CrashAClient(spec, runs, &result));
      }
      uint64_t journal = 0;
      if (auto info = env_.Stat(journal_); info.ok()) journal = info->size;
      if (resources_.journal_first == 0) resources_.journal_first = journal;
      resources_.journal_max = std::max(resources_.journal_max, journal);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the driver's tick
    }
    return result;
  }

  // True when no rank's latest consumer runs; a consumer that exited with an error fails the job.
  bool ConsumersDone(std::vector<RankRun>& runs, JobResult* result) {
    bool all_done = true;
    for (uint32_t r = 0; r < o_.ranks; ++r) {
      Subprocess& c = cluster_.consumer(runs[r].incarnations.back());
      if (c.running()) {
        all_done = false;
      } else if (auto code = c.Wait(std::chrono::milliseconds(0)); code && *code != 0) {
        result->ok = false;
        result->error = "rank " + std::to_string(r) + " consumer failed: " +
                        cluster_.ConsumerOutput(runs[r].incarnations.back());
      }
    }
    return all_done;
  }

  // Kills one rank's training client and starts another from the checkpoint token it left.
  Status CrashAClient(const JobSpec& spec, std::vector<RankRun>& runs, JobResult* result) {
    uint32_t r = std::uniform_int_distribution<uint32_t>(0, o_.ranks - 1)(rng_);
    Subprocess& c = cluster_.consumer(runs[r].incarnations.back());
    auto token_text = ReadWholeFile(env_, runs[r].checkpoint);
    if (!c.running() || !token_text.ok()) return Status::Ok();
    c.Kill();
    auto token = DecodeCheckpointToken(*token_text);
    // Read the token again after the kill: it may have been rewritten just before.
    if (auto again = ReadWholeFile(env_, runs[r].checkpoint); again.ok()) token = DecodeCheckpointToken(*again);
    if (!token.ok()) return Status::Ok();
    runs[r].cut.back() = token->position;
    STOKER_RETURN_IF_ERROR(StartConsumer(spec, r, true, runs));
    ++result->client_restarts;
    lines_.push_back("  job " + std::to_string(totals_.jobs) + ": kill -9 the training client of rank " +
                     std::to_string(r) + ", resumed from its checkpoint at batch " + std::to_string(token->position));
    return Status::Ok();
  }

  // Judges every epoch of every rank from the consumers' logs and prints the job's line and what chaos did.
  void Judge(const JobSpec& spec, const Plan& plan, const std::vector<RankRun>& runs, const JobResult& result) {
    DeliveryChecker checker(plan);
    for (const RankRun& run : runs) {
      for (size_t k = 0; k < run.incarnations.size(); ++k) {
        auto entries = ReadDeliveryLog(env_, cluster_.ConsumerLog(run.incarnations[k]));
        if (!entries.ok()) continue;  // killed before it logged anything
        for (const auto& e : *entries) {
          if (plan.GlobalBatch(e.batch.epoch, e.batch.index) < run.cut[k]) checker.Record(e.batch);
        }
      }
    }
    std::ostringstream line;
    line << "job " << totals_.jobs << " (" << spec.name << ", " << RemainderName(spec.remainder) << "): ";
    bool job_good = result.ok;
    for (uint32_t e = 0; e < o_.epochs; ++e) {
      EpochVerdict v = checker.Check(e);
      bool good = v.ok() && v.balanced(plan.steps_per_epoch()) && result.ok;
      job_good = job_good && good;
      Count(v, good);
      if (!good) line << "\n  FAIL " << v.Describe();
    }
    totals_.client_restarts += result.client_restarts;
    line << o_.epochs << " epochs " << (job_good ? "exact" : "CHECK FAILED") << "; "
         << std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_).count()
         << " s elapsed";
    if (!result.ok) line << "\n  " << result.error;
    std::fprintf(stderr, "%s\n", line.str().c_str());
    for (const auto& l : lines_) std::fprintf(stderr, "%s\n", l.c_str());
    lines_.clear();
  }

  void Count(const EpochVerdict& v, bool good) {
    ++totals_.epochs_checked;
    totals_.epochs_failed += !good;
    totals_.Add(v);
  }

  Env& env_;
  const SoakOptions& o_;
  const std::string manifest_;
  LocalCluster& cluster_;
  Chaos& chaos_;
  std::mt19937_64 rng_;
  const std::string journal_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  SoakTotals totals_;
  ResourceSamples resources_;
  std::vector<std::string> lines_;  // what happened during the job, printed after its verdict
};

unsigned long long Llu(uint64_t v) { return static_cast<unsigned long long>(v); }

void PrintSummary(const SoakTotals& t, const Chaos& chaos, const ResourceSamples& r) {
  std::fprintf(stderr,
               "\nsoak: %llu jobs, %llu epochs checked, %llu failed; %llu samples planned, %llu delivered, %llu "
               "duplicates, %llu lost; %llu client restarts from checkpoints\n",
               Llu(t.jobs), Llu(t.epochs_checked), Llu(t.epochs_failed), Llu(t.planned), Llu(t.delivered),
               Llu(t.duplicates), Llu(t.lost), Llu(t.client_restarts));
  std::fprintf(stderr, "faults:");
  for (const auto& [kind, n] : chaos.counts()) std::fprintf(stderr, " %s=%llu", kind.c_str(), Llu(n));
  std::fprintf(stderr,
               "\ncoordinator (last incarnation): RSS %llu KB, %llu fds; journal %llu bytes at first, %llu at most\n",
               Llu(r.coordinator_last.rss_kb), Llu(r.coordinator_last.fds), Llu(r.journal_first), Llu(r.journal_max));
}

// Row 22: nothing a long run does may make the coordinator or its journal grow. The coordinator is restarted by the
// chaos now and then, which only lowers what follows; the journal compacts at 1 MiB.
bool JudgeResources(const ResourceSamples& r) {
  const std::vector<FlatVerdict> flat = {
      JudgeFlat("coordinator RSS", r.rss_kb, 1.25, 16 << 10, 512 << 10, " KB"),
      JudgeFlat("coordinator open descriptors", r.fds, 1.0, 16, 4096),
      JudgeFlat("journal size", r.journal_bytes, 1.0, 1 << 20, 2 << 20, " bytes")};
  bool all_flat = true;
  for (const FlatVerdict& v : flat) {
    std::fprintf(stderr, "%s\n", v.describe.c_str());
    all_flat = all_flat && v.flat;
  }
  return all_flat;
}

void WriteSummaryJson(const std::string& path, bool ok, bool all_flat, double minutes, const SoakTotals& t,
                      const Chaos& chaos, const ResourceSamples& r) {
  JsonWriter j;
  j.BeginObject()
      .Key("ok").Value(ok)
      .Key("resources_flat").Value(all_flat)
      .Key("minutes").Value(minutes)
      .Key("jobs").Value(t.jobs)
      .Key("epochs_checked").Value(t.epochs_checked)
      .Key("epochs_failed").Value(t.epochs_failed);
  WriteDeliveryCounts(j, t)
      .Key("client_restarts").Value(t.client_restarts)
      .Key("faults").BeginObject();
  for (const auto& [kind, n] : chaos.counts()) j.Key(kind).Value(n);
  j.EndObject()
      .Key("coordinator_rss_kb_first").Value(r.coordinator_first.rss_kb)
      .Key("coordinator_rss_kb_last").Value(r.coordinator_last.rss_kb)
      .Key("coordinator_fds_last").Value(r.coordinator_last.fds)
      .Key("journal_bytes_first").Value(r.journal_first)
      .Key("journal_bytes_max").Value(r.journal_max)
      .EndObject();
  std::ofstream(path, std::ios::trunc) << j.str() << "\n";
}

}  // namespace

int SoakCommand(int argc, char** argv) {
  auto options = ParseSoakFlags(argc, argv);
  if (!options.ok()) return Fail("soak", options.status());
  const SoakOptions& o = *options;
  PosixEnv env;
  if (Status s = env.CreateDirectories(o.data + "/run"); !s.ok()) return Fail("soak", s);
  auto manifest = GeneratedDataset(env, o.data, "soak", o.images, 64);
  if (!manifest.ok()) return Fail("soak", manifest.status());
  std::remove((o.data + "/run/coordinator.journal").c_str());
  // Jobs are forgotten soon after they end, and the journal compacts at 1 MB: over a long soak, the coordinator's
  // memory and the journal must stay flat, not grow with the number of jobs run. A killed training client's rank
  // is free again after the client timeout (3 s here), which its restarted process waits for (--claim-timeout).
  LocalCluster cluster({o.data + "/run", "", true,
                        {"--log-level", "info", "--job-retention", "5s", "--journal-compact-bytes", "1048576",
                         "--client-timeout", "3s"}});
  if (Status s = cluster.StartCoordinator(); !s.ok()) return Fail("soak", s);
  ChaosOptions chaos_options;
  chaos_options.min_interval = std::chrono::milliseconds(o.fault_interval_ms / 2);
  chaos_options.max_interval = std::chrono::milliseconds(o.fault_interval_ms * 3 / 2);
  chaos_options.seed = o.seed;
  Chaos chaos(cluster, chaos_options);
  for (uint32_t i = 0; i < o.workers; ++i) {
    if (auto w = chaos.StartWorker(); !w.ok()) return Fail("soak", w.status());
  }
  Soak soak(env, o, *manifest, cluster, chaos);
  auto start = std::chrono::steady_clock::now();
  if (Status s = soak.Run(start + std::chrono::milliseconds(static_cast<int64_t>(o.minutes * 60'000))); !s.ok()) {
    return Fail("soak", s);
  }
  const SoakTotals& totals = soak.totals();
  PrintSummary(totals, chaos, soak.resources());
  const bool all_flat = JudgeResources(soak.resources());
  const bool ok = totals.epochs_failed == 0 && totals.epochs_checked > 0 && all_flat;
  if (!o.summary_json.empty()) {
    const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 60;
    WriteSummaryJson(o.summary_json, ok, all_flat, minutes, totals, chaos, soak.resources());
  }
  return ok ? 0 : 1;
}

}  // namespace stoker::tools
