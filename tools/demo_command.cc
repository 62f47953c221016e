// stoker demo: the whole data path on one machine (tools/demo.h) — flags in, summary out.
#include <csignal>
#include <cstdlib>

#include "base/flags.h"
#include "base/logging.h"
#include "dataset/manifest.h"
#include "tools/commands.h"
#include "tools/demo.h"
#include "dataset/job_spec_flags.h"

namespace stoker::tools {
namespace {

std::atomic<bool> g_interrupted{false};
void OnInterrupt(int) { g_interrupted.store(true); }

// The flags into the demo's options and its job; Cancelled after --help.
Status ParseDemoFlags(int argc, char** argv, DemoOptions* o, JobSpec* spec) {
  spec->name = "demo";
  spec->batch_size = 32;
  spec->world_size = 2;
  spec->epochs = 2;
  spec->seed = 2026;
  std::string log_level = "warning", stall = "60s";
  FlagSet flags("stoker demo [flags]",
                "Runs the whole data path on this machine: generates an ImageNet-like dataset (once), starts a "
                "coordinator and worker processes on loopback, consumes every rank through the client library "
                "with a live progress line, and checks each epoch delivered every planned sample exactly once.");
  flags.AddString("data", &o->data, "directory for the generated dataset, manifest and process logs");
  flags.AddUint("images", &o->images, "images in the generated dataset");
  flags.AddUint32("workers", &o->workers, "worker processes");
  flags.AddUint32("threads-per-worker", &o->threads_per_worker, "pipeline threads in each worker");
  flags.AddUint32("prefetch", &o->prefetch, "batches each rank's client holds at once");
  flags.AddString("summary-json", &o->summary_json, "write the summary here as JSON");
  flags.AddString("stall-timeout", &stall, "fail if a rank receives nothing for this long");
  flags.AddString("log-level", &log_level, "log level of this process (the servers log to files under --data)");
  flags.AddString("metrics-listen", &o->metrics_listen,
                  "host:port where the consumers (this process) serve /metrics; the coordinator and workers pick "
                  "free loopback ports (see --prometheus-targets); empty: none");
  flags.AddString("prometheus-targets", &o->prometheus_targets,
                  "keep a Prometheus file_sd JSON of every process's metrics endpoint here (job, namespace and pod "
                  "labels as in Kubernetes)");
  flags.AddString("worker-sample-delay", &o->worker_sample_delay,
                  "make every sample this much slower in every worker (e.g. 20ms): too few workers, on purpose");
  flags.AddUint32("step-ms", &o->step_ms,
                  "the consumers train this long on each batch, standing in for a GPU step (0: consume at once, "
                  "and every wait counts as input stall)");
  flags.AddUint32("gpus", &o->gpus, "label rank r as feeding GPU r % N (gpu, gpu_uuid labels; NVML metrics)");
  flags.AddUint32("max-workers", &o->max_workers,
                  "the worker ceiling the coordinator exports for the 'workers saturated' alert (0: --workers)");
  flags.AddBool("chaos", &o->chaos,
                "inject faults at random while the demo runs: kill -9 and SIGTERM workers (replacing them), kill -9 "
                "and restart the coordinator on its journal, SIGSTOP workers, cut workers off the network");
  flags.AddString("object-store", &o->object_store,
                  "run over object storage: upload the generated shards to this s3:// prefix (or read them from "
                  "this http(s):// directory), index them there, and have the workers read them by range");
  storage::StorageFlags storage;
  storage.Register(flags);
  AddJobSpecFlags(flags, spec);
  STOKER_RETURN_IF_ERROR(flags.Parse(argc, argv, 2));
  if (!o->object_store.empty()) {
    if (!IsObjectUrl(o->object_store)) return InvalidArgumentError("--object-store must be an s3:// or http(s):// URL");
    if (o->object_store.back() != '/') o->object_store += "/";
    STOKER_ASSIGN_OR_RETURN(o->storage, storage.Resolve([](const char* name) { return std::getenv(name); }));
    // The workers this demo starts read the same storage: they inherit these (and the AWS_* credentials).
    ::setenv("STOKER_S3_ENDPOINT", o->storage.s3_endpoint.c_str(), 1);
    ::setenv("STOKER_S3_REGION", o->storage.s3_region.c_str(), 1);
    ::setenv("STOKER_S3_ADDRESSING", o->storage.s3_addressing == storage::S3Addressing::kPath ? "path" : "virtual", 1);
  }
  if (!SetLogLevelFromString(log_level)) return InvalidArgumentError("--log-level " + log_level);
  auto stall_ms = ParseDurationMs(stall);
  if (!stall_ms.ok()) return stall_ms.status().WithContext("--stall-timeout");
  o->stall_timeout = std::chrono::milliseconds(*stall_ms);
  if (!o->worker_sample_delay.empty()) {
    STOKER_RETURN_IF_ERROR(ParseDurationMs(o->worker_sample_delay).status().WithContext("--worker-sample-delay"));
  }
  if (o->workers == 0) return InvalidArgumentError("--workers must be at least 1");
  return Status::Ok();
}

}  // namespace

int DemoCommand(int argc, char** argv) {
  DemoOptions options;
  JobSpec spec;
  Status parsed = ParseDemoFlags(argc, argv, &options, &spec);
  if (!parsed.ok()) return Fail("demo", parsed);
  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGTERM, OnInterrupt);
  Demo demo(options, spec);
  DemoOutcome outcome = demo.Run(g_interrupted);
  return SummarizeDemo(options, spec, demo, outcome);
}

}  // namespace stoker::tools
