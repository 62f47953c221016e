// stoker check: judges consumption logs against the plan with the DeliveryChecker, epoch by epoch.
#include <cstdio>

#include "tools/delivery_check.h"
#include "base/flags.h"
#include "dataset/manifest.h"
#include "tools/commands.h"
#include "tools/delivery_log.h"
#include "tools/shaped_check.h"
#include "dataset/job_spec_flags.h"

namespace stoker::tools {

int CheckCommand(int argc, char** argv) {
  JobSpec spec;
  FlagSet flags("stoker check --manifest M [job flags] LOG...",
                "Compares what ranks consumed (logs from `stoker consume --log`) with the job's plan and reports "
                "lost, duplicated, unexpected and corrupt samples per epoch. Exit 0 only if every epoch is exact "
                "and every rank got the same number of batches. Logs that name their shape (S lines: a job "
                "resumed from a checkpoint on other ranks or another batch size) are judged per shape, in the "
                "positions of each epoch's order; the job flags then give the job as it started.");
  AddJobSpecFlags(flags, &spec);
  std::vector<std::string> logs;
  Status parsed = flags.Parse(argc, argv, 2, &logs);
  if (!parsed.ok()) return Fail("check", parsed);
  if (logs.empty()) return Fail("check", InvalidArgumentError("no delivery logs given"));
  if (spec.name.empty()) spec.name = "check";
  PosixEnv env;
  auto manifest = Manifest::Open(env, spec.manifest_path);
  if (!manifest.ok()) return Fail("check", manifest.status());
  auto plan = Plan::Make(spec, (*manifest)->num_samples());
  if (!plan.ok()) return Fail("check", plan.status());
  // Judged per shape when some batch was planned in a shape other than the flags' (its log's S line says so).
  std::vector<LoggedBatch> batches;
  bool shaped = false;
  const LoggedShape flags_shape{spec.world_size, spec.batch_size, spec.origin_epoch, spec.origin_offset};
  for (const auto& path : logs) {
    auto entries = ReadDeliveryLog(env, path);
    if (!entries.ok()) return Fail("check", entries.status());
    for (auto& e : *entries) {
      shaped = shaped || (e.shape.ranks != 0 && e.shape != flags_shape);
      batches.push_back(std::move(e));
    }
  }
  bool ok = true;
  if (shaped) {
    ShapedChecker checker(spec, (*manifest)->num_samples());
    for (const LoggedBatch& b : batches) {
      if (Status recorded = checker.Record(b); !recorded.ok()) return Fail("check", recorded);
    }
    for (uint32_t epoch = 0; epoch < plan->epochs(); ++epoch) {
      ShapedVerdict v = checker.Check(epoch);
      ok = ok && v.ok();
      std::printf("%s %s\n", v.ok() ? "ok  " : "FAIL", v.Describe().c_str());
    }
    return ok ? 0 : 1;
  }
  DeliveryChecker checker(*plan);
  for (const LoggedBatch& b : batches) checker.Record(b.batch);
  for (uint32_t epoch = 0; epoch < plan->epochs(); ++epoch) {
    EpochVerdict v = checker.Check(epoch);
    bool good = v.ok() && v.balanced(plan->steps_per_epoch());
    ok = ok && good;
    std::printf("%s %s\n", good ? "ok  " : "FAIL", v.Describe().c_str());
  }
  return ok ? 0 : 1;
}

}  // namespace stoker::tools
