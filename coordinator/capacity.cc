// CapacityEstimator (capacity.h): rates from the cumulative counters peers report, and the worker count advised.
#include "coordinator/capacity.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace stoker::coordinator {
namespace {
constexpr Duration kWindow = Millis(30000);
constexpr Duration kMinSpan = Millis(2000);
constexpr Duration kResolution = Millis(1000);
}  // namespace

void CapacityEstimator::Record(Series& series, const Sample& sample) {
  if (!series.samples.empty()) {
    const Sample& last = series.samples.back();
    // Counters restart only with a new reporter id; going backwards means a confused peer: start over.
    if (sample.samples < last.samples || sample.a < last.a) series.samples.clear();
    else if (sample.at - last.at < kResolution) return;
  }
  series.samples.push_back(sample);
  while (!series.samples.empty() && sample.at - series.samples.front().at > kWindow) series.samples.pop_front();
}

std::optional<CapacityEstimator::Growth> CapacityEstimator::GrowthOver(const Series& series, TimePoint now) {
  if (series.samples.size() < 2 || now - series.samples.back().at > kWindow) return std::nullopt;
  const Sample& first = series.samples.front();
  const Sample& last = series.samples.back();
  if (last.at - first.at < kMinSpan) return std::nullopt;
  return Growth{ToSeconds(last.at - first.at), last.a - first.a, last.b - first.b, last.samples - first.samples};
}

void CapacityEstimator::Worker(const std::string& worker_id, uint32_t threads, double busy_seconds, uint64_t samples,
                               TimePoint now, bool local, const std::string& local_job) {
  Series& s = workers_[worker_id];
  s.threads = std::max<uint32_t>(1, threads);
  s.local = local;
  s.job = local_job;
  Record(s, {now, busy_seconds, 0, static_cast<double>(samples)});
}

void CapacityEstimator::Client(const std::string& job, uint32_t rank, const std::string& client_id,
                               double step_seconds, double stall_seconds, uint64_t samples, TimePoint now) {
  Series& s = clients_[{job, rank, client_id}];
  s.job = job;
  Record(s, {now, step_seconds, stall_seconds, static_cast<double>(samples)});
}

void CapacityEstimator::ForgetWorker(const std::string& worker_id) { workers_.erase(worker_id); }

void CapacityEstimator::Prune(TimePoint now) {
  auto stale = [&](const Series& s) { return s.samples.empty() || now - s.samples.back().at > kWindow; };
  std::erase_if(workers_, [&](const auto& entry) { return stale(entry.second); });
  std::erase_if(clients_, [&](const auto& entry) { return stale(entry.second); });
}

std::map<std::string, double> CapacityEstimator::LocalSupply(TimePoint now) const {
  std::map<std::string, double> by_job;
  for (const auto& [id, s] : workers_) {
    const std::optional<Growth> g = s.local ? GrowthOver(s, now) : std::nullopt;
    if (!g) continue;
    // At full busy if it was busy enough to say, else what it made.
    by_job[s.job] += g->a >= 0.5 && g->samples > 0 ? g->samples / g->a * s.threads : g->samples / g->seconds;
  }
  return by_job;
}

namespace {

// What the pool must make, in workers (with the headroom): each job's demand less what its node-local workers make
// (counted up to its own demand: beyond it, it is no use to other jobs), in workers by its cost; each team's sum at
// most its cap (local leases are outside the cap).
template <typename TeamOf, typename WorkersFor, typename CapOf>
double PoolWorkers(const std::map<std::string, double>& local_supply, const CapacityAdvice& advice,
                   const TeamOf& team_of, const WorkersFor& workers_for, const CapOf& cap_of) {
  std::map<std::string, double> team_workers;
  for (const auto& [job, in] : advice.jobs) {
    auto local = local_supply.find(job);
    const double wanted = in.demand * kHeadroom;
    const double made = local == local_supply.end() ? 0 : std::min(local->second, wanted);
    team_workers[team_of(job)] += workers_for(job, wanted - made);
  }
  double pool = 0;
  for (const auto& [team, workers] : team_workers) pool += std::min(workers, cap_of(team) * kHeadroom);
  return pool;
}

}  // namespace

// The pool's own figures (node-local workers are supply, not pool): its rate per worker at full busy, and how busy
// it is.
void CapacityEstimator::PoolFigures(CapacityAdvice& advice, TimePoint now) const {
  double capacity_sum = 0, busy_sum = 0, thread_seconds = 0;
  size_t capacity_n = 0;
  for (const auto& [id, s] : workers_) {
    const std::optional<Growth> g = s.local ? std::nullopt : GrowthOver(s, now);
    if (!g) continue;
    const double busy = g->a, made = g->samples;
    busy_sum += busy;
    thread_seconds += g->seconds * s.threads;
    if (busy < 0.5 || made <= 0) continue;  // too idle over the window to say how fast it is
    capacity_sum += made / busy * s.threads;
    ++capacity_n;
  }
  if (capacity_n > 0) advice.per_worker = capacity_sum / static_cast<double>(capacity_n);
  if (thread_seconds > 0) advice.worker_busy = std::min(1.0, busy_sum / thread_seconds);
}

double CapacityEstimator::PerWorker(TimePoint now) const {
  CapacityAdvice advice;
  PoolFigures(advice, now);
  return advice.per_worker;
}

std::map<std::string, CapacityEstimator::Observed> CapacityEstimator::ObservedJobs(TimePoint now) const {
  std::map<std::string, Observed> observed;
  for (const auto& [key, s] : clients_) {
    const std::optional<Growth> g = GrowthOver(s, now);
    if (!g) continue;
    const double step = g->a, stall = g->b, delivered = g->samples;
    if (step <= 0 || delivered <= 0) continue;
    Observed& o = observed[s.job];
    o.rate += delivered / step;
    o.stall = std::max(o.stall, std::clamp(stall / step, 0.0, 1.0));
  }
  return observed;
}

std::map<std::string, double> CapacityEstimator::JobStalls(TimePoint now) const {
  std::map<std::string, double> stalls;
  for (const auto& [job, o] : ObservedJobs(now)) stalls[job] = std::min(o.stall, kMaxJobStall);
  return stalls;
}

CapacityAdvice CapacityEstimator::Advise(size_t workers, TimePoint now,
                                         const std::set<std::string>& window_bound) const {
  return Advise(workers, now, window_bound, Caps{});
}

CapacityAdvice CapacityEstimator::Advise(size_t workers, TimePoint now, const std::set<std::string>& window_bound,
                                         const Caps& caps) const {
  CapacityAdvice advice;
  const std::map<std::string, double> local_by_job = LocalSupply(now);
  for (const auto& [job, rate] : local_by_job) advice.local_supply = std::max(advice.local_supply, 0.0) + rate;
  PoolFigures(advice, now);
  const std::map<std::string, Observed> observed = ObservedJobs(now);
  // Each capped team's jobs count for at most its cap.
  auto team_of = [&](const std::string& job) {
    auto t = caps.team_of.find(job);
    return t == caps.team_of.end() ? std::string() : t->second;
  };
  // Caps are workers' time (CoordinatorImpl::TeamRoomLocked), so demands are weighed in workers: a job's samples/s
  // at its own cost over a worker's threads, or at the pool's mean (per_worker) while its cost is not known.
  auto cap_of = [&](const std::string& team) {  // in workers
    auto m = caps.max_workers.find(team);
    return m == caps.max_workers.end() ? std::numeric_limits<double>::infinity() : static_cast<double>(m->second);
  };
  auto workers_for = [&](const std::string& job, double samples_per_second) {
    auto cost = caps.sample_seconds.find(job);
    if (cost != caps.sample_seconds.end() && cost->second > 0) {
      return samples_per_second * cost->second / std::max(caps.worker_threads, 1.0);
    }
    return samples_per_second / advice.per_worker;
  };
  std::map<std::string, double> team_demand;  // samples/s
  std::map<std::string, double> team_workers;  // the same in workers (once per_worker is known)
  for (const auto& [job, o] : observed) {
    JobInput& in = advice.jobs[job];
    in.stall = std::min(o.stall, kMaxJobStall);
    in.demand = o.rate / (1 - in.stall);
    team_demand[team_of(job)] += in.demand;
    if (advice.per_worker > 0) team_workers[team_of(job)] += workers_for(job, in.demand);
  }
  auto over_cap = [&](const std::string& team) {  // the share of its demand a team's cap leaves it (1: all)
    auto held = team_workers.find(team);
    if (held == team_workers.end() || held->second <= cap_of(team)) return 1.0;
    return cap_of(team) / held->second;
  };
  for (const auto& [team, demand] : team_demand) {
    advice.demand = std::max(advice.demand, 0.0) + demand * over_cap(team);
  }
  bool waiting_with_idle_workers = false;
  for (const auto& [job, o] : observed) {
    JobInput& in = advice.jobs[job];
    if (in.stall < kJobStalled) continue;
    const std::string team = team_of(job);
    if (over_cap(team) < 1) {
      in.bottleneck = "cap";
    } else if (advice.worker_busy >= kPoolBusy) {
      in.bottleneck = "workers";
    } else {
      in.bottleneck = window_bound.count(job) != 0 ? "window" : "scheduling";
      waiting_with_idle_workers = true;
    }
  }
  if (advice.demand < 0 || advice.per_worker <= 0) {
    advice.recommended = static_cast<uint32_t>(workers);
    return advice;
  }
  double needed = std::ceil(PoolWorkers(local_by_job, advice, team_of, workers_for, cap_of));
  if (waiting_with_idle_workers) needed = std::max(needed, static_cast<double>(workers));
  double most = static_cast<double>(std::max<size_t>(2 * workers, workers + 1));
  advice.recommended = static_cast<uint32_t>(std::clamp(needed, 1.0, most));
  return advice;
}

}  // namespace stoker::coordinator
