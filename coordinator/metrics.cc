// The coordinator's Prometheus families (metrics.h), built at scrape time from the Impl's and the service's stats.
#include "coordinator/metrics.h"

#include "wire/control_codec.h"

namespace stoker::coordinator {

using prometheus::MetricType;

namespace {

// A family of one series without labels.
void Single(MetricFamilies& out, const char* name, const char* help, MetricType type, double value) {
  out.push_back(FamilyBuilder(name, help, type).Add({}, value).Build());
}

// Per pipeline: units by state, the slowest rank's epoch and progress, ranks held, demand.
void CollectJobs(const CoordinatorStats& s, MetricFamilies& out) {
  FamilyBuilder units("stoker_coordinator_units", "Units of each pipeline (all epochs and ranks) by state.",
                      MetricType::Gauge);
  FamilyBuilder epoch("stoker_coordinator_epoch", "Epoch (0-based) of the pipeline's slowest rank.", MetricType::Gauge);
  FamilyBuilder progress("stoker_coordinator_epoch_progress_ratio",
                         "Fraction of its current epoch the pipeline's slowest rank has consumed.", MetricType::Gauge);
  FamilyBuilder ranks("stoker_coordinator_ranks", "Ranks of each pipeline, by whether a client holds them.",
                      MetricType::Gauge);
  FamilyBuilder shape_changes("stoker_coordinator_job_shape_changes_total",
                              "Times the pipeline changed shape (ranks x batch size), from a checkpoint or live.",
                              MetricType::Counter);
  FamilyBuilder batch_size("stoker_coordinator_job_batch_size", "The pipeline's batch size per rank, as it runs now.",
                           MetricType::Gauge);
  FamilyBuilder leased("stoker_coordinator_job_samples_leased_total",
                       "Samples leased to workers for the pipeline, by the team whose client key it runs under: the "
                       "pool's work it got (its fair share is of the workers' time, at its sample cost: its team's "
                       "weight over the weights of the teams waiting, split equally between the team's pipelines).",
                       MetricType::Counter);
  FamilyBuilder cost("stoker_coordinator_job_sample_cost_seconds",
                     "Pipeline-thread seconds one of the pipeline's samples costs the pool's workers (the median of "
                     "its latest units' reports): the fair share charges its leases by it, so a pipeline whose "
                     "samples cost twice as much gets half the samples for the same share of the pool's time. "
                     "Absent until its first unit is reported.",
                     MetricType::Gauge);
  FamilyBuilder stages("stoker_coordinator_job_stage_seconds_total",
                       "Seconds the pipeline's batches spent in each stage: read, decode, augment, seal on pool "
                       "workers (units reported sent, split at the pipeline's median cost), then receive (opening, "
                       "copying into pinned memory) and h2d (CUDA events) on its clients, as their heartbeats say. "
                       "Their rates' split says which stage the time goes to.",
                       MetricType::Counter);
  FamilyBuilder demand("stoker_coordinator_demand_samples_per_second",
                       "Samples per second the pipeline's training loops would consume if input never stalled.",
                       MetricType::Gauge);
  FamilyBuilder stall("stoker_coordinator_input_stall_ratio",
                      "The pipeline's input stall: the largest over its ranks of stall over step time (ranks that step "
                      "in lockstep wait for the latest), at most 0.98.",
                      MetricType::Gauge);
  FamilyBuilder bottleneck("stoker_coordinator_input_bottleneck",
                           "1 for what holds a waiting pipeline's input back: cap (its team wants more than its "
                           "--team-max-workers), workers (the pool is busy: add workers), "
                           "window (its ranks have no room left to lease into: raise the prefetch window) or "
                           "scheduling (workers idle while ranks wait with room); 0 for the others.",
                           MetricType::Gauge);
  for (const JobStats& j : s.job_stats) {
    for (auto [state, n] : {std::pair{"pending", j.units_pending}, std::pair{"leased", j.units_leased},
                            std::pair{"sent", j.units_sent}, std::pair{"committed", j.units_committed}}) {
      units.Add({{"pipeline", j.name}, {"state", state}}, static_cast<double>(n));
    }
    epoch.Add({{"pipeline", j.name}}, j.epoch);
    progress.Add({{"pipeline", j.name}}, j.epoch_progress);
    ranks.Add({{"pipeline", j.name}, {"state", "held"}}, j.ranks_held);
    ranks.Add({{"pipeline", j.name}, {"state", "free"}}, j.ranks - j.ranks_held);
    shape_changes.Add({{"pipeline", j.name}}, j.shape_changes);
    batch_size.Add({{"pipeline", j.name}}, j.batch_size);
    leased.Add({{"pipeline", j.name}, {"team", j.team}}, static_cast<double>(j.samples_leased));
    if (j.sample_seconds > 0) cost.Add({{"pipeline", j.name}, {"team", j.team}}, j.sample_seconds);
    for (size_t i = 0; i < j.stage_seconds.size(); ++i) {
      stages.Add({{"pipeline", j.name}, {"team", j.team}, {"stage", kJobStages[i]}}, j.stage_seconds[i]);
    }
    auto d = s.advice.jobs.find(j.name);
    if (d == s.advice.jobs.end()) continue;
    demand.Add({{"pipeline", j.name}}, d->second.demand);
    stall.Add({{"pipeline", j.name}}, d->second.stall);
    for (const char* cause : {"cap", "workers", "window", "scheduling"}) {
      bottleneck.Add({{"pipeline", j.name}, {"cause", cause}}, d->second.bottleneck == cause ? 1 : 0);
    }
  }
  out.push_back(units.Build());
  out.push_back(epoch.Build());
  out.push_back(progress.Build());
  out.push_back(ranks.Build());
  out.push_back(shape_changes.Build());
  out.push_back(batch_size.Build());
  out.push_back(leased.Build());
  out.push_back(cost.Build());
  out.push_back(stages.Build());
  out.push_back(demand.Build());
  out.push_back(stall.Build());
  out.push_back(bottleneck.Build());
}

// Workers, clients and jobs known; leasing counters; the capacity advice.
void CollectLeasing(const CoordinatorStats& s, uint32_t max_workers, MetricFamilies& out) {
  const ReleaseCounts& r = s.releases;
  FamilyBuilder releases("stoker_coordinator_releases_total", "Units handed back to pending for re-leasing, by reason.",
                         MetricType::Counter);
  for (auto [reason, n] : {std::pair{"worker_lost", r.worker_lost}, std::pair{"lease_expired", r.lease_expired},
                           std::pair{"unacked", r.unacked}, std::pair{"undeliverable", r.undeliverable},
                           std::pair{"abandoned", r.abandoned}, std::pair{"drain", r.drain},
                           std::pair{"session_reset", r.session_reset}, std::pair{"not_adopted", r.not_adopted},
                           std::pair{"reported", r.reported}, std::pair{"overdue", r.overdue}}) {
    releases.Add({{"reason", reason}}, static_cast<double>(n));
  }
  out.push_back(releases.Build());
  out.push_back(FamilyBuilder("stoker_coordinator_workers",
                              "Registered workers by state: the pool's active and draining ones, and node-local "
                              "ones (beside one client each).",
                              MetricType::Gauge)
                    .Add({{"state", "active"}}, static_cast<double>(s.workers - s.workers_draining - s.workers_local))
                    .Add({{"state", "draining"}}, static_cast<double>(s.workers_draining))
                    .Add({{"state", "local"}}, static_cast<double>(s.workers_local))
                    .Build());
  out.push_back(FamilyBuilder("stoker_coordinator_clients", "Client sessions holding a rank.", MetricType::Gauge)
                    .Add({{"state", "live"}}, static_cast<double>(s.live_clients))
                    .Build());
  Single(out, "stoker_coordinator_jobs", "Jobs the coordinator knows.", MetricType::Gauge, static_cast<double>(s.jobs));
  Single(out, "stoker_coordinator_reconciling", "1 while, after a restart, workers report the leases they still hold.",
         MetricType::Gauge, s.reconciling ? 1 : 0);
  Single(out, "stoker_coordinator_recommended_workers",
         "Workers the running pipelines need: demand over one worker's rate at full busy (at most a doubling per "
         "estimate).",
         MetricType::Gauge, s.advice.recommended);
  if (s.advice.worker_busy >= 0) {
    Single(out, "stoker_coordinator_worker_busy_ratio",
           "Fraction of the workers' thread time spent making batches over the last 30 s (their heartbeats).",
           MetricType::Gauge, s.advice.worker_busy);
  }
  if (s.advice.per_worker > 0) {
    Single(out, "stoker_coordinator_worker_capacity_samples_per_second",
           "Samples per second one worker makes when fully busy (mean over workers).", MetricType::Gauge,
           s.advice.per_worker);
  }
  if (max_workers > 0) {
    Single(out, "stoker_coordinator_max_workers", "The most workers the autoscaler may run (--max-workers).",
           MetricType::Gauge, max_workers);
  }
  Single(out, "stoker_coordinator_leases_granted_total", "Leases granted.", MetricType::Counter,
         static_cast<double>(s.leases_granted));
  Single(out, "stoker_coordinator_local_leases_granted_total", "Leases granted to node-local workers.",
         MetricType::Counter, static_cast<double>(s.leases_granted_local));
  if (s.advice.local_supply > 0) {
    Single(out, "stoker_coordinator_local_capacity_samples_per_second",
           "Samples per second the node-local workers make at full busy: demand the pool need not meet.",
           MetricType::Gauge, s.advice.local_supply);
  }
  Single(out, "stoker_coordinator_units_committed_total", "Units whose batches were all acked.", MetricType::Counter,
         static_cast<double>(s.units_committed));
  Single(out, "stoker_coordinator_quarantined_samples_total",
         "Samples workers reported unreadable (distinct per epoch).", MetricType::Counter,
         static_cast<double>(s.quarantined_samples));
  out.push_back(FamilyBuilder("stoker_coordinator_quarantine_reports_refused_total",
                              "Quarantine reports not kept: not from the unit's lease holder, on a sample not in "
                              "the unit, or past --max-quarantine-reports.",
                              MetricType::Counter)
                    .Add({{"reason", "not_lease_holder"}}, static_cast<double>(s.quarantine_refused_not_holder))
                    .Add({{"reason", "not_in_unit"}}, static_cast<double>(s.quarantine_refused_not_in_unit))
                    .Add({{"reason", "over_cap"}}, static_cast<double>(s.quarantine_refused_over_cap))
                    .Build());
}

// Workers reported, refused or benched, and live shape changes: what peers did that the coordinator acted on.
void CollectEvents(const CoordinatorStats& s, MetricFamilies& out) {
  Single(out, "stoker_coordinator_workers_reported_total",
         "Workers a job's client reported for batches that were not the plan's (each time a job's client names a "
         "registered worker the job had not excluded): the job leases that worker nothing more.",
         MetricType::Counter, static_cast<double>(s.workers_reported));
  Single(out, "stoker_coordinator_worker_session_refused_total",
         "Requests naming a registered worker from another process of its key (without the secret its registration "
         "carried), refused: a stolen worker key acting for the workers /state lists, or a restarted worker's old "
         "process.",
         MetricType::Counter, static_cast<double>(s.worker_session_refused));
  Single(out, "stoker_coordinator_live_shape_changes_total",
         "Live shape changes: jobs re-planned from the point their ranks agreed on while ranks of the old shape "
         "were training (those sessions end; the survivors join the new shape).",
         MetricType::Counter, static_cast<double>(s.live_shape_changes));
  Single(out, "stoker_coordinator_workers_benched_total",
         "Times a worker was benched for a job (leased none of it for a minute, doubling each time): it held unsent, "
         "or reported sent and never delivered, three units of the job in a row while other workers delivered.",
         MetricType::Counter, static_cast<double>(s.workers_benched));
}

// Requests by method and status, their latency, rejected frames, transport errors, the journal.
void CollectService(const CoordinatorService& service, const Journal* journal, MetricFamilies& out) {
  const ServiceStats stats = service.Stats();
  FamilyBuilder requests("stoker_coordinator_requests_total", "Control requests answered, by method and status.",
                         MetricType::Counter);
  std::map<std::string, uint64_t> by = stats.by_method_code;
  for (const std::string& method : MethodNames()) by.try_emplace(method + "/OK", 0);
  for (const auto& [key, n] : by) {
    size_t slash = key.find('/');
    requests.Add({{"code", key.substr(slash + 1)}, {"method", key.substr(0, slash)}}, static_cast<double>(n));
  }
  out.push_back(requests.Build());
  FamilyBuilder latency("stoker_coordinator_request_seconds",
                        "From a request's receipt to its reply leaving, journal sync included.", MetricType::Histogram);
  const ServiceHistograms& h = service.histograms();
  for (size_t i = 0; i < h.request_seconds.size(); ++i) {
    latency.Add({{"method", MethodNames()[i]}}, *h.request_seconds[i]);
  }
  out.push_back(latency.Build());
  Single(out, "stoker_coordinator_rejected_frames_total",
         "Control frames rejected: unparseable, wrong frame count or protocol version.", MetricType::Counter,
         static_cast<double>(stats.bad_frames));
  CollectTransportErrors("coordinator", stats.transport_errors, {}, out);
  Single(out, "stoker_coordinator_retries_answered_total",
         "Retried lease requests answered from the reply cache (not applied twice).", MetricType::Counter,
         static_cast<double>(stats.retries_answered_from_cache));
  Single(out, "stoker_coordinator_reply_cache_bytes",
         "Bytes of lease replies held for retries (at most --max-cached-reply-bytes).", MetricType::Gauge,
         static_cast<double>(stats.reply_cache_bytes));
  Single(out, "stoker_coordinator_reply_cache_evictions_total",
         "Senders whose cached replies were dropped to stay under --max-cached-senders or --max-cached-reply-bytes.",
         MetricType::Counter, static_cast<double>(stats.reply_cache_evictions));
  if (journal == nullptr) return;
  out.push_back(FamilyBuilder("stoker_coordinator_journal_append_seconds",
                              "One group commit of the journal: write and fdatasync.", MetricType::Histogram)
                    .Add({}, *h.journal_sync_seconds)
                    .Build());
  Single(out, "stoker_coordinator_journal_bytes", "Size of the journal file.", MetricType::Gauge,
         static_cast<double>(journal->size_bytes()));
  Single(out, "stoker_coordinator_journal_writable",
         "1 while the journal takes writes; 0 during an outage (replies held, requests answered UNAVAILABLE).",
         MetricType::Gauge, stats.journal_writable ? 1.0 : 0.0);
  Single(out, "stoker_coordinator_journal_write_failures_total",
         "Journal syncs that failed (a full volume, an I/O error); each retry during an outage counts.",
         MetricType::Counter, static_cast<double>(stats.journal_write_failures));
  Single(out, "stoker_coordinator_journal_compaction_failures_total",
         "Journal compactions that failed (nothing is lost: the journal keeps growing until one succeeds).",
         MetricType::Counter, static_cast<double>(journal->compaction_failures()));
  if (auto space = journal->Space(); space.ok()) {
    Single(out, "stoker_coordinator_journal_volume_free_bytes",
           "Bytes still free for the coordinator on the journal's volume (statvfs f_bavail).", MetricType::Gauge,
           static_cast<double>(space->available_bytes));
    Single(out, "stoker_coordinator_journal_volume_size_bytes", "Size of the journal's volume.", MetricType::Gauge,
           static_cast<double>(space->total_bytes));
  }
}

}  // namespace

Collector CoordinatorCollector(const CoordinatorImpl& impl, const CoordinatorService& service,
                               const Journal* journal, uint32_t max_workers) {
  return [&impl, &service, journal, max_workers](MetricFamilies& out) {
    const CoordinatorStats s = impl.Stats();
    CollectJobs(s, out);
    CollectLeasing(s, max_workers, out);
    CollectEvents(s, out);
    CollectService(service, journal, out);
  };
}

}  // namespace stoker::coordinator
