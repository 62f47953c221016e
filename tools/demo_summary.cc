// The end of `stoker demo` (demo.h): the totals over every epoch's verdict, what the input stall figure means and
// what would lower it, and the same as JSON for scripts (--summary-json).
#include <cstdio>
#include <fstream>

#include "base/json_writer.h"
#include "tools/commands.h"
#include "tools/demo.h"

namespace stoker::tools {
namespace {

struct Totals : DeliveryTotals {
  std::vector<uint64_t> per_rank;
  bool all_ok = true;
};

Totals Add(const std::vector<EpochVerdict>& verdicts, const JobSpec& spec, const Plan& plan) {
  Totals t;
  t.per_rank.assign(spec.world_size, 0);
  t.all_ok = verdicts.size() == spec.epochs;
  for (const EpochVerdict& v : verdicts) {
    t.Add(v);
    for (size_t r = 0; r < t.per_rank.size(); ++r) t.per_rank[r] += v.batches_per_rank[r];
    t.all_ok = t.all_ok && v.ok() && v.balanced(plan.steps_per_epoch());
  }
  return t;
}

// What the headline figure means, and what would change it.
void ExplainStall(const DemoOptions& o, double stall_ratio) {
  std::fprintf(stderr, "input stall: the share of the consumers' step time spent waiting for a batch that had not "
                       "arrived (each consumer trains %u ms per batch, --step-ms). ",
               o.step_ms);
  if (o.step_ms == 0) {
    std::fprintf(stderr, "With --step-ms 0 the consumers do nothing between batches, so they wait for every one: "
                         "a figure near 100 %% says nothing about the workers.\n");
  } else if (stall_ratio < 0.05) {
    std::fprintf(stderr, "Under 5 %%: %u workers keep up with this step.\n", o.workers);
  } else {
    std::fprintf(stderr, "At %.0f %% the workers do not keep up: more workers (--workers), more threads per worker "
                         "(--threads-per-worker) or a longer step would lower it.\n",
                 100 * stall_ratio);
  }
}

void WriteJson(const DemoOptions& o, const JobSpec& spec, const Demo& demo, const DemoOutcome& out, const Totals& t) {
  const double stall_ratio = out.step_seconds > 0 ? out.stall_seconds / out.step_seconds : 0;
  const double rate = out.elapsed_seconds > 0 ? out.samples / out.elapsed_seconds : 0;
  JsonWriter j;
  j.BeginObject().Key("ok").Value(t.all_ok && out.failure.ok());
  WriteDeliveryCounts(j, t)
      .Key("unexpected").Value(t.unexpected)
      .Key("corrupt").Value(t.corrupt)
      .Key("batches_per_rank").BeginArray();
  for (uint64_t b : t.per_rank) j.Value(b);
  j.EndArray()
      .Key("steps_per_epoch").Value(demo.plan().steps_per_epoch())
      .Key("images_per_second").Value(rate)
      .Key("elapsed_seconds").Value(out.elapsed_seconds)
      .Key("consumer_wait_fraction")
      .Value(out.elapsed_seconds > 0 ? out.wait_seconds / (out.elapsed_seconds * spec.world_size) : 0.0)
      .Key("input_stall_ratio").Value(stall_ratio)
      .Key("input_stall_seconds").Value(out.stall_seconds)
      .Key("step_seconds").Value(out.step_seconds)
      .Key("step_ms").Value(o.step_ms)
      .Key("ranks").Value(spec.world_size)
      .Key("batch_size").Value(spec.batch_size)
      .Key("epochs").BeginArray();
  for (const EpochVerdict& v : out.verdicts) {
    j.BeginObject().Key("epoch").Value(v.epoch);
    WriteDeliveryCounts(j, DeliveryTotals::Of(v)).Key("quarantined_ids").BeginArray();
    for (uint64_t id : v.quarantined_ids) j.Value(id);
    j.EndArray().Key("batches_per_rank").BeginArray();
    for (uint64_t b : v.batches_per_rank) j.Value(b);
    j.EndArray().EndObject();
  }
  j.EndArray().Key("workers").Value(o.workers).Key("chaos").Value(o.chaos).Key("faults").BeginObject();
  if (demo.chaos()) {
    for (const auto& [kind, n] : demo.chaos()->counts()) j.Key(kind).Value(n);
  }
  j.EndObject()
      .Key("workers_exited_cleanly").Value(out.workers_clean)
      .Key("error").Value(out.failure.ok() ? "" : out.failure.ToString())
      .EndObject();
  std::ofstream(o.summary_json, std::ios::trunc) << j.str() << "\n";
  std::fprintf(stderr, "summary written to %s\n", o.summary_json.c_str());
}

}  // namespace

int SummarizeDemo(const DemoOptions& o, const JobSpec& spec, const Demo& demo, const DemoOutcome& out) {
  if (!out.consumed) return Fail("demo", out.failure);  // it never got as far as consuming
  const Totals t = Add(out.verdicts, spec, demo.plan());
  const double stall_ratio = out.step_seconds > 0 ? out.stall_seconds / out.step_seconds : 0;
  const double rate = out.elapsed_seconds > 0 ? out.samples / out.elapsed_seconds : 0;
  std::fprintf(stderr,
               "\nsummary: %llu samples planned, %llu delivered, %llu duplicates, %llu lost, %llu quarantined; "
               "%.0f img/s over %.1f s; input stall %.1f%%\n",
               static_cast<unsigned long long>(t.planned), static_cast<unsigned long long>(t.delivered),
               static_cast<unsigned long long>(t.duplicates), static_cast<unsigned long long>(t.lost),
               static_cast<unsigned long long>(t.quarantined), rate, out.elapsed_seconds, 100 * stall_ratio);
  ExplainStall(o, stall_ratio);
  if (!o.summary_json.empty()) WriteJson(o, spec, demo, out, t);
  if (!out.failure.ok()) return Fail("demo", out.failure);
  if (!out.workers_clean) std::fprintf(stderr, "warning: a worker did not drain and exit 0 on SIGTERM (see its log)\n");
  if (!out.coordinator_clean) std::fprintf(stderr, "warning: the coordinator did not exit cleanly\n");
  return t.all_ok ? 0 : 1;
}

}  // namespace stoker::tools
