// FairShare (fair_share.h): two-level start-time fair queueing over the jobs waiting for workers.
#include "coordinator/fair_share.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <vector>

namespace stoker::coordinator {

namespace {

// "team=value,...": each value a number within [low, high] (above low when `above` is set, an integer when
// `integral` is), each team once.
StatusOr<std::map<std::string, double>> ParseTeamValues(const std::string& text, const char* flag, double low,
                                                        double high, bool above, bool integral) {
  std::map<std::string, double> values;
  for (size_t begin = 0; begin < text.size();) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string entry = text.substr(begin, comma - begin);
    begin = comma + 1;
    if (entry.empty()) continue;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgumentError(std::string(flag) + ": '" + entry + "' is not team=value (e.g. team-a=2)");
    }
    const std::string team = entry.substr(0, eq);
    const std::string number = entry.substr(eq + 1);
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(number.c_str(), &end);
    const bool in_range = above ? value > low : value >= low;
    if (number.empty() || *end != '\0' || errno != 0 || !std::isfinite(value) || !in_range || value > high ||
        (integral && value != std::floor(value))) {
      std::ostringstream want;
      want << (integral ? "an integer " : "a number ") << (above ? "above " : "from ") << low << (above ? " and at most " : " to ") << high;
      return InvalidArgumentError(std::string(flag) + ": '" + entry + "': '" + number + "' is not " + want.str());
    }
    if (!values.emplace(team, value).second) {
      return InvalidArgumentError(std::string(flag) + ": team '" + team + "' is named twice");
    }
  }
  return values;
}

}  // namespace

StatusOr<TeamPolicies> ParseTeamPolicies(const std::string& weights, const std::string& priorities,
                                         const std::string& max_workers, const std::string& min_workers) {
  TeamPolicies teams;
  STOKER_ASSIGN_OR_RETURN(auto w, ParseTeamValues(weights, "--team-weights", 0.001, 1000, false, false));
  STOKER_ASSIGN_OR_RETURN(auto p, ParseTeamValues(priorities, "--team-priorities", -1000, 1000, false, true));
  STOKER_ASSIGN_OR_RETURN(auto m, ParseTeamValues(max_workers, "--team-max-workers", 1, 1e6, false, true));
  STOKER_ASSIGN_OR_RETURN(auto g, ParseTeamValues(min_workers, "--team-min-workers", 1, 1e6, false, true));
  for (const auto& [team, v] : w) teams[team].weight = v;
  for (const auto& [team, v] : p) teams[team].priority = static_cast<int32_t>(v);
  for (const auto& [team, v] : m) teams[team].max_workers = static_cast<uint32_t>(v);
  for (const auto& [team, v] : g) {
    TeamPolicy& policy = teams[team];
    policy.min_workers = static_cast<uint32_t>(v);
    if (policy.max_workers > 0 && policy.min_workers > policy.max_workers) {
      return InvalidArgumentError("--team-min-workers: team '" + team + "' is guaranteed " +
                                  std::to_string(policy.min_workers) + " workers but capped at " +
                                  std::to_string(policy.max_workers) + " by --team-max-workers");
    }
  }
  return teams;
}

FairShare::FairShare(TeamPolicies teams) : policies_(std::move(teams)) {}

std::string FairShare::TeamOf(const std::string& identity) {
  const size_t colon = identity.find(':');
  return colon == std::string::npos ? identity : identity.substr(colon + 1);
}

const TeamPolicy& FairShare::PolicyOf(const std::string& team) const {
  static const TeamPolicy kDefault;
  auto it = policies_.find(team);
  return it == policies_.end() ? kDefault : it->second;
}

FairShare::Key FairShare::KeyOf(const std::string& team, const std::string& job) const {
  const int32_t priority = PolicyOf(team).priority;
  auto vt = virtual_time_.find(priority);
  const double now = vt == virtual_time_.end() ? 0 : vt->second;
  auto t = teams_.find(team);
  if (t == teams_.end()) return {false, -priority, now, 0, 0, 0};
  auto j = t->second.jobs.find(job);
  const Tag tag = j == t->second.jobs.end() ? Tag{} : j->second;
  const Tag& team_tag = t->second.tag;
  return {false,
          -priority,
          team_tag.StartAt(now) - team_tag.Lead(),
          tag.StartAt(t->second.virtual_time) - tag.Lead(),
          team_tag.served,
          tag.served};
}

double FairShare::StallOf(const std::string& job) const {
  auto known = team_of_.find(job);
  if (known == team_of_.end()) return 0;
  return teams_.at(known->second).jobs.at(job).stall;
}

void FairShare::SetStalls(const std::map<std::string, double>& stalls) {
  for (auto& [name, team] : teams_) {
    team.tag.stall = 0;
    for (auto& [job, tag] : team.jobs) {
      auto s = stalls.find(job);
      tag.stall = s != stalls.end() && std::isfinite(s->second) ? std::clamp(s->second, 0.0, 1.0) : 0.0;
      team.tag.stall = std::max(team.tag.stall, tag.stall);
    }
  }
}

// Each level's virtual time moves to the start the order used, lead included, but a lead never moves it back: it
// stays at or behind every waiting job's start, so a stalled job served early takes nothing from the others' tags
// (moved to the start without the lead, it passed the waiting jobs' starts and the lag bound cut what they were
// owed), and a job that arrives starts level with the others (moved back by a lead, it started behind them and took
// that many grants). Without stalls it is the start of the grant, as before.
void FairShare::Charge(const std::string& team, const std::string& job, uint64_t samples) {
  auto known = team_of_.find(job);
  if (known != team_of_.end() && known->second != team) LeaveTeam(job);
  team_of_[job] = team;
  Team& t = teams_[team];
  Tag& job_tag = t.jobs[job];
  double& now = VirtualTime(team);
  const double work = static_cast<double>(samples) * CostFactorOf(job);
  const double team_start = t.tag.StartAt(now);
  now = std::max(team_start - t.tag.Lead(), std::min(now, team_start));
  t.tag = {team_start + work / WeightOf(team), work / WeightOf(team), ++grants_, t.tag.stall};
  const double job_start = job_tag.StartAt(t.virtual_time);
  t.virtual_time = std::max(job_start - job_tag.Lead(), std::min(t.virtual_time, job_start));
  job_tag = {job_start + work, work, grants_, job_tag.stall};
  t.samples += samples;
}

void FairShare::ReportCost(const std::string& job, uint64_t samples, double busy_seconds) {
  if (samples == 0 || !std::isfinite(busy_seconds) || busy_seconds <= 0) return;
  const double per_sample = busy_seconds / static_cast<double>(samples);
  if (!std::isnormal(per_sample)) return;  // too small to be a cost: it would read as 0, "not reported"
  Cost& cost = costs_[job];
  cost.recent[cost.reports++ % kCostReports] = per_sample;
  std::array<double, kCostReports> sorted = cost.recent;
  const size_t held = std::min(cost.reports, kCostReports);
  std::nth_element(sorted.begin(), sorted.begin() + held / 2, sorted.begin() + held);
  cost.median = sorted[held / 2];
  // The reference is taken again after each report while fewer than 64 jobs are held, else after about as many
  // reports as jobs: amortised, a report costs O(1) beyond its own median.
  if (++reports_since_reference_ >= std::max<size_t>(1, costs_.size() / 64 * 64)) TakeReference();
}

// The median job's cost: each job counts once, however many units it makes, and the bounds on the factors then
// hold between any job and the typical one.
void FairShare::TakeReference() {
  reports_since_reference_ = 0;
  std::vector<double> medians;
  medians.reserve(costs_.size());
  for (const auto& [job, cost] : costs_) medians.push_back(cost.median);
  if (medians.empty()) {
    reference_cost_ = 0;
    return;
  }
  std::nth_element(medians.begin(), medians.begin() + medians.size() / 2, medians.end());
  reference_cost_ = medians[medians.size() / 2];
}

double FairShare::CostFactorOf(const std::string& job) const {
  auto cost = costs_.find(job);
  if (cost == costs_.end() || reference_cost_ <= 0) return 1;
  return std::clamp(cost->second.median / reference_cost_, 1 / kMaxCostFactor, kMaxCostFactor);
}

double FairShare::SampleSecondsOf(const std::string& job) const {
  auto cost = costs_.find(job);
  return cost == costs_.end() ? 0 : cost->second.median;
}

double FairShare::BoundedSampleSecondsOf(const std::string& job) const {
  if (costs_.count(job) == 0 || reference_cost_ <= 0) return 0;
  return reference_cost_ * CostFactorOf(job);
}

void FairShare::Forget(const std::string& job) {
  if (costs_.erase(job) != 0) TakeReference();
  LeaveTeam(job);
}

void FairShare::LeaveTeam(const std::string& job) {
  auto known = team_of_.find(job);
  if (known == team_of_.end()) return;
  auto t = teams_.find(known->second);
  team_of_.erase(known);
  if (t == teams_.end()) return;
  t->second.jobs.erase(job);
  if (t->second.jobs.empty()) teams_.erase(t);
}

std::string FairShare::TeamOfJob(const std::string& job) const {
  auto known = team_of_.find(job);
  return known == team_of_.end() ? std::string() : known->second;
}

uint64_t FairShare::SamplesOf(const std::string& team) const {
  auto t = teams_.find(team);
  return t == teams_.end() ? 0 : t->second.samples;
}

}  // namespace stoker::coordinator
