// FairShare: which job a worker's free place goes to when several jobs wait for one.
//
// A platform team runs one worker pool for many training jobs. Without a rule, a place freed on a worker went to
// the job that freed it, so a job with many ranks and large windows kept every place it ever held: on a saturated
// pool a 4-rank job beside a 1-rank job took 94 % of the batches. Here the pool's work is shared weighted max-min
// fair, in two levels: between teams by their weights, then equally between a team's jobs, so a team gains
// nothing by starting more jobs. It is work-conserving: a job that cannot use a place (its window is full, it
// asks for nothing) is passed over, and what it leaves goes to the others.
//
// The rule is start-time fair queueing (Goyal, Vin and Cheng, SIGCOMM '96) at each level. Every grant of n samples
// to a job of team t moves the team's finish tag by n / weight(t) and the job's, within its team, by n; the job
// served next is the one whose team starts soonest, then whose job starts soonest, where a start is the tag, but
// never more than two of its own grants (kLagGrants) behind the level's virtual time (the start of the last grant
// at that level). The bound is what keeps an idle job from banking service: one that returns after an hour starts
// two grants ahead of the others, not an hour. It is two grants, not none as in the textbook rule, because many
// workers decide at once, each among the jobs waiting on it: the virtual time is the start of whichever grant was
// last on any worker, and a job whose tag it passed lost that much on its next grant. A job of small grants sat
// near the virtual time and lost it often: in the scale simulation (bench/scheduler_bench.cc), jobs of cheap
// samples beside jobs of samples four times as dear got 10 % less than their share; with the two grants kept,
// within 5 %.
//
// What it shares is the pool's time, not its samples: a job whose samples cost four times as much to make (larger
// images, a heavier augmentation) gets a quarter of the samples for the same share. Each grant is charged samples x
// the job's cost factor: what a sample of the job costs the workers (the median over its latest kCostReports units'
// reports of pipeline-thread seconds per sample, UnitDone.busySeconds) over the pool's reference cost (the median
// job's), held within [1 / kMaxCostFactor, kMaxCostFactor]. A job not reported on yet counts as 1. The per-job
// median is there so that one worker among several cannot make a job look dear or cheap; the reference is a median
// over jobs so that among many jobs one cannot move it far (among two, it is one of them); and the bounds so that
// the workers together cannot move a job's share against the typical job's by more than that factor. Tags and costs live in
// memory only: after a coordinator restart every job starts level and its cost is learnt again from its first
// reports, which is fair from then on.
//
// Within the shares, the most starved go first: a job's start is brought forward by its stall (0..1, the share of
// its steps its worst rank waited for input lately, from the clients' reports: CapacityEstimator::JobStalls) x
// kStallLeadGrants of its own last grant, and a team's by its most stalled job's stall x one of the team's grants
// (one lead for all the team's jobs: with each job's own, a team's unstalled job was served on its stalled
// sibling's lead, and the team took 3 % more than its weight for good). Between teams level in their shares, the
// one with a job starving is served before one whose input is ahead, and within a team the job starving before its
// siblings. A grant moves the tag from the start without the lead, and the virtual time to the start with it but
// never back for a lead (so that no waiting start is passed and cut by the lag bound, and a job that arrives starts
// level): a job or team that always stalls is at most one of its own grants ahead of its share, and one back from
// idle at most three. The order changes; the shares do not.
//
// A team is the name of the client key its jobs registered with ("client:team-a" is team "team-a"; without
// CURVE every job is team ""). Its policy (TeamPolicy) comes from the coordinator's --team-weights,
// --team-priorities, --team-max-workers and --team-min-workers; a team not named has weight 1, priority 0, no cap
// and no guarantee.
//
// Priorities are strict: while a team of a higher priority waits for a place it can use, no team of a lower one gets
// it. A leased unit is never taken back, so a job of a higher priority that arrives takes each place as the unit in
// it ends — preemption at unit boundaries, with nothing lost or made twice. Fair queueing runs within each priority,
// with its own virtual time. The cap (at most N workers' worth of the pool's queues) the coordinator's Impl applies
// when it leases (CoordinatorImpl::TeamRoomLocked), since it alone knows what each team holds.
//
// A guarantee (at least M workers' worth) comes before priorities: a team that waits and has had less than its
// guarantee lately (CoordinatorImpl::BelowMinimumLocked says) is served first, whatever its priority, so a research
// team promised one worker keeps it beside a production team that could use the whole pool. Teams below their
// guarantees are served among themselves by priority and fair order as usual.
//
// Thread safety: none; the coordinator's Impl calls it under its mutex.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "stoker/status.h"

namespace stoker::coordinator {

struct TeamPolicy {
  double weight = 1;         // its share among the teams of its priority that wait
  int32_t priority = 0;      // higher first
  uint32_t max_workers = 0;  // at most this many workers' worth of the pool (0: no cap)
  uint32_t min_workers = 0;  // at least this many workers' worth while it waits, before priorities (0: none)
};
using TeamPolicies = std::map<std::string, TeamPolicy>;

// The coordinator's --team-weights, --team-priorities, --team-max-workers and --team-min-workers
// ("team-a=3,team-b=0.5"; each team named once per flag) into one policy per team. Weights are from 0.001 to 1,000
// (tags grow by samples / weight, kept far from overflow and rounding); priorities integers from -1000 to 1000;
// caps and guarantees integers from 1 to 1,000,000, a team's guarantee no more than its cap. Errors:
// InvalidArgument naming the flag and the entry.
StatusOr<TeamPolicies> ParseTeamPolicies(const std::string& weights, const std::string& priorities,
                                         const std::string& max_workers, const std::string& min_workers = "");

class FairShare {
 public:
  explicit FairShare(TeamPolicies teams = {});

  // The team of an authenticated client identity.
  static std::string TeamOf(const std::string& identity);
  const TeamPolicy& PolicyOf(const std::string& team) const;
  double WeightOf(const std::string& team) const { return PolicyOf(team).weight; }

  // Where a job of `team` stands in the order waiting requests are served in: the smaller first. A job not charged
  // yet starts level with the last grant of its priority.
  struct Key {
    bool below_minimum = false;  // its team has had less than its guarantee lately: first (set by the caller)
    int32_t priority = 0;        // negated: the higher priority sorts first
    double team_start = 0;
    double job_start = 0;
    // Between equal starts, the one served least recently. The starts of every team (or job) at or behind the
    // virtual time are equal, and grants of equal size keep them so; a fixed order among them (by name) served the
    // same one first each time, and on workers that hold credit for only some jobs, the jobs late in that order fell
    // ever further behind (the scale simulation, bench/scheduler_bench.cc: 36 % below their share). Taking the
    // least recently served among equals is round robin, whatever the names.
    uint64_t team_served = 0;
    uint64_t job_served = 0;
    bool operator<(const Key& o) const {
      if (below_minimum != o.below_minimum) return below_minimum;
      if (priority != o.priority) return priority < o.priority;
      if (team_start != o.team_start) return team_start < o.team_start;
      if (team_served != o.team_served) return team_served < o.team_served;
      return job_start != o.job_start ? job_start < o.job_start : job_served < o.job_served;
    }
  };
  Key KeyOf(const std::string& team, const std::string& job) const;

  // Records a grant of `samples` to `job`, leased to a client of `team` (a job whose clients change team moves),
  // charged at the job's cost factor.
  void Charge(const std::string& team, const std::string& job, uint64_t samples);
  // A pool worker made `samples` samples of `job` in `busy_seconds` of pipeline-thread time (one unit's report).
  // Reports of no samples, or of no finite positive time, are ignored.
  void ReportCost(const std::string& job, uint64_t samples, double busy_seconds);
  // What a sample of `job` costs against the pool's reference (1 until it is reported on), and its own cost in
  // pipeline-thread seconds (0 until then).
  double CostFactorOf(const std::string& job) const;
  double SampleSecondsOf(const std::string& job) const;
  // Its cost held within the same bounds as its factor (the reference x CostFactorOf; 0 until reported on): what
  // caps, guarantees and the capacity advice count, so that the workers' reports move those no further than shares.
  double BoundedSampleSecondsOf(const std::string& job) const;
  // Each job's stall (0..1; NaN reads as 0), replacing the last ones: a job not named has none, nor a job not
  // charged yet (until the next call). StallOf says the one its order counts (for /state).
  void SetStalls(const std::map<std::string, double>& stalls);
  double StallOf(const std::string& job) const;
  // A job forgotten: its tag and cost go, and its team's tag once the team has no job left, so what is held is at
  // most the jobs held.
  void Forget(const std::string& job);

  static constexpr size_t kCostReports = 15;
  static constexpr double kLagGrants = 2;
  static constexpr double kMaxCostFactor = 16;
  static constexpr double kStallLeadGrants = 1;

  // The team a job was last charged to ("" if none), and the samples leased to a team's jobs since it last had none
  // (for /state and metrics).
  std::string TeamOfJob(const std::string& job) const;
  uint64_t SamplesOf(const std::string& team) const;
  size_t teams() const { return teams_.size(); }

 private:
  struct Tag {
    double finish = 0;
    double last = 0;      // what its last grant moved it by
    uint64_t served = 0;  // the grant (grants_) it was last charged
    double stall = 0;     // a job's stall; a team's, its jobs' largest (SetStalls)
    // Where its next grant starts, the level's virtual time being `now`: its finish, or if that is further behind,
    // kLagGrants of its own grants behind `now`.
    double StartAt(double now) const { return std::max(finish, now - kLagGrants * last); }
    // How far its start is brought forward: its stall (0..1) x kStallLeadGrants of its own last grant.
    double Lead() const { return stall * kStallLeadGrants * last; }
  };
  struct Team {
    Tag tag;
    double virtual_time = 0;           // the start of the last grant to one of its jobs
    std::map<std::string, Tag> jobs;   // job -> its tag within the team
    uint64_t samples = 0;
  };
  struct Cost {
    std::array<double, kCostReports> recent{};  // seconds per sample of its latest units, oldest overwritten first
    size_t reports = 0;
    double median = 0;                          // of `recent`
  };
  double& VirtualTime(const std::string& team) { return virtual_time_[PolicyOf(team).priority]; }
  void LeaveTeam(const std::string& job);
  void TakeReference();

  const TeamPolicies policies_;
  std::map<std::string, Team> teams_;
  std::map<std::string, std::string> team_of_;  // job -> its team in teams_
  std::map<int32_t, double> virtual_time_;      // per priority: the start of the last grant to one of its teams
  uint64_t grants_ = 0;                         // grants charged so far
  std::map<std::string, Cost> costs_;           // job -> what its samples cost, once reported on
  double reference_cost_ = 0;                   // seconds per sample of the median job (TakeReference)
  size_t reports_since_reference_ = 0;
};

}  // namespace stoker::coordinator
