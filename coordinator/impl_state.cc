// CoordinatorImpl, what it looks like: counters and per-job progress for the metrics, the /state JSON a person
// debugging reads, and the quarantined samples per epoch.
#include "coordinator/impl.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace stoker::coordinator {
namespace {

// What a person reads in /state about a job's input: "ranks wait 12 % of their steps; workers idle 48 %:
// scheduling (workers idle while ranks wait with room to fill)".
std::string BottleneckWhy(const JobInput& in, double worker_busy) {
  if (in.bottleneck.empty()) return "";
  char head[128];
  std::snprintf(head, sizeof(head), "ranks wait %.0f %% of their steps; workers idle %.0f %%: ", 100 * in.stall,
                100 * std::max(0.0, 1 - worker_busy));
  if (in.bottleneck == "cap") {
    return head + std::string("cap (its team wants more than its --team-max-workers allow: raise the cap)");
  }
  if (in.bottleneck == "workers") return head + std::string("workers (the pool is busy: add workers)");
  if (in.bottleneck == "window") {
    return head + std::string("window (every rank's prefetch window is full of batches in flight: raise prefetch)");
  }
  return head + std::string("scheduling (workers idle while ranks wait with room to fill)");
}

}  // namespace

CoordinatorStats CoordinatorImpl::Stats() const {
  MutexLock lock(mu_);
  CoordinatorStats s = stats_;
  s.workers = workers_.size();
  s.jobs = jobs_.size();
  s.live_clients = 0;
  s.units_leased = s.units_sent = s.units_pending = 0;
  for (const auto& [id, w] : workers_) {
    s.workers_draining += w.draining;
    s.workers_local += !w.local_group.empty() && !w.draining;
  }
  for (const auto& [name, job] : jobs_) {
    JobStats js;
    js.name = name;
    js.ranks = static_cast<uint32_t>(job.ranks.size());
    js.batch_size = job.record->spec.batch_size;
    js.shape_changes = job.record->shape_changes;
    js.team = TeamOfRecord(job);
    js.policy = shares_.PolicyOf(js.team);
    js.samples_leased = job.samples_leased;
    js.sample_seconds = shares_.SampleSecondsOf(name);
    js.cost_factor = shares_.CostFactorOf(name);
    js.stall = shares_.StallOf(name);
    js.stage_seconds = job.stage_seconds;
    const Plan& plan = job.plan;
    uint64_t slowest = plan.total_batches();
    for (uint32_t rank = 0; rank < job.ranks.size(); ++rank) {
      const RankRuntime& r = job.ranks[rank];
      const RankView view = ViewLocked(job, rank);
      s.live_clients += r.session_live;
      js.ranks_held += r.session_live;
      s.units_pending += r.pending.size();
      for (const auto& [unit, lease] : r.active) {
        (lease.sent ? s.units_sent : s.units_leased)++;
        (lease.sent ? js.units_sent : js.units_leased)++;
      }
      js.units_committed += view.received >= plan.total_batches() ? plan.total_units() : plan.UnitOf(view.received);
      slowest = std::min(slowest, view.consumed);
    }
    const uint64_t all = plan.total_units() * job.ranks.size();
    js.units_pending = all - std::min(all, js.units_committed + js.units_leased + js.units_sent);
    if (plan.steps_per_epoch() > 0 && plan.epochs() > 0) {
      js.epoch = std::min(plan.EpochOf(slowest), plan.epochs() - 1);
      const double done = static_cast<double>(slowest) - static_cast<double>(js.epoch) * plan.steps_per_epoch();
      js.epoch_progress = std::clamp(done / static_cast<double>(plan.steps_per_epoch()), 0.0, 1.0);
    }
    s.job_stats.push_back(std::move(js));
  }
  std::set<std::string> window_bound;
  for (const auto& [name, job] : jobs_) {
    bool room = false, waiting = false;
    for (uint32_t rank = 0; rank < job.ranks.size(); ++rank) {
      waiting = waiting || job.ranks[rank].session_live;
      room = room || HasRoomLocked(job, rank);
    }
    if (waiting && !room) window_bound.insert(name);
  }
  CapacityEstimator::Caps caps;
  for (const auto& [team, policy] : options_.teams) {
    if (policy.max_workers > 0) caps.max_workers[team] = policy.max_workers;
  }
  if (!caps.max_workers.empty()) {
    for (const auto& [name, job] : jobs_) caps.team_of[name] = TeamOfRecord(job);
  }
  for (const auto& [name, job] : jobs_) {
    const double cost = shares_.BoundedSampleSecondsOf(name);
    if (cost > 0) caps.sample_seconds[name] = cost;
  }
  // The advice is for the pool: node-local workers count as supply it need not make, not as pool workers.
  const size_t pool = PoolWorkersLocked(&caps.worker_threads);
  s.advice = capacity_.Advise(pool, clock_.Now(), window_bound, caps);
  s.reconciling = reconciling_;
  return s;
}

std::string CoordinatorImpl::StateJson() const {
  const CoordinatorStats stats = Stats();
  MutexLock lock(mu_);
  JsonWriter j;
  j.BeginObject()
      .Key("component").Value("coordinator")
      .Key("reconciling").Value(reconciling_)
      .Key("membership_version").Value(membership_version_)
      .Key("advice").BeginObject()
      .Key("recommended_workers").Value(stats.advice.recommended)
      .Key("demand_samples_per_second").Value(stats.advice.demand < 0 ? NAN : stats.advice.demand)
      .Key("worker_capacity_samples_per_second").Value(stats.advice.per_worker < 0 ? NAN : stats.advice.per_worker)
      .Key("worker_busy_ratio").Value(stats.advice.worker_busy < 0 ? NAN : stats.advice.worker_busy)
      .EndObject();
  WriteWorkersLocked(j, clock_.Now());
  WriteJobsLocked(j, stats);
  j.EndObject();
  return j.str();
}

void CoordinatorImpl::WriteWorkersLocked(JsonWriter& j, TimePoint now) const {
  std::map<std::string, size_t> leases_by_worker;
  for (const auto& [name, job] : jobs_) {
    for (const RankRuntime& r : job.ranks) {
      for (const auto& [unit, lease] : r.active) ++leases_by_worker[lease.worker_id];
    }
  }
  j.Key("workers").BeginArray();
  for (const auto& [id, w] : workers_) {
    j.BeginObject()
        .Key("id").Value(id)
        .Key("endpoint").Value(w.data_endpoint)
        .Key("data_public_key").Value(w.data_public_key)
        .Key("identity").Value(w.identity)
        .Key("threads").Value(w.threads)
        .Key("version").Value(w.version)
        .Key("draining").Value(w.draining)
        .Key("last_heard_ms_ago").Value(static_cast<int64_t>(ToMillis(now - w.last_heard)))
        .Key("leases").Value(static_cast<uint64_t>(leases_by_worker[id]))
        .Key("leases_granted").Value(w.leases_granted)
        .Key("local").Value(!w.local_group.empty())
        .EndObject();
  }
  j.EndArray();
}

void CoordinatorImpl::WriteJobsLocked(JsonWriter& j, const CoordinatorStats& stats) const {
  j.Key("jobs").BeginArray();
  for (const JobStats& js : stats.job_stats) {
    auto it = jobs_.find(js.name);
    if (it == jobs_.end()) continue;  // forgotten between the two locks
    const JobRuntime& job = it->second;
    j.BeginObject()
        .Key("name").Value(js.name)
        .Key("epochs").Value(job.plan.epochs())
        .Key("steps_per_epoch").Value(job.plan.steps_per_epoch())
        .Key("batches_per_unit").Value(job.plan.batches_per_unit())
        .Key("shape").BeginObject()
        .Key("ranks").Value(job.plan.world_size())
        .Key("batch_size").Value(job.plan.batch_size())
        .Key("origin_epoch").Value(job.plan.origin_epoch())
        .Key("origin_offset").Value(job.plan.origin_offset())
        .Key("changes").Value(js.shape_changes)
        .EndObject()
        .Key("epoch").Value(js.epoch)
        .Key("epoch_progress").Value(js.epoch_progress)
        .Key("share").BeginObject()
        .Key("team").Value(js.team)
        .Key("team_weight").Value(js.policy.weight)
        .Key("samples_leased").Value(js.samples_leased)
        .Key("team_priority").Value(static_cast<int64_t>(js.policy.priority))
        .Key("team_max_workers").Value(js.policy.max_workers)
        .Key("team_min_workers").Value(js.policy.min_workers)
        .Key("sample_cost_seconds").Value(js.sample_seconds)
        .Key("cost_factor").Value(js.cost_factor)
        .Key("stall").Value(js.stall)
        .Key("stage_seconds").BeginObject();
    for (size_t i = 0; i < js.stage_seconds.size(); ++i) j.Key(kJobStages[i]).Value(js.stage_seconds[i]);
    j.EndObject()
        .EndObject()
        .Key("input").BeginObject();
    auto input = stats.advice.jobs.find(js.name);
    if (input != stats.advice.jobs.end()) {
      j.Key("demand_samples_per_second").Value(input->second.demand)
          .Key("stall_ratio").Value(input->second.stall)
          .Key("bottleneck").Value(input->second.bottleneck)
          .Key("why").Value(BottleneckWhy(input->second, stats.advice.worker_busy));
    }
    j.EndObject()
        .Key("units").BeginObject()
        .Key("pending").Value(js.units_pending)
        .Key("leased").Value(js.units_leased)
        .Key("sent").Value(js.units_sent)
        .Key("committed").Value(js.units_committed)
        .EndObject()
        .Key("reported_workers").BeginArray();
    for (const std::string& id : job.reported_workers) j.Value(id);
    j.EndArray().Key("benched_workers").BeginArray();
    for (const auto& [id, delivery] : job.delivery) {
      if (BenchedLocked(job, id, clock_.Now())) j.Value(id);
    }
    j.EndArray().Key("ranks").BeginArray();
    for (uint32_t rank = 0; rank < job.ranks.size(); ++rank) {
      const RankRuntime& r = job.ranks[rank];
      const RankView view = ViewLocked(job, rank);
      j.BeginObject()
          .Key("client").Value(view.client_id)
          .Key("holder").Value(view.holder)
          .Key("live").Value(r.session_live)
          .Key("consumed").Value(view.consumed)
          .Key("received_watermark").Value(view.received)
          .Key("window").Value(view.window)
          .Key("active_leases").Value(static_cast<uint64_t>(r.active.size()))
          .Key("pending_units").Value(static_cast<uint64_t>(r.pending.size()))
          .Key("parked_requests").Value(static_cast<uint64_t>(r.parked.size()))
          .EndObject();
    }
    j.EndArray().EndObject();
  }
  j.EndArray();
}

std::map<uint64_t, QuarantineReport> CoordinatorImpl::QuarantineReports(const std::string& job_name,
                                                                       uint32_t epoch) const {
  MutexLock lock(mu_);
  auto job = jobs_.find(job_name);
  if (job == jobs_.end()) return {};
  auto epoch_it = job->second.quarantined.find(epoch);
  return epoch_it == job->second.quarantined.end() ? std::map<uint64_t, QuarantineReport>{} : epoch_it->second;
}

std::vector<uint64_t> CoordinatorImpl::QuarantinedSamples(const std::string& job_name, uint32_t epoch) const {
  std::vector<uint64_t> ids;
  for (const auto& [id, report] : QuarantineReports(job_name, epoch)) ids.push_back(id);
  return ids;
}

}  // namespace stoker::coordinator
