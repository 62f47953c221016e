// stoker consume: one rank's client as a process. It receives every batch of the job in order, writes the
// delivery log (tools/delivery_log.h) that `stoker check` and the tests judge, and a JSON summary.
#include <cstdio>
#include <fstream>
#include <thread>

#include "client/src/client_flags.h"
#include "stoker/client.h"
#include "base/flags.h"
#include "base/hash.h"
#include "base/json_writer.h"
#include "base/logging.h"
#include "tools/commands.h"
#include "tools/delivery_log.h"
#include "dataset/job_spec_flags.h"

namespace stoker::tools {
namespace {

// The command's flags, as parsed.
struct ConsumeOptions {
  ClientOptions client;
  JobSpec spec;
  bool attach = false;
  std::string log_path, summary_path, checkpoint_file, metrics_address_file;
  int64_t stall_ms = 60'000;
  uint32_t hold_ms = 0, pause_ms = 0;
  uint64_t max_batches = 0, checkpoint_every = 0, pause_after = 0;
};

// The client's own flags: where, which job and rank, how much to prefetch, its keys, and where to log.
void AddClientFlags(FlagSet& flags, ConsumeOptions* o) {
  flags.AddString("coordinator", &o->client.coordinator,
                  "coordinator control endpoint, or 'local': start a coordinator and workers on this machine");
  client::AddLocalModeFlags(flags, &o->client);
  AddJobSpecFlags(flags, &o->spec);
  flags.AddUint32("rank", &o->client.rank, "rank to claim");
  flags.AddBool("attach", &o->attach, "join an existing job without sending its spec");
  flags.AddUint32("prefetch", &o->client.prefetch, "batches held at once (the lease window)");
  flags.AddUint32("credits", &o->client.credits_per_worker, "batches one worker may prepare for us at a time");
  flags.AddUint32("max-worker-connections", &o->client.max_workers,
                  "worker connections held at once (each is a file descriptor)");
  flags.AddString("client-id", &o->client.client_id, "client id (default: random c-…)");
  client::AddClientSecurityFlags(flags, &o->client);
  flags.AddString("log", &o->log_path, "write the delivery log here");
  flags.AddString("summary-json", &o->summary_path, "write a JSON summary here");
}

StatusOr<ConsumeOptions> ParseConsumeFlags(int argc, char** argv) {
  ConsumeOptions o;
  std::string stall = "60s", log_level = "warning", resume_from, claim = "0";
  int64_t gpu = -1;
  FlagSet flags("stoker consume --coordinator EP --job NAME --rank R [flags]",
                "Receives one rank's batches like a training process would, and logs each one (epoch, index, "
                "attempt, worker, pixel hash, sample ids and flags) for `stoker check`.");
  AddClientFlags(flags, &o);
  flags.AddString("stall-timeout", &stall, "fail if no batch arrives for this long");
  flags.AddUint32("hold-ms", &o.hold_ms, "pretend to train: hold each batch this long before the next");
  flags.AddUint("max-batches", &o.max_batches, "stop after this many batches (0: the whole job)");
  flags.AddString("log-level", &log_level, "debug|info|warning|error");
  flags.AddString("checkpoint-file", &o.checkpoint_file, "write a checkpoint token here (atomically)");
  flags.AddUint("checkpoint-every", &o.checkpoint_every, "... after every this many batches (0: only at the end)");
  flags.AddString("resume-from", &resume_from, "read a checkpoint token from this file and resume from it");
  flags.AddBool("resume-live", &o.client.resume_live,
                "with --resume-from on another shape: a live shape change (the old shape's ranks of this team that "
                "are training end now instead of being waited for)");
  flags.AddString("claim-timeout", &claim,
                  "a rank a live session holds (a crashed predecessor, until the coordinator's client timeout): "
                  "ask again this long before failing");
  flags.AddUint("pause-after", &o.pause_after, "stop reading after this many batches for --pause-ms (tests)");
  flags.AddUint32("pause-ms", &o.pause_ms, "how long to stop reading");
  flags.AddString("metrics-listen", &o.client.metrics_listen,
                  "serve /metrics, /healthz, /readyz, /state on this host:port (or up to 4 comma-separated; "
                  "port 0 picks one; default: "
                  "$STOKER_METRICS_LISTEN, else none)");
  flags.AddString("metrics-address-file", &o.metrics_address_file, "write the bound metrics address here");
  flags.AddInt("gpu", &gpu, "CUDA ordinal this rank feeds, for the gpu/gpu_uuid labels (-1: none)");
  STOKER_RETURN_IF_ERROR(flags.Parse(argc, argv, 2));
  auto stall_ms = ParseDurationMs(stall);
  if (!stall_ms.ok()) return stall_ms.status().WithContext("--stall-timeout");
  o.stall_ms = *stall_ms;
  auto claim_ms = ParseDurationMs(claim);
  if (!claim_ms.ok()) return claim_ms.status().WithContext("--claim-timeout");
  o.client.claim_timeout = std::chrono::milliseconds(*claim_ms);
  if (!SetLogLevelFromString(log_level)) return InvalidArgumentError("--log-level " + log_level);
  SetLogComponent("consume rank " + std::to_string(o.client.rank));
  if (gpu < -1 || gpu > 1024) return InvalidArgumentError("--gpu must be -1 or a CUDA ordinal");
  o.client.gpu = static_cast<int>(gpu);
  o.client.job = o.spec.name;
  if (!o.attach) o.client.spec = o.spec;
  if (!resume_from.empty()) {
    PosixEnv env;
    auto token = ReadWholeFile(env, resume_from);
    if (!token.ok()) return token.status().WithContext("--resume-from");
    o.client.resume_token = *token;
  }
  return o;
}

// What the rank received.
struct Tally {
  uint64_t batches = 0, samples = 0, quarantined = 0, padding = 0;
  uint32_t epochs_ended = 0;
};

// Receives and logs batches to the end of the job (or --max-batches). A delivery that fails is *failure; the
// error returned is the consumer's own (a checkpoint it could not write).
class Receiver {
 public:
  Receiver(const ConsumeOptions& o, Client& client, Env& env, std::ofstream& log)
      : o_(o), client_(client), env_(env), log_(log) {}

  Status ReceiveAll(Tally* tally, Status* failure) {
    while (o_.max_batches == 0 || tally->batches < o_.max_batches) {
      auto d = client_.Next(std::chrono::milliseconds(o_.stall_ms));
      if (!d.ok()) {
        *failure = d.status();
        break;
      }
      if (d->kind == Delivery::Kind::kEndOfJob) break;
      if (d->kind == Delivery::Kind::kEndOfEpoch) {
        ++tally->epochs_ended;
        log_.flush();
        continue;
      }
      Take(d->batch, tally);
      if (o_.checkpoint_every > 0 && tally->batches % o_.checkpoint_every == 0) {
        STOKER_RETURN_IF_ERROR(WriteCheckpoint());
      }
    }
    if (failure->ok()) STOKER_RETURN_IF_ERROR(WriteCheckpoint());
    return Status::Ok();
  }

 private:
  void Take(const Batch& b, Tally* tally) {
    LoggedBatch entry;
    entry.batch = {b.epoch(), b.rank(), b.index(), {b.sample_ids().begin(), b.sample_ids().end()},
                   {b.flags().begin(), b.flags().end()}};
    entry.attempt = b.attempt();
    entry.worker_id = b.worker_id();
    entry.pixel_hash = Xxh64(b.pixels(), b.pixel_bytes());
    // A job that decodes on the GPU: each sample's box and flip are part of what the batch is.
    for (const SampleCrop& c : b.crops()) {
      const int64_t fields[] = {c.bytes, c.encoded, c.flip, c.x, c.y, c.width, c.height};
      entry.pixel_hash = Xxh64(fields, sizeof(fields), entry.pixel_hash);
    }
    if (log_.is_open()) log_ << FormatLogLine(entry) << std::endl;  // flushed: a crash loses nothing logged
    ++tally->batches;
    tally->samples += b.size();
    for (uint32_t i = 0; i < b.size(); ++i) {
      tally->quarantined += b.is_quarantined(i);
      tally->padding += b.is_padding(i);
    }
    if (o_.hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o_.hold_ms));  // a training step
    if (o_.pause_after > 0 && tally->batches == o_.pause_after) {
      std::this_thread::sleep_for(std::chrono::milliseconds(o_.pause_ms));  // a training loop that stops reading
    }
  }

  Status WriteCheckpoint() {
    if (o_.checkpoint_file.empty()) return Status::Ok();
    std::string token = client_.Checkpoint();
    return env_.WriteFileAtomically(o_.checkpoint_file, token.data(), token.size());
  }

  const ConsumeOptions& o_;
  Client& client_;
  Env& env_;
  std::ofstream& log_;
};

void WriteSummaryJson(const ConsumeOptions& o, const Client& client, const Tally& t, const ClientStats& stats,
                      double elapsed, const Status& failure) {
  JsonWriter j;
  j.BeginObject()
      .Key("rank").Value(o.client.rank)
      .Key("client_id").Value(client.client_id())
      .Key("start_batch").Value(client.start_batch())
      .Key("batches").Value(t.batches)
      .Key("samples").Value(t.samples)
      .Key("quarantined").Value(t.quarantined)
      .Key("quarantined_by_reason").BeginObject();
  for (const auto& [reason, n] : stats.quarantined_by_reason) j.Key(reason).Value(n);
  j.EndObject()
      .Key("padding").Value(t.padding)
      .Key("epochs_ended").Value(t.epochs_ended)
      .Key("elapsed_seconds").Value(elapsed)
      .Key("wait_seconds").Value(stats.wait_seconds)
      .Key("dropped").BeginObject()
      .Key("duplicate").Value(stats.dropped_duplicate)
      .Key("stale_attempt").Value(stats.dropped_stale_attempt)
      .Key("bad_frame").Value(stats.dropped_bad_frame)
      .Key("out_of_window").Value(stats.dropped_out_of_window)
      .Key("unlisted").Value(stats.dropped_unlisted)
      .Key("wrong_samples").Value(stats.dropped_wrong_samples)
      .Key("seal_failed").Value(stats.dropped_seal_failed)
      .Key("replayed").Value(stats.dropped_replayed)
      .EndObject()
      .Key("worker_errors").Value(stats.worker_errors)
      .Key("error").Value(failure.ok() ? "" : failure.ToString())
      .EndObject();
  std::ofstream(o.summary_path, std::ios::trunc) << j.str() << "\n";
}

// "rank 0: 12 batches, 96 samples, 4 quarantined (unsupported_format: 3, decode_error: 1), in 1.2 s, waited 0.1 s"
void PrintRankLine(uint32_t rank, const Tally& t, const ClientStats& stats, double elapsed) {
  std::string why;
  for (const auto& [reason, n] : stats.quarantined_by_reason) {
    why += (why.empty() ? " (" : ", ") + reason + ": " + std::to_string(n);
  }
  if (!why.empty()) why += ")";
  std::fprintf(stderr, "rank %u: %llu batches, %llu samples, %llu quarantined%s, in %.1f s, waited %.1f s\n", rank,
               static_cast<unsigned long long>(t.batches), static_cast<unsigned long long>(t.samples),
               static_cast<unsigned long long>(t.quarantined), why.c_str(), elapsed, stats.wait_seconds);
}

Status PublishMetricsAddress(Env& env, const Client& client, const std::string& path) {
  if (path.empty()) return Status::Ok();
  std::string address = client.Stats().metrics_address;
  if (address.empty()) return UnavailableError("--metrics-address-file: no metrics endpoint");
  return env.WriteFileAtomically(path, address.data(), address.size());
}

}  // namespace

int ConsumeCommand(int argc, char** argv) {
  auto options = ParseConsumeFlags(argc, argv);
  if (!options.ok()) return Fail("consume", options.status());
  const ConsumeOptions& o = *options;
  PosixEnv env;
  auto client = Client::Connect(o.client);
  if (!client.ok()) return Fail("consume", client.status());
  if (Status s = PublishMetricsAddress(env, **client, o.metrics_address_file); !s.ok()) return Fail("consume", s);
  std::ofstream log;
  if (!o.log_path.empty()) {
    log.open(o.log_path, std::ios::trunc);
    if (!log) return Fail("consume", UnavailableError("cannot write " + o.log_path));
    const JobSpec& job = (*client)->spec();
    log << FormatShapeLine({job.world_size, job.batch_size, job.origin_epoch, job.origin_offset}) << "\n";
  }
  auto start = std::chrono::steady_clock::now();
  Tally tally;
  Status failure;
  Receiver receiver(o, **client, env, log);
  if (Status s = receiver.ReceiveAll(&tally, &failure); !s.ok()) return Fail("consume", s);
  log.flush();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ClientStats stats = (*client)->Stats();
  if (!o.summary_path.empty()) WriteSummaryJson(o, **client, tally, stats, elapsed, failure);
  if (!failure.ok()) return Fail("consume", failure);
  PrintRankLine(o.client.rank, tally, stats, elapsed);
  return 0;
}

}  // namespace stoker::tools
