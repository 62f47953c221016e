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
#include "dataset/manifest.h"
#include "tools/chaos.h"
#include "tools/commands.h"
#include "tools/delivery_log.h"
#include "tools/local_cluster.h"
#include "tools/soak_bounds.h"
#include "datagen/synthetic_dataset.h"

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

}  // namespace

int SoakCommand(int argc, char** argv) {
  double minutes = 20;
  std::string data = "stoker-soak-data", summary_json;
  uint64_t images = 480, seed = 1;
  uint32_t workers = 4, ranks = 2, batch = 8, epochs = 3;
  std::string interval = "1500ms";
  FlagSet flags("stoker soak [flags]",
                "Runs jobs back to back for --minutes on a local cluster while faults are injected at random "
                "(worker kill -9 and SIGTERM, coordinator kill -9 and restart on its journal, SIGSTOP past the "
                "lease, partitions and TCP resets, training-client crashes resumed from checkpoints), and checks "
                "every epoch delivered every planned sample exactly once.");
  flags.AddDouble("minutes", &minutes, "how long to run");
  flags.AddString("data", &data, "working directory (dataset, logs, journal)");
  flags.AddUint("images", &images, "images in the generated dataset");
  flags.AddUint32("workers", &workers, "workers kept running");
  flags.AddUint32("ranks", &ranks, "ranks per job");
  flags.AddUint32("batch-size", &batch, "samples per batch");
  flags.AddUint32("epochs", &epochs, "epochs per job");
  flags.AddString("fault-interval", &interval, "mean time between faults");
  flags.AddUint("seed", &seed, "seed of the fault schedule and the jobs");
  flags.AddString("summary-json", &summary_json, "write the summary here");
  Status parsed = flags.Parse(argc, argv, 2);
  if (!parsed.ok()) return Fail("soak", parsed);
  auto interval_ms = ParseDurationMs(interval);
  if (!interval_ms.ok()) return Fail("soak", interval_ms.status().WithContext("--fault-interval"));

  PosixEnv env;
  if (Status s = env.CreateDirectories(data + "/run"); !s.ok()) return Fail("soak", s);
  std::string manifest = data + "/soak.stoker";
  if (auto existing = Manifest::Open(env, manifest); !existing.ok() || (*existing)->num_samples() != images) {
    datagen::GenerateOptions gen;
    gen.images = images;
    gen.per_shard = 64;
    if (Status s = datagen::GenerateTarDataset(env, data + "/shards", gen); !s.ok()) return Fail("soak", s);
    if (auto r = IndexDataset(env, data + "/shards", manifest, IndexOptions{}); !r.ok()) return Fail("soak", r.status());
  }
  std::remove((data + "/run/coordinator.journal").c_str());
  // Jobs are forgotten soon after they end, and the journal compacts at 1 MB: over a long soak, the coordinator's
  // memory and the journal must stay flat, not grow with the number of jobs run. A killed training client's rank
  // is free again after the client timeout (3 s here), which its restarted process waits for (--claim-timeout).
  LocalCluster cluster({data + "/run", "", true,
                        {"--log-level", "info", "--job-retention", "5s", "--journal-compact-bytes", "1048576",
                         "--client-timeout", "3s"}});
  if (Status s = cluster.StartCoordinator(); !s.ok()) return Fail("soak", s);
  ChaosOptions chaos_options;
  chaos_options.min_interval = std::chrono::milliseconds(*interval_ms / 2);
  chaos_options.max_interval = std::chrono::milliseconds(*interval_ms * 3 / 2);
  chaos_options.seed = seed;
  Chaos chaos(cluster, chaos_options);
  for (uint32_t i = 0; i < workers; ++i) {
    if (auto w = chaos.StartWorker(); !w.ok()) return Fail("soak", w.status());
  }
  std::mt19937_64 rng(seed * 7919);

  auto start = std::chrono::steady_clock::now();
  auto deadline = start + std::chrono::milliseconds(static_cast<int64_t>(minutes * 60'000));
  ProcessSample coordinator_first = Sample(cluster.coordinator().pid());
  uint64_t journal_first = 0, journal_max = 0;
  std::vector<uint64_t> rss_samples, fd_samples, journal_samples;  // the coordinator's, after each job
  std::vector<std::string> lines;
  uint64_t jobs = 0, epochs_checked = 0, epochs_failed = 0, client_restarts = 0;
  uint64_t total_planned = 0, total_delivered = 0, total_dup = 0, total_lost = 0, total_quarantined = 0;
  ProcessSample coordinator_last;

  while (std::chrono::steady_clock::now() < deadline) {
    ++jobs;
    JobSpec spec;
    spec.name = "soak-" + std::to_string(jobs);
    spec.manifest_path = manifest;
    spec.world_size = ranks;
    spec.batch_size = batch;
    spec.epochs = epochs;
    spec.seed = seed + jobs;
    spec.remainder = jobs % 2 ? Remainder::kPad : Remainder::kDrop;
    auto plan = Plan::Make(spec, images);
    if (!plan.ok()) return Fail("soak", plan.status());
    std::vector<RankRun> runs(ranks);
    auto start_consumer = [&](uint32_t r, bool resume) -> Status {
      RankRun& run = runs[r];
      run.checkpoint = data + "/run/" + spec.name + "-rank" + std::to_string(r) + ".ckpt";
      std::vector<std::string> extra = {"--hold-ms", "15", "--checkpoint-every", "4", "--checkpoint-file",
                                        run.checkpoint, "--stall-timeout", "120s"};
      if (resume) {
        for (const char* f : {"--resume-from", run.checkpoint.c_str(), "--claim-timeout", "60s"}) extra.push_back(f);
      }
      std::string name = spec.name + "-r" + std::to_string(r) + "-" + std::to_string(run.incarnations.size());
      STOKER_ASSIGN_OR_RETURN(size_t id, cluster.StartConsumer(name, spec, r, extra));
      run.incarnations.push_back(id);
      run.cut.push_back(UINT64_MAX);
      return Status::Ok();
    };
    for (uint32_t r = 0; r < ranks; ++r) {
      if (Status s = start_consumer(r, false); !s.ok()) return Fail("soak", s);
    }
    JobResult result;
    auto job_started = std::chrono::steady_clock::now();
    while (true) {
      bool all_done = true;
      for (uint32_t r = 0; r < ranks; ++r) {
        Subprocess& c = cluster.consumer(runs[r].incarnations.back());
        if (c.running()) {
          all_done = false;
        } else if (auto code = c.Wait(std::chrono::milliseconds(0)); code && *code != 0) {
          result.ok = false;
          result.error = "rank " + std::to_string(r) + " consumer failed: " +
                         cluster.ConsumerOutput(runs[r].incarnations.back());
        }
      }
      if (all_done || !result.ok) break;
      if (std::chrono::steady_clock::now() - job_started > std::chrono::minutes(10)) {
        result.ok = false;
        result.error = "job did not finish within 10 minutes";
        break;
      }
      auto did = chaos.Step();
      if (!did.ok()) return Fail("soak", did.status());
      for (const auto& d : *did) lines.push_back("  job " + std::to_string(jobs) + ": " + d);
      // Now and then, a training process crashes and comes back from its last checkpoint.
      if (std::uniform_int_distribution<int>(0, 200)(rng) == 0) {
        uint32_t r = std::uniform_int_distribution<uint32_t>(0, ranks - 1)(rng);
        Subprocess& c = cluster.consumer(runs[r].incarnations.back());
        auto token_text = ReadWholeFile(env, runs[r].checkpoint);
        if (c.running() && token_text.ok()) {
          c.Kill();
          auto token = DecodeCheckpointToken(*token_text);
          // Read the token again after the kill: it may have been rewritten just before.
          if (auto again = ReadWholeFile(env, runs[r].checkpoint); again.ok()) token = DecodeCheckpointToken(*again);
          if (token.ok()) {
            runs[r].cut.back() = token->position;
            if (Status s = start_consumer(r, true); !s.ok()) return Fail("soak", s);
            ++result.client_restarts;
            lines.push_back("  job " + std::to_string(jobs) + ": kill -9 the training client of rank " +
                            std::to_string(r) + ", resumed from its checkpoint at batch " +
                            std::to_string(token->position));
          }
        }
      }
      uint64_t journal = 0;
      if (auto info = env.Stat(data + "/run/coordinator.journal"); info.ok()) journal = info->size;
      if (journal_first == 0) journal_first = journal;
      journal_max = std::max(journal_max, journal);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the driver's tick
    }
    chaos.Calm();
    // Judge every epoch of every rank.
    DeliveryChecker checker(*plan);
    for (const RankRun& run : runs) {
      for (size_t k = 0; k < run.incarnations.size(); ++k) {
        auto entries = ReadDeliveryLog(env, cluster.ConsumerLog(run.incarnations[k]));
        if (!entries.ok()) continue;  // killed before it logged anything
        for (const auto& e : *entries) {
          if (plan->GlobalBatch(e.batch.epoch, e.batch.index) < run.cut[k]) checker.Record(e.batch);
        }
      }
    }
    std::ostringstream line;
    line << "job " << jobs << " (" << spec.name << ", " << RemainderName(spec.remainder) << "): ";
    bool job_good = result.ok;
    for (uint32_t e = 0; e < epochs; ++e) {
      EpochVerdict v = checker.Check(e);
      bool good = v.ok() && v.balanced(plan->steps_per_epoch()) && result.ok;
      job_good = job_good && good;
      ++epochs_checked;
      epochs_failed += !good;
      total_planned += v.planned_real;
      total_delivered += v.delivered;
      total_dup += v.duplicated;
      total_lost += v.lost;
      total_quarantined += v.quarantined;
      if (!good) line << "\n  FAIL " << v.Describe();
    }
    client_restarts += result.client_restarts;
    line << epochs << " epochs " << (job_good ? "exact" : "CHECK FAILED") << "; "
         << std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start).count()
         << " s elapsed";
    if (!result.ok) line << "\n  " << result.error;
    std::fprintf(stderr, "%s\n", line.str().c_str());
    for (const auto& l : lines) std::fprintf(stderr, "%s\n", l.c_str());
    lines.clear();
    coordinator_last = Sample(cluster.coordinator().pid());
    rss_samples.push_back(coordinator_last.rss_kb);
    fd_samples.push_back(coordinator_last.fds);
    if (auto info = env.Stat(data + "/run/coordinator.journal"); info.ok()) journal_samples.push_back(info->size);
    if (!result.ok) break;
  }

  std::fprintf(stderr,
               "\nsoak: %llu jobs, %llu epochs checked, %llu failed; %llu samples planned, %llu delivered, %llu "
               "duplicates, %llu lost; %llu client restarts from checkpoints\n",
               static_cast<unsigned long long>(jobs), static_cast<unsigned long long>(epochs_checked),
               static_cast<unsigned long long>(epochs_failed), static_cast<unsigned long long>(total_planned),
               static_cast<unsigned long long>(total_delivered), static_cast<unsigned long long>(total_dup),
               static_cast<unsigned long long>(total_lost), static_cast<unsigned long long>(client_restarts));
  std::fprintf(stderr, "faults:");
  for (const auto& [kind, n] : chaos.counts()) std::fprintf(stderr, " %s=%llu", kind.c_str(), static_cast<unsigned long long>(n));
  std::fprintf(stderr, "\ncoordinator (last incarnation): RSS %llu KB, %llu fds; journal %llu bytes at first, %llu at most\n",
               static_cast<unsigned long long>(coordinator_last.rss_kb), static_cast<unsigned long long>(coordinator_last.fds),
               static_cast<unsigned long long>(journal_first), static_cast<unsigned long long>(journal_max));
  // Row 22: nothing a long run does may make the coordinator or its journal grow. The coordinator is restarted
  // by the chaos now and then, which only lowers what follows; the journal compacts at 1 MiB.
  const std::vector<FlatVerdict> flat = {
      JudgeFlat("coordinator RSS", rss_samples, 1.25, 16 << 10, 512 << 10, " KB"),
      JudgeFlat("coordinator open descriptors", fd_samples, 1.0, 16, 4096),
      JudgeFlat("journal size", journal_samples, 1.0, 1 << 20, 2 << 20, " bytes")};
  bool all_flat = true;
  for (const FlatVerdict& v : flat) {
    std::fprintf(stderr, "%s\n", v.describe.c_str());
    all_flat = all_flat && v.flat;
  }
  const bool ok = epochs_failed == 0 && epochs_checked > 0 && all_flat;
  if (!summary_json.empty()) {
    JsonWriter j;
    j.BeginObject()
        .Key("ok").Value(ok)
        .Key("resources_flat").Value(all_flat)
        .Key("minutes").Value(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 60)
        .Key("jobs").Value(jobs)
        .Key("epochs_checked").Value(epochs_checked)
        .Key("epochs_failed").Value(epochs_failed)
        .Key("samples_planned").Value(total_planned)
        .Key("samples_delivered").Value(total_delivered)
        .Key("duplicates").Value(total_dup)
        .Key("lost").Value(total_lost)
        .Key("quarantined").Value(total_quarantined)
        .Key("client_restarts").Value(client_restarts)
        .Key("faults").BeginObject();
    for (const auto& [kind, n] : chaos.counts()) j.Key(kind).Value(n);
    j.EndObject()
        .Key("coordinator_rss_kb_first").Value(coordinator_first.rss_kb)
        .Key("coordinator_rss_kb_last").Value(coordinator_last.rss_kb)
        .Key("coordinator_fds_last").Value(coordinator_last.fds)
        .Key("journal_bytes_first").Value(journal_first)
        .Key("journal_bytes_max").Value(journal_max)
        .EndObject();
    std::ofstream(summary_json, std::ios::trunc) << j.str() << "\n";
  }
  return ok ? 0 : 1;
}

}  // namespace stoker::tools
