// CoordinatorImpl, who delivers: a worker that holds leases and never sends (stuck on a read that never returns, or
// a stolen worker key hoarding a rank's window) would keep a job waiting for ever, since its heartbeats renew the
// leases; one that reports units sent and never sends them costs an ack timeout each, and re-leases may go back to
// it. Both are judged against what the rank's other workers do, never against a fixed time:
// - a lease unsent for longer than OverdueAfterLocked (the lease TTL, kOverdueFactor times the job's lease-to-commit
//   time, and kOwnPaceFactor times its worker's own), while another worker has committed a unit of the same rank
//   that was leased after it, goes back (releases{reason="overdue"}); so does one the rank's client waits for
//   alone (every batch it received consumed, the first it lacks in the unit) while another worker committed a unit
//   of another rank leased after it: a rank's last units, with nothing of the rank leased after them, were else
//   held for ever;
// - a lease gone back unsent (overdue, or not renewed) on that evidence, or unacknowledged while another worker
//   delivered a unit of the rank leased after it was sent, is a strike against its worker, at most one per
//   OverdueAfterLocked; a commit of its own clears them, and so does a long pause between two; at kStrikes the
//   worker is benched for the job: its unsent leases of the job go back and it is leased none of the job for
//   kFirstBench, twice as long each time after, for as long as its id stays registered.
// Work leased later and delivered first is the evidence, and only a pool worker's whole unit counts (a node-local
// worker has no network to cross, a re-lease of a few missing batches is quick, a lease adopted after a restart has
// no known start). A stall of every worker strikes at most the workers whose older units were overtaken just
// before it; a client that stops taking batches delivers nothing later, so strikes nobody.
#include <algorithm>

#include "base/logging.h"
#include "coordinator/impl.h"

namespace stoker::coordinator {

namespace {

constexpr int kOverdueFactor = 4;
constexpr int kOwnPaceFactor = 2;
constexpr uint32_t kStrikes = 3;
constexpr int kStrikeMemory = 4;  // spells
constexpr Duration kFirstBench = std::chrono::minutes(1);
constexpr Duration kLongestBench = std::chrono::hours(1);

// A moving average over about the last 16 values: it follows a pace without one slow unit setting it.
void Average(Duration& average, uint64_t& count, Duration value) {
  average = count == 0 ? value : average + (value - average) / 16;
  ++count;
}

}  // namespace

void CoordinatorImpl::NoteCommitLocked(JobRuntime& job, RankRuntime& r, const ActiveLease& lease, TimePoint now) {
  // A whole unit a pool worker was leased is the measure of pace and the evidence against others; a node-local
  // worker's (no network between), a re-lease of a few missing batches, or one adopted after a restart is neither.
  const bool paced = !lease.no_pace && !lease.local;
  if (paced) Average(job.commit_time, job.commits, now - lease.leased_at);
  if (lease.worker_id.empty()) return;  // its worker is gone
  if (paced) {
    // The rank's two latest-leased commits by distinct workers: enough to tell whether anyone but a given worker
    // has delivered work leased after a given time.
    auto& recent = r.recent_commits;
    auto mine = std::find_if(recent.begin(), recent.end(), [&](const auto& c) { return c.first == lease.worker_id; });
    if (mine != recent.end()) {
      mine->second = std::max(mine->second, lease.leased_at);
    } else if (recent[1].first.empty() || lease.leased_at > recent[1].second) {
      recent[1] = {lease.worker_id, lease.leased_at};
    }
    if (recent[1].second > recent[0].second) std::swap(recent[0], recent[1]);
  }
  if (workers_.count(lease.worker_id) == 0) return;
  JobRuntime::Delivery& d = job.delivery[lease.worker_id];
  if (paced) Average(d.commit_time, d.commits, now - lease.leased_at);
  d.strikes = 0;  // it delivers
}

bool CoordinatorImpl::OthersDeliveredSinceLocked(const RankRuntime& r, const std::string& worker_id,
                                                 TimePoint since) const {
  return std::any_of(r.recent_commits.begin(), r.recent_commits.end(), [&](const auto& c) {
    return c.second > since && !c.first.empty() && c.first != worker_id;
  });
}

Duration CoordinatorImpl::OverdueAfterLocked(const JobRuntime& job, const std::string& worker_id) const {
  Duration after = std::max<Duration>(options_.lease_ttl, kOverdueFactor * job.commit_time);
  auto it = job.delivery.find(worker_id);
  if (it != job.delivery.end() && it->second.commits > 0) after = std::max(after, kOwnPaceFactor * it->second.commit_time);
  return after;
}

bool CoordinatorImpl::OverdueLocked(const JobRuntime& job, uint32_t rank, uint64_t unit, const ActiveLease& lease,
                                    TimePoint now) const {
  if (lease.sent || job.commits == 0 || lease.worker_id.empty()) return false;
  const Duration age = now - lease.leased_at;
  if (age <= options_.lease_ttl || age <= OverdueAfterLocked(job, lease.worker_id)) return false;
  const RankRuntime& r = job.ranks[rank];
  if (OthersDeliveredSinceLocked(r, lease.worker_id, lease.leased_at)) return true;
  // A rank's last units have nothing of the rank leased after them to overtake them: there the evidence is its
  // client waiting for this unit alone (it has taken every batch it received, and the first it lacks is here)
  // while another worker delivers the job's other ranks work leased after it.
  const RankView view = ViewLocked(job, rank);
  if (view.consumed != view.received || job.plan.UnitOf(view.received) != unit) return false;
  for (const RankRuntime& other : job.ranks) {  // a loop, not a lambda: the lock analysis follows it
    if (OthersDeliveredSinceLocked(other, lease.worker_id, lease.leased_at)) return true;
  }
  return false;
}

void CoordinatorImpl::StrikeLocked(const std::string& job_name, JobRuntime& job, const std::string& worker_id,
                                   TimePoint now) {
  if (workers_.count(worker_id) == 0) return;
  JobRuntime::Delivery& d = job.delivery[worker_id];
  // One strike per spell: a worker whose several units go back together has failed once, not several times. And
  // strikes are of a run: one long after the last starts the count again.
  const Duration spell = OverdueAfterLocked(job, worker_id);
  if (d.last_strike && now - *d.last_strike < spell) return;
  if (d.last_strike && now - *d.last_strike > kStrikeMemory * spell) d.strikes = 0;
  d.last_strike = now;
  if (++d.strikes < kStrikes) return;
  d.strikes = 0;
  const Duration bench = std::min<Duration>(kLongestBench, kFirstBench * (uint64_t{1} << std::min(d.benched, 6u)));
  ++d.benched;
  d.benched_until = now + bench;
  ++stats_.workers_benched;
  STOKER_LOG(kWarning) << "worker " << worker_id << " held or claimed units of job " << job_name << " that it did "
                       << "not deliver while other workers delivered work leased after them, " << kStrikes
                       << " times: it is leased none of the job for "
                       << std::chrono::duration_cast<std::chrono::seconds>(bench).count() << " s";
  HandBackLocked(job, worker_id, /*unsent_only=*/true, &stats_.releases.overdue);
}

bool CoordinatorImpl::BenchedLocked(const JobRuntime& job, const std::string& worker_id, TimePoint now) const {
  auto it = job.delivery.find(worker_id);
  return it != job.delivery.end() && it->second.benched > 0 && now < it->second.benched_until;
}

}  // namespace stoker::coordinator
