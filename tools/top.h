// What `stoker top` shows (tools/top_command.cc): a coordinator's /metrics read twice, an interval apart, made into
// one table of its pipelines — team, epoch, ranks held, the pool's samples leased to it per second, what a sample
// costs the workers and its share of their time, the demand its training loops report, their input stall, the stage
// its workers' time goes to most, and what holds a waiting pipeline back — under a
// line about the pool (workers, busy ratio, the workers the coordinator recommends). Pure functions, so the tests
// need no server.
#pragma once

#include <string>
#include <vector>

#include "base/metrics_text.h"

namespace stoker::tools {

struct TopRow {
  std::string pipeline;
  std::string team;
  double epoch = 0;
  double epoch_progress = 0;   // of the slowest rank, 0-1
  double ranks_held = 0;
  double ranks = 0;
  double leased_per_second = 0;  // samples leased to workers for it over the interval
  double sample_seconds = 0;     // what a sample costs the workers (pipeline-thread seconds); 0: not known yet
  // Of the pool's time leased over the interval (leased/s x sample cost), 0-1; of its samples while some pipeline
  // that got samples has no cost known yet.
  double share = 0;
  double demand = -1;            // samples/s its loops would take; < 0: not reported yet
  double stall = -1;             // 0-0.98; < 0: not reported yet
  // Where the pool workers' time on it went over the interval: the stage that took most of it (read, decode,
  // augment, seal) and its part of the four, 0-1; empty and < 0 when no unit of it was reported in the interval.
  std::string stage;
  double stage_share = -1;
  std::string bottleneck;        // cap, workers, window or scheduling; empty: none
};

struct TopView {
  std::vector<TopRow> rows;  // by pipeline name
  double workers_active = 0, workers_draining = 0, workers_local = 0;
  double recommended_workers = -1;  // < 0: not exposed
  double busy = -1;                 // the pool's busy ratio; < 0: not known yet
  double leased_per_second = 0;     // over every pipeline
};

// http://HOST:PORT/metrics from what a user may type: HOST:PORT, :PORT (the coordinator's own --metrics-listen
// form: this host), with or without http(s)://, a trailing / or /metrics.
std::string TopMetricsUrl(std::string address);

// `before` and `now`: two readings of the same coordinator's /metrics, `seconds` apart (> 0). A pipeline only in
// `now` counts its leases from zero; a counter that went back (a restarted coordinator) counts from zero too.
TopView MakeTopView(const std::vector<MetricSample>& before, const std::vector<MetricSample>& now, double seconds);

// The table. Names are cut to 32 columns (teams to 24), and any byte that is not printable ASCII is shown as '?'
// (the text came from the network: it must not drive the terminal).
std::string RenderTop(const TopView& view, const std::string& source, double seconds);

}  // namespace stoker::tools
