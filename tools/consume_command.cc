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

int ConsumeCommand(int argc, char** argv) {
  ClientOptions options;
  JobSpec spec;
  bool attach = false;
  std::string log_path, summary_path, stall = "60s", log_level = "warning", checkpoint_file, resume_from;
  std::string claim = "0";
  uint32_t hold_ms = 0;
  uint64_t max_batches = 0, checkpoint_every = 0, pause_after = 0;
  uint32_t pause_ms = 0;
  FlagSet flags("stoker consume --coordinator EP --job NAME --rank R [flags]",
                "Receives one rank's batches like a training process would, and logs each one (epoch, index, "
                "attempt, worker, pixel hash, sample ids and flags) for `stoker check`.");
  flags.AddString("coordinator", &options.coordinator, "coordinator control endpoint");
  AddJobSpecFlags(flags, &spec);
  flags.AddUint32("rank", &options.rank, "rank to claim");
  flags.AddBool("attach", &attach, "join an existing job without sending its spec");
  flags.AddUint32("prefetch", &options.prefetch, "batches held at once (the lease window)");
  flags.AddUint32("credits", &options.credits_per_worker, "batches one worker may prepare for us at a time");
  flags.AddUint32("max-worker-connections", &options.max_workers,
                  "worker connections held at once (each is a file descriptor)");
  flags.AddString("client-id", &options.client_id, "client id (default: random c-…)");
  client::AddClientSecurityFlags(flags, &options);
  flags.AddString("log", &log_path, "write the delivery log here");
  flags.AddString("summary-json", &summary_path, "write a JSON summary here");
  flags.AddString("stall-timeout", &stall, "fail if no batch arrives for this long");
  flags.AddUint32("hold-ms", &hold_ms, "pretend to train: hold each batch this long before the next");
  flags.AddUint("max-batches", &max_batches, "stop after this many batches (0: the whole job)");
  flags.AddString("log-level", &log_level, "debug|info|warning|error");
  flags.AddString("checkpoint-file", &checkpoint_file, "write a checkpoint token here (atomically)");
  flags.AddUint("checkpoint-every", &checkpoint_every, "... after every this many batches (0: only at the end)");
  flags.AddString("resume-from", &resume_from, "read a checkpoint token from this file and resume from it");
  flags.AddString("claim-timeout", &claim,
                  "a rank a live session holds (a crashed predecessor, until the coordinator's client timeout): "
                  "ask again this long before failing");
  flags.AddUint("pause-after", &pause_after, "stop reading after this many batches for --pause-ms (tests)");
  flags.AddUint32("pause-ms", &pause_ms, "how long to stop reading");
  std::string metrics_address_file;
  flags.AddString("metrics-listen", &options.metrics_listen,
                  "serve /metrics, /healthz, /readyz, /state on this host:port (port 0 picks one; default: "
                  "$STOKER_METRICS_LISTEN, else none)");
  flags.AddString("metrics-address-file", &metrics_address_file, "write the bound metrics address here");
  int64_t gpu = -1;
  flags.AddInt("gpu", &gpu, "CUDA ordinal this rank feeds, for the gpu/gpu_uuid labels (-1: none)");
  Status parsed = flags.Parse(argc, argv, 2);
  if (!parsed.ok()) return Fail("consume", parsed);
  auto stall_ms = ParseDurationMs(stall);
  if (!stall_ms.ok()) return Fail("consume", stall_ms.status().WithContext("--stall-timeout"));
  auto claim_ms = ParseDurationMs(claim);
  if (!claim_ms.ok()) return Fail("consume", claim_ms.status().WithContext("--claim-timeout"));
  options.claim_timeout = std::chrono::milliseconds(*claim_ms);
  if (!SetLogLevelFromString(log_level)) return Fail("consume", InvalidArgumentError("--log-level " + log_level));
  SetLogComponent("consume rank " + std::to_string(options.rank));
  if (gpu < -1 || gpu > 1024) return Fail("consume", InvalidArgumentError("--gpu must be -1 or a CUDA ordinal"));
  options.gpu = static_cast<int>(gpu);
  options.job = spec.name;
  if (!attach) options.spec = spec;
  PosixEnv env;
  if (!resume_from.empty()) {
    auto token = ReadWholeFile(env, resume_from);
    if (!token.ok()) return Fail("consume", token.status().WithContext("--resume-from"));
    options.resume_token = *token;
  }
  auto write_checkpoint = [&](const Client& c) {
    if (checkpoint_file.empty()) return Status::Ok();
    std::string token = c.Checkpoint();
    return env.WriteFileAtomically(checkpoint_file, token.data(), token.size());
  };

  auto client = Client::Connect(options);
  if (!client.ok()) return Fail("consume", client.status());
  if (!metrics_address_file.empty()) {
    std::string address = (*client)->Stats().metrics_address;
    if (address.empty()) return Fail("consume", UnavailableError("--metrics-address-file: no metrics endpoint"));
    if (Status s = env.WriteFileAtomically(metrics_address_file, address.data(), address.size()); !s.ok()) {
      return Fail("consume", s);
    }
  }
  std::ofstream log;
  if (!log_path.empty()) {
    log.open(log_path, std::ios::trunc);
    if (!log) return Fail("consume", UnavailableError("cannot write " + log_path));
  }
  auto start = std::chrono::steady_clock::now();
  uint64_t batches = 0, samples = 0, quarantined = 0, padding = 0;
  uint32_t epochs_ended = 0;
  Status failure;
  while (max_batches == 0 || batches < max_batches) {
    auto d = (*client)->Next(std::chrono::milliseconds(*stall_ms));
    if (!d.ok()) {
      failure = d.status();
      break;
    }
    if (d->kind == Delivery::Kind::kEndOfJob) break;
    if (d->kind == Delivery::Kind::kEndOfEpoch) {
      ++epochs_ended;
      log.flush();
      continue;
    }
    const Batch& b = d->batch;
    LoggedBatch entry;
    entry.batch = {b.epoch(), b.rank(), b.index(), {b.sample_ids().begin(), b.sample_ids().end()},
                   {b.flags().begin(), b.flags().end()}};
    entry.attempt = b.attempt();
    entry.worker_id = b.worker_id();
    entry.pixel_hash = Xxh64(b.pixels(), b.pixel_bytes());
    if (log.is_open()) log << FormatLogLine(entry) << std::endl;  // flushed: a crash loses nothing logged
    ++batches;
    samples += b.size();
    for (uint32_t i = 0; i < b.size(); ++i) {
      quarantined += b.is_quarantined(i);
      padding += b.is_padding(i);
    }
    if (hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));  // simulated training step
    if (pause_after > 0 && batches == pause_after) {
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));  // a training loop that stops reading
    }
    if (checkpoint_every > 0 && batches % checkpoint_every == 0) {
      if (Status s = write_checkpoint(**client); !s.ok()) return Fail("consume", s);
    }
  }
  if (failure.ok()) {
    if (Status s = write_checkpoint(**client); !s.ok()) return Fail("consume", s);
  }
  log.flush();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ClientStats stats = (*client)->Stats();
  if (!summary_path.empty()) {
    JsonWriter j;
    j.BeginObject()
        .Key("rank").Value(options.rank)
        .Key("client_id").Value((*client)->client_id())
        .Key("start_batch").Value((*client)->start_batch())
        .Key("batches").Value(batches)
        .Key("samples").Value(samples)
        .Key("quarantined").Value(quarantined)
        .Key("quarantined_by_reason").BeginObject();
    for (const auto& [reason, n] : stats.quarantined_by_reason) j.Key(reason).Value(n);
    j.EndObject()
        .Key("padding").Value(padding)
        .Key("epochs_ended").Value(epochs_ended)
        .Key("elapsed_seconds").Value(elapsed)
        .Key("wait_seconds").Value(stats.wait_seconds)
        .Key("dropped").BeginObject()
        .Key("duplicate").Value(stats.dropped_duplicate)
        .Key("stale_attempt").Value(stats.dropped_stale_attempt)
        .Key("bad_frame").Value(stats.dropped_bad_frame)
        .Key("out_of_window").Value(stats.dropped_out_of_window)
        .Key("unlisted").Value(stats.dropped_unlisted)
        .Key("wrong_samples").Value(stats.dropped_wrong_samples)
        .EndObject()
        .Key("worker_errors").Value(stats.worker_errors)
        .Key("error").Value(failure.ok() ? "" : failure.ToString())
        .EndObject();
    std::ofstream(summary_path, std::ios::trunc) << j.str() << "\n";
  }
  if (!failure.ok()) return Fail("consume", failure);
  std::string why;  // "4 quarantined (unsupported_format: 3, decode_error: 1)"
  for (const auto& [reason, n] : stats.quarantined_by_reason) {
    why += (why.empty() ? " (" : ", ") + reason + ": " + std::to_string(n);
  }
  if (!why.empty()) why += ")";
  std::fprintf(stderr, "rank %u: %llu batches, %llu samples, %llu quarantined%s, in %.1f s, waited %.1f s\n",
               options.rank, static_cast<unsigned long long>(batches), static_cast<unsigned long long>(samples),
               static_cast<unsigned long long>(quarantined), why.c_str(), elapsed, stats.wait_seconds);
  return 0;
}

}  // namespace stoker::tools
