// CoordinatorImpl: every decision the coordinator makes — which unit goes to which worker under which attempt,
// when a lease is revoked and re-leased, when a unit commits, who holds a rank — behind one mutex, driven by an
// injected Clock so tests can expire leases instantly. It knows nothing of ZeroMQ or Cap'n Proto: the service
// adapter (service.h) decodes requests into messages.h values, calls one method, and encodes the answer.
//
// Leasing rule (schema/control.capnp, "Flow control"): unit q of rank r is leased only when all of its batches
// lie below consumed(r) + window(r), so every batch a worker makes has a free slot at the client. Units handed
// back (worker lost, lease expired, undeliverable, not acknowledged in time) are re-leased before new ones, with a
// new attempt number; attempts only grow, so the client can fence stale copies.
//
// A lease request that finds nothing leasable is parked (up to its wait) and answered as soon as an ack, a
// release or a new client makes work leasable; parked answers are collected with TakeDeferredReplies(), each under
// the opaque RequestHandle the service gave the request (the Impl knows nothing of who sent it over which socket).
//
// Who gets the work (the DDP case: ranks step in lockstep, so any rank waiting stalls them all): a worker holds at
// most its queue (CoordinatorOptions::worker_queue_batches) of leased, unsent batches over all its streams, so a
// batch never waits behind another worker's queue while this one idles; when room opens in a rank's window the
// parked request of the least-loaded worker is served first; a freed place goes to the job first in fair order
// (FairShare), its ranks furthest-behind first, so every rank's next batch is the one being made.
//
// Durability: every change to CoordinatorState goes through ApplyLocked, which also appends it to the journal
// (if any). A rank's durable fields (its client, window, received and consumed positions) are read from the state;
// the Impl keeps beside them only soft state (leases, liveness, parked requests). After a restart, Restore() replays
// the journal; then for one reconcile window nothing new is leased while workers report the leases they still hold,
// which are adopted rather than redone; clients that held ranks resume their sessions with their next heartbeat.
//
// The methods live in impl.cc (restart, time), impl_workers.cc, impl_leases.cc (leasing, unit reports), impl_parked.cc,
// impl_overdue.cc (who delivers), impl_teams.cc, impl_clients.cc (jobs, ranks, acks), impl_reshape.cc and
// impl_state.cc. Thread safety: all public methods may be called from any thread.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "stoker/clock.h"
#include "dataset/checkpoint.h"
#include "dataset/plan.h"
#include "stoker/status.h"
#include "wire/control_messages.h"
#include "base/env.h"
#include "base/json_writer.h"
#include "base/sync.h"
#include "coordinator/capacity.h"
#include "coordinator/fair_share.h"
#include "coordinator/state.h"
#include "coordinator/stats.h"

namespace stoker::coordinator {

struct CoordinatorOptions {
  Duration heartbeat_interval = Millis(250);  // peers send heartbeats this often
  Duration lease_ttl = Millis(1500);          // a lease (and a worker) not renewed for this long is lost
  Duration client_timeout = Millis(10000);    // a client not heard for this long frees its rank
  Duration ack_timeout = Millis(5000);        // a unit sent but not acknowledged for this long is re-leased
  Duration max_lease_wait = Millis(2000);     // cap on how long a lease request may be parked
  uint64_t attempt_block = 1024;              // attempt numbers reserved (durably) at a time
  Duration reconcile_window = Millis(1500);   // after a restart: time for workers to report held leases
  Duration job_retention = Millis(3600000);   // a job no client has held for this long is forgotten
  std::string manifest_root;                  // overrides the manifests' recorded dataset root
  // Directories the manifests clients name must lie in, links and ".." resolved (--manifest-dirs). Empty: any
  // regular file the coordinator can read.
  std::vector<std::string> manifest_dirs;
  // Workers may advertise ipc:// data endpoints (sockets in this host's file system). Set when the coordinator's own
  // control endpoint is ipc:// (stoker's local mode): then every peer is on this host.
  bool ipc_data_endpoints = false;
  // What peers can make the coordinator hold, bounded by construction (a request past a cap is refused with
  // RESOURCE_EXHAUSTED and counted): at about 200 bytes per rank, the defaults keep the state under 60 MB.
  uint32_t max_jobs = 64;
  // Jobs one team (fair_share.h: the name of its client key) may hold at once, so that one team cannot take every
  // slot and lock the others out for --job-retention. 0: half of max_jobs (at least 1).
  uint32_t max_jobs_per_team = 0;
  uint32_t max_ranks_per_job = 4096;
  uint32_t max_registered_workers = 1024;
  // New worker ids one key may register a second, with 4 seconds' worth at once (a pool scaling up): more are
  // RESOURCE_EXHAUSTED, which a worker asks again after a second. 0: no limit.
  uint32_t worker_registrations_per_second = 32;
  uint32_t max_window = 4096;  // a client's prefetch window, in batches
  // Quarantine reports held over all jobs ((epoch, sample) pairs, each detail cut to 256 bytes):
  // about 300 bytes each, 80 MB at the default. Past it reports are counted, not kept.
  uint32_t max_quarantine_reports = 262144;
  // Batches one worker may hold leased and not yet sent, over all its streams. 0: enough for its threads to stay
  // busy and no more — max(2, 2 x threads / batch size, batches per unit) — so that work waits at the coordinator,
  // where any idle worker can take it, rather than queued behind a busy worker's other batches.
  uint32_t worker_queue_batches = 0;
  // The key sealed data ports' tickets and seal keys derive from (auth/data_tickets.h: from the coordinator's own
  // CURVE key); empty with CURVE off, when workers get no ticket key and clients no tickets.
  std::string data_ticket_master;
  // Each team's weight, priority, cap and guarantee in the pool's fair shares (fair_share.h; --team-weights,
  // --team-priorities, --team-max-workers, --team-min-workers): a team is the name of its client key. A team not
  // named has weight 1, priority 0, no cap and no guarantee.
  TeamPolicies teams;
};

// Names a request the service handed the Impl, for an answer that comes later. The service alone knows the
// transport address and request id behind it.
using RequestHandle = uint64_t;

struct DeferredLeaseReply {
  RequestHandle handle = 0;
  LeaseResponse response;
};

class Journal;

class CoordinatorImpl {
 public:
  // `journal` (may be null: nothing is durable) receives every state update; the service syncs it before it
  // answers the requests that made them. `env` reads the jobs' manifests.
  CoordinatorImpl(const CoordinatorOptions& options, const Clock& clock, Env& env, Journal* journal = nullptr);

  // Replay: called for each journal record before serving, then FinishRestore() once.
  void Restore(const Update& update);
  void FinishRestore();
  // The updates that rebuild the current durable state (journal compaction).
  std::vector<Update> Snapshot() const;
  bool reconciling() const;

  // `caller`: who the transport authenticated (empty with CURVE off). A worker id is bound to the identity that
  // registered it and a rank to the identity that took it: requests naming them from another identity are refused
  // with PERMISSION_DENIED, whatever ids they carry. (Which role may call which method the service checks.)
  StatusOr<RegisterWorkerResponse> RegisterWorker(const RegisterWorkerRequest& request, const Caller& caller = {});
  StatusOr<WorkerHeartbeatResponse> WorkerHeartbeat(const WorkerHeartbeatRequest& request, const Caller& caller = {});
  // A response now, or nullopt when the request was parked (its answer comes from TakeDeferredReplies()).
  StatusOr<std::optional<LeaseResponse>> RequestLease(RequestHandle handle, const LeaseRequest& request,
                                                      const Caller& caller = {});
  Status UnitDone(const UnitDoneRequest& request, const Caller& caller = {});
  StatusOr<RegisterClientResponse> RegisterClient(const RegisterClientRequest& request, const Caller& caller = {});
  StatusOr<ClientHeartbeatResponse> ClientHeartbeat(const ClientHeartbeatRequest& request, const Caller& caller = {});
  // A client key (a node-local worker's) gets only the spec of a job with a rank held under that key.
  StatusOr<JobSpec> GetJob(const std::string& job, const Caller& caller = {});
  Status Deregister(const DeregisterRequest& request, const Caller& caller = {});

  // Expires workers, leases, unacknowledged units, silent clients and parked requests. Call every ~50 ms.
  void Tick();
  // After `silence` in which the coordinator could hear nobody (its journal could not be written, so it answered
  // every request UNAVAILABLE and stopped its clock): every liveness, lease and parked deadline moves later by
  // that much, so nobody is expired for a silence that was the coordinator's own.
  void ExcuseSilence(Duration silence);
  std::vector<DeferredLeaseReply> TakeDeferredReplies();

  CoordinatorStats Stats() const;
  // Everything a person debugging wants to see, as JSON (the admin port's /state): jobs and their ranks,
  // workers, leases in flight, the advice.
  std::string StateJson() const;
  // The quarantine reports kept for (job, epoch) by sample id, as kept (reason and detail cut to length).
  std::map<uint64_t, QuarantineReport> QuarantineReports(const std::string& job, uint32_t epoch) const;
  // Their sample ids, sorted.
  std::vector<uint64_t> QuarantinedSamples(const std::string& job, uint32_t epoch) const;
  static constexpr size_t kMaxQuarantineDetailBytes = 256;

 private:
  struct ActiveLease {
    uint64_t attempt = 0;
    std::string worker_id;
    TimePoint expiry;
    bool sent = false;
    TimePoint sent_at;
    uint32_t batches = 0;  // batches the worker makes for it (its unit less what the client already had)
    std::string team;      // its job's (JobTeamLocked): whose cap (TeamPolicy::max_workers) its unsent batches count to
    bool local = false;    // leased to a node-local worker: the client's own cores, outside the team's share and cap
    TimePoint leased_at;   // when it was granted (or adopted after a restart)
    // Whose commit says nothing of a worker's pace (impl_overdue.cc): adopted after a restart (granted before it),
    // or a re-lease of only the batches the client lacked.
    bool no_pace = false;
  };
  struct ParkedRequest {
    RequestHandle handle = 0;
    std::string worker_id;
    uint32_t max_batches = 0;
    TimePoint deadline;
  };
  // What the Impl keeps of a rank beside its durable RankRecord (client, window, received, consumed).
  struct RankRuntime {
    bool session_live = false;
    TimePoint last_heard;
    std::set<uint64_t> received_above;  // the client's last ack above its watermark
    uint64_t next_unit = 0;                  // units below it were leased in this session (or precede its start)
    std::map<uint64_t, ActiveLease> active;  // unit -> its current lease (leased or sent, not yet committed)
    std::set<uint64_t> pending;              // units handed back, re-leased before next_unit
    uint64_t next_attempt = 1;
    std::vector<ParkedRequest> parked;  // a vector, not a deque: an empty one costs nothing (4,096 ranks x 64 jobs)
    std::string local_group;  // the session's node-local workers' group (from its registration and heartbeats)
    std::string stages_of;    // the client whose cumulative stage figures (ClientHeartbeatRequest) were last heard
    std::array<double, ClientHeartbeatRequest::kStages.size()> client_stages{};  // of its figures, counted so far
    // Replayed from the journal, its client not heard since: for a client timeout only its secret may claim it.
    bool restored = false;
    // The two latest-leased committed units by distinct workers: (worker, when leased) (impl_overdue.cc).
    std::array<std::pair<std::string, TimePoint>, 2> recent_commits{};
  };
  struct JobRuntime {
    Plan plan;
    const JobRecord* record = nullptr;  // its durable part, in state_ (a map node: stable until the job is removed)
    std::vector<RankRuntime> ranks;
    std::map<uint32_t, std::map<uint64_t, QuarantineReport>> quarantined;  // epoch -> sample -> report
    uint64_t spec_fingerprint = 0;
    std::optional<TimePoint> idle_since;  // since when no client has held any of its ranks
    size_t quarantine_reports = 0;  // over all epochs
    uint64_t samples_leased = 0;
    std::array<double, kJobStages.size()> stage_seconds{};  // JobStats::stage_seconds
    std::optional<std::string> team;  // of the first rank held (JobTeamLocked); reset when a session starts
    // The team whose client created it, whose job slots it takes (--max-jobs-per-team). Unset for a job replayed
    // from the journal: then the team of its first held rank.
    std::optional<std::string> created_by;
    // Leases whose unit committed (every batch acked) before their worker's UnitDone arrived: (rank, unit) ->
    // (worker, attempt), so the holder's quarantine report still counts. At most kMaxUnreportedCommits.
    std::map<std::pair<uint32_t, uint64_t>, std::pair<std::string, uint64_t>> unreported_commits;
    // Workers a client of this job reported for batches that were not the plan's: registered ones only, dropped
    // when they leave, so never more than the registry holds. Not journaled: a client reports in every heartbeat.
    std::set<std::string> reported_workers;
    // Who delivers (impl_overdue.cc): how long a unit takes from its lease to its commit (moving averages over the
    // job's commits and, per registered worker, dropped when it leaves, over its own), the worker's strikes for
    // leases it kept or claimed while others delivered, and its bench.
    Duration commit_time{};
    uint64_t commits = 0;
    struct Delivery {
      Duration commit_time{};
      uint64_t commits = 0;
      uint32_t strikes = 0;          // since its last commit, each within kStrikeMemory of the one before
      std::optional<TimePoint> last_strike;
      uint32_t benched = 0;          // times benched: each bench lasts twice the last
      TimePoint benched_until;
    };
    std::map<std::string, Delivery> delivery;
  };
  struct WorkerRuntime {
    std::string data_endpoint;
    uint32_t threads = 1;
    std::string version;
    TimePoint last_heard;
    bool draining = false;
    std::string data_public_key;
    std::string identity;  // the authenticated identity it registered as
    // SessionCheck of its registration's secret: only requests carrying the secret act for it (empty: bound to
    // `identity` only). Never in /state or a log.
    std::string session_check;
    bool session_refused = false;  // a request from another session was refused (logged once)
    bool data_sealed = false;  // its data port checks tickets and seals (listed with each client's ticket, seal key)
    uint64_t joined = 0;      // the order it joined in: clients are given the list oldest first ...
    bool delivered = false;   // ... after the workers a client has taken a unit from (WorkerListLocked)
    bool move_refused = false;  // a registration of its id at another data port was refused (logged once)
    // Node-local (RegisterWorker.localGroup): listed to, and leasing for, the sessions of this group only. Never
    // in /state, a log or the journal.
    std::string local_group;
    uint64_t leases_granted = 0;  // since it registered
    std::string local_job;        // a node-local worker: the job it last leased for (its supply's, CapacityEstimator)
  };
  // Whether worker `w` may lease rank `rank` of `job`: any pool worker; a node-local one only for a live session of
  // its group, and when it authenticated with a client key, only for a rank held under that key.
  Status MayServeLocked(const WorkerRuntime& w, const std::string& worker_id, const JobRuntime& job,
                        uint32_t rank) const STOKER_REQUIRES(mu_);
  bool IsLocalLocked(const std::string& worker_id) const STOKER_REQUIRES(mu_);
  // Spends one of `identity`'s new-worker registrations; RESOURCE_EXHAUSTED when none is left.
  Status SpendRegistrationLocked(const std::string& identity) STOKER_REQUIRES(mu_);
  // A client of `job` reported `worker_id`: the job leases it nothing more, and its leases of the job go back.
  void ReportWorkerLocked(const std::string& job_name, JobRuntime& job, const std::string& worker_id,
                          const std::string& reporter) STOKER_REQUIRES(mu_);
  // Hands `worker_id`'s leases of `job` back (only those not sent yet, with `unsent_only`), counted in `counter`,
  // and answers its parked requests there empty.
  void HandBackLocked(JobRuntime& job, const std::string& worker_id, bool unsent_only, uint64_t* counter)
      STOKER_REQUIRES(mu_);
  // Ranks with a live session held under `identity`.
  size_t LiveRanksHeldLocked(const std::string& identity) const STOKER_REQUIRES(mu_);

  // The durable view of a rank: its last client, window and positions (received and consumed, clamped to the
  // plan so a damaged record can never lease past the job's end).
  struct RankView {
    const std::string& client_id;
    const std::string& holder;  // the identity that took the rank
    const std::string& session_check;  // SessionCheck of its session's secret (empty: not bound)
    uint32_t window;
    uint64_t received;
    uint64_t consumed;
  };
  RankView ViewLocked(const JobRuntime& job, uint32_t rank) const STOKER_REQUIRES(mu_);

  struct ManifestFacts {
    uint64_t fingerprint = 0;
    uint64_t num_samples = 0;
  };
  StatusOr<ManifestFacts> ReadManifest(const JobSpec& requested) const STOKER_EXCLUDES(mu_);
  bool UnderManifestDirs(const std::string& real_path) const;
  StatusOr<JobRuntime*> CreateJobLocked(const JobSpec& requested, const ManifestFacts& manifest,
                                        const std::string& team)
      STOKER_REQUIRES(mu_);
  StatusOr<RegisterClientResponse> RegisterOnJobLocked(const RegisterClientRequest& request, JobRuntime& job,
                                                       const Caller& caller) STOKER_REQUIRES(mu_);
  JobRuntime& AddJobRuntimeLocked(const JobSpec& spec, uint64_t num_samples) STOKER_REQUIRES(mu_);
  void EndReconcileLocked() STOKER_REQUIRES(mu_);
  JobRuntime* FindJobLocked(const std::string& name) STOKER_REQUIRES(mu_);
  std::vector<LeaseGrant> TryLeaseLocked(const std::string& job_name, JobRuntime& job, uint32_t rank,
                                         const std::string& worker_id, uint32_t max_batches) STOKER_REQUIRES(mu_);
  LeaseGrant GrantLocked(const std::string& job_name, JobRuntime& job, uint32_t rank, uint64_t unit,
                         std::vector<uint64_t> skip, const std::string& worker_id) STOKER_REQUIRES(mu_);
  std::vector<uint64_t> ReceivedInUnitLocked(const JobRuntime& job, uint32_t rank, uint64_t unit) const
      STOKER_REQUIRES(mu_);
  bool CommitIfCompleteLocked(JobRuntime& job, uint32_t rank, uint64_t unit) STOKER_REQUIRES(mu_);
  // Whether `request` comes from the worker that holds (or held, until its commit) the unit's current lease.
  bool FromLeaseHolderLocked(JobRuntime& job, const UnitDoneRequest& request) STOKER_REQUIRES(mu_);
  void KeepQuarantineLocked(JobRuntime& job, const UnitDoneRequest& request) STOKER_REQUIRES(mu_);
  void CountCostLocked(JobRuntime& job, const UnitDoneRequest& request) STOKER_REQUIRES(mu_);
  void EraseJobRuntimeLocked(const std::string& name) STOKER_REQUIRES(mu_);
  void ReleaseLocked(RankRuntime& r, uint64_t unit, uint64_t* counter) STOKER_REQUIRES(mu_);
  // Every change to a rank's active leases goes through these three, which keep unsent_by_worker_ true.
  void HoldLocked(RankRuntime& r, uint64_t unit, ActiveLease lease) STOKER_REQUIRES(mu_);
  void MarkSentLocked(ActiveLease& lease, TimePoint now) STOKER_REQUIRES(mu_);
  void DropLocked(RankRuntime& r, uint64_t unit) STOKER_REQUIRES(mu_);
  // Leased, unsent batches `worker_id` holds, and how many it may hold for `job`'s batch size.
  uint32_t UnsentLocked(const std::string& worker_id) const STOKER_REQUIRES(mu_);
  uint32_t QueueLimitLocked(const std::string& worker_id, const JobRuntime& job) const STOKER_REQUIRES(mu_);
  // The same for a job of that shape; at a batch of one sample and the largest unit, room for none beyond it.
  uint32_t QueueLimitLocked(const std::string& worker_id, uint32_t batch_size, uint32_t batches_per_unit) const
      STOKER_REQUIRES(mu_);
  // Serves the rank's parked requests (only those from `only_worker` when given), least-loaded worker first.
  void ServeParkedLocked(const std::string& job_name, JobRuntime& job, uint32_t rank,
                         const std::string* only_worker = nullptr) STOKER_REQUIRES(mu_);
  // A place freed on `worker_id` (a unit it reported): only requests parked from it can take it, since every other
  // worker's room was offered as it opened. Their jobs in fair order (fair_share.h), each job's ranks furthest behind
  // first. Costs what that worker has parked, not what the whole pool has.
  void ServeFreedPlaceLocked(const std::string& worker_id) STOKER_REQUIRES(mu_);
  void PruneParkedIndexLocked() STOKER_REQUIRES(mu_);
  bool ParkedFromLocked(const std::string& job_name, uint32_t rank, const std::string& worker_id)
      STOKER_REQUIRES(mu_);
  // Whether the rank's window has room for its next unit (something could be leased for it now).
  bool HasRoomLocked(const JobRuntime& job, uint32_t rank) const STOKER_REQUIRES(mu_);
  // Serves every job's parked requests in fair order (ServeInFairOrderLocked): the timer's sweep, a worker gone,
  // reconciling done. Only the ranks a worker with room is parked on are looked at.
  void ServeAllJobsLocked() STOKER_REQUIRES(mu_);
  // Serves the parked requests of `waiting` (job -> its ranks; only those from `only_worker` when given): the job
  // furthest below its fair share first (shares_), within a job the rank furthest behind in plan order first.
  void ServeInFairOrderLocked(std::map<std::string, std::vector<uint32_t>>& waiting, const std::string* only_worker)
      STOKER_REQUIRES(mu_);
  // A job's team: that of the key its lowest-numbered held rank was taken with (durable: it survives a restart).
  // One team per job, whatever keys its other ranks use, for its order, its charges and its cap. Cached in the job.
  const std::string& JobTeamLocked(JobRuntime& job) STOKER_REQUIRES(mu_);
  static std::string TeamOfRecord(const JobRuntime& job);
  // A peer's local group (RegisterWorker, RegisterClient, ClientHeartbeat): empty, or of the form a group file holds.
  static Status CheckLocalGroup(const std::string& group);
  // Whether an authenticated identity is a client key's (which may run node-local workers for its own ranks only).
  static bool IsClientKey(const std::string& identity);
  // A node-local worker's registration: an ipc:// socket, unsealed (its trust is the socket's permissions), a
  // well-formed group; a client key registers no other kind.
  static Status CheckLocalWorker(const RegisterWorkerRequest& request, const Caller& caller);
  // Batches `team` may still be leased for `job` under its cap (TeamPolicy::max_workers), UINT32_MAX without one.
  // Once the pool's rate per worker is known, the cap is a rate of the workers' time: pipeline-thread seconds
  // accrue to the team at max_workers x a worker's threads a second (at most a second's worth banked) and each
  // grant spends what its samples cost (ThreadSecondsLocked); a team in debt waits. Before, it is a count:
  // max_workers units of the job leased and unsent (a worker makes one batch at a time, so at most N workers busy).
  uint32_t TeamRoomLocked(const std::string& team, const JobRuntime& job) STOKER_REQUIRES(mu_);
  // Whether `team` has had less than its guarantee (TeamPolicy::min_workers) lately: measured like the cap, with
  // at most a second's worth owed too; below while some is left (before the rate is known, fewer units unsent).
  bool BelowMinimumLocked(const std::string& team, const JobRuntime& job) STOKER_REQUIRES(mu_);
  // A worker's worth a second, for caps and guarantees (per_worker_rate_, worker_threads_): on the timer.
  void RefreshWorkersWorthLocked(TimePoint now) STOKER_REQUIRES(mu_);
  size_t PoolWorkersLocked(double* mean_threads) const STOKER_REQUIRES(mu_);  // not draining; threads: 1 if none
  // What `samples` of `job` cost the pool's pipeline threads: at its bounded reported cost, else the pool's mean.
  double ThreadSecondsLocked(const std::string& job, uint64_t samples) const STOKER_REQUIRES(mu_);
  uint64_t UnsentByTeamLocked(const std::string& team) const STOKER_REQUIRES(mu_);
  // Answers the rank's parked requests empty: all of them, or only `worker_id`'s (gone, or refused the job).
  void AnswerParkedEmptyLocked(RankRuntime& r, bool job_done) STOKER_REQUIRES(mu_);
  void AnswerParkedFromLocked(RankRuntime& r, const std::string& worker_id) STOKER_REQUIRES(mu_);
  void ExpireParkedLocked(RankRuntime& r, TimePoint now) STOKER_REQUIRES(mu_);
  // Every registered pool worker, with `client_identity`'s ticket for each sealed data port, and the node-local
  // workers of `local_group` (none when it is empty).
  std::vector<WorkerInfo> WorkerListLocked(const std::string& client_identity, const std::string& local_group) const
      STOKER_REQUIRES(mu_);
  void RemoveWorkerLocked(const std::string& worker_id, uint64_t* counter) STOKER_REQUIRES(mu_);
  bool AdoptLocked(const LeaseRef& ref, const std::string& worker_id, TimePoint now) STOKER_REQUIRES(mu_);
  Status CheckRegistrationLocked(const RegisterClientRequest& request, const JobRuntime& job,
                                 bool shape_may_change) const STOKER_REQUIRES(mu_);
  Status CheckClaimLocked(const RegisterClientRequest& request, const JobRuntime& job, const Caller& caller) const
      STOKER_REQUIRES(mu_);
  StatusOr<RegisterClientResponse> DescribeLocked(const RegisterClientRequest& request) STOKER_REQUIRES(mu_);
  void StartSessionLocked(const RegisterClientRequest& request, JobRuntime& job, const Caller& caller,
                          std::optional<uint64_t> resume_at) STOKER_REQUIRES(mu_);
  // Resuming from a checkpoint (impl_reshape.cc): the request's token, decoded; the global batch the rank starts
  // at, re-planning the job for the request's shape when needed (`job` then points at its new runtime); the
  // check that every rank of a re-planned job resumes from the same point; the re-plan.
  static StatusOr<CheckpointToken> ResumeTokenOf(const RegisterClientRequest& request);
  StatusOr<uint64_t> ResumeStartLocked(const RegisterClientRequest& request, const CheckpointToken& token,
                                       JobRuntime*& job, const Caller& caller) STOKER_REQUIRES(mu_);
  Status CheckLiveLocked(const JobRuntime& job, const CheckpointToken& token) const STOKER_REQUIRES(mu_);
  bool EveryRankJoinedLocked(const JobRuntime& job) const STOKER_REQUIRES(mu_);
  Status CheckNotBehindLocked(const JobRuntime& job, uint32_t rank, uint64_t at) const STOKER_REQUIRES(mu_);
  Status NotJoinedError(const JobRuntime& job, const CheckpointToken& token) const STOKER_REQUIRES(mu_);
  // A session holds the rank: live, or replayed after a restart and not yet silent for the client timeout.
  bool HeldLocked(const RankRuntime& r) const STOKER_REQUIRES(mu_);
  Status ReshapeLocked(JobRuntime*& job, const JobSpec& shape, const CheckpointToken& token,
                       const Caller* live_caller) STOKER_REQUIRES(mu_);
  // The registered worker `worker_id` if `caller`, carrying `session`, may act for it: FAILED_PRECONDITION if
  // unknown (register again), PERMISSION_DENIED if it registered under another identity or another session.
  StatusOr<WorkerRuntime*> CallingWorkerLocked(const std::string& worker_id, const std::string& session,
                                               const Caller& caller) STOKER_REQUIRES(mu_);
  Status CheckNewWorkerLocked(const RegisterWorkerRequest& request, const Caller& caller) const STOKER_REQUIRES(mu_);
  void ExpireWorkersLocked(TimePoint now) STOKER_REQUIRES(mu_);
  void ForgetIdleJobsLocked(TimePoint now) STOKER_REQUIRES(mu_);
  void ExpireLeasesAndClientsLocked(TimePoint now) STOKER_REQUIRES(mu_);
  // Who delivers (impl_overdue.cc). A commit of `lease`'s unit of rank `r`, now; whether an unsent `lease` is
  // overdue (older than OverdueAfterLocked while another worker delivered a unit of the rank leased after it, or of
  // another rank while the rank's client waits for this unit alone);
  // whether one has; how old a lease of `worker_id` may grow; a lease of `worker_id` gone back unsent or
  // unacknowledged while another delivered: a strike, and at kStrikes a bench (its unsent leases of the job go
  // back and it gets none of the job for a while); whether it is benched.
  void NoteCommitLocked(JobRuntime& job, RankRuntime& r, const ActiveLease& lease, TimePoint now) STOKER_REQUIRES(mu_);
  bool OverdueLocked(const JobRuntime& job, uint32_t rank, uint64_t unit, const ActiveLease& lease,
                     TimePoint now) const STOKER_REQUIRES(mu_);
  bool OthersDeliveredSinceLocked(const RankRuntime& r, const std::string& worker_id, TimePoint since) const
      STOKER_REQUIRES(mu_);
  Duration OverdueAfterLocked(const JobRuntime& job, const std::string& worker_id) const STOKER_REQUIRES(mu_);
  void StrikeLocked(const std::string& job_name, JobRuntime& job, const std::string& worker_id, TimePoint now)
      STOKER_REQUIRES(mu_);
  bool BenchedLocked(const JobRuntime& job, const std::string& worker_id, TimePoint now) const STOKER_REQUIRES(mu_);
  void WriteWorkersLocked(JsonWriter& j, TimePoint now) const STOKER_REQUIRES(mu_);
  void WriteJobsLocked(JsonWriter& j, const CoordinatorStats& stats) const STOKER_REQUIRES(mu_);
  void ApplyLocked(const Update& update) STOKER_REQUIRES(mu_);

  const CoordinatorOptions options_;
  const Clock& clock_;
  Env& env_;
  Journal* const journal_;
  // Manifests refused (ReadManifest runs without mu_): a client can ask for bad paths as fast as it can send, so
  // only the first few refusals, then each power of two, reach the log.
  mutable std::atomic<uint64_t> manifests_refused_{0};
  mutable Mutex mu_;
  CoordinatorState state_ STOKER_GUARDED_BY(mu_);
  std::map<std::string, JobRuntime> jobs_ STOKER_GUARDED_BY(mu_);
  std::map<std::string, WorkerRuntime> workers_ STOKER_GUARDED_BY(mu_);
  // Leased, unsent batches per worker id, over every job and rank (kept apart from workers_: a worker that left
  // or registered again may still be named by leases until they end). No entry: none.
  std::unordered_map<std::string, uint32_t> unsent_by_worker_ STOKER_GUARDED_BY(mu_);
  std::unordered_map<std::string, uint32_t> unsent_by_team_ STOKER_GUARDED_BY(mu_);  // the same, per team
  // Per worker, the (job, rank)s it has parked a lease request for: kept as requests park, dropped as its freed
  // places find them answered (ServeFreedPlaceLocked), by a sweep every second (PruneParkedIndexLocked) and when it
  // leaves. So at most the requests parked now (one per worker stream) and those of the last second.
  std::unordered_map<std::string, std::set<std::pair<std::string, uint32_t>>> parked_at_ STOKER_GUARDED_BY(mu_);
  // What accrues at a rate and is spent (a token bucket): capped teams' samples, guaranteed teams' samples owed, a
  // key's new worker registrations.
  struct Allowance {
    double amount = 0;
    TimePoint at;
    // Adds what `rate` (a second) has accrued since `at`, keeping at most `seconds` worth; what is left.
    double Accrue(double rate, TimePoint now, double seconds = 1) {
      amount = std::min(rate * seconds, amount + rate * ToSeconds(now - at));
      at = now;
      return amount;
    }
  };
  // Capped teams' pipeline-thread seconds to spend (TeamRoomLocked): at most one per team --team-max-workers names.
  std::map<std::string, Allowance> team_allowance_ STOKER_GUARDED_BY(mu_);
  // Guaranteed teams' pipeline-thread seconds owed (BelowMinimumLocked): at most one per --team-min-workers team.
  std::map<std::string, Allowance> team_guarantee_ STOKER_GUARDED_BY(mu_);
  const bool rate_needed_;  // some team has a cap or a guarantee, which need per_worker_rate_
  double per_worker_rate_ STOKER_GUARDED_BY(mu_) = -1;  // samples/s one worker makes busy (capacity_), < 0 unknown
  double worker_threads_ STOKER_GUARDED_BY(mu_) = 1;    // pipeline threads of the mean pool worker: its worth a second
  TimePoint next_rate_refresh_ STOKER_GUARDED_BY(mu_);
  uint64_t membership_version_ STOKER_GUARDED_BY(mu_) = 1;
  uint64_t workers_joined_ STOKER_GUARDED_BY(mu_) = 0;  // WorkerRuntime::joined of the latest to join
  // New worker ids each key may still register (CoordinatorOptions::worker_registrations_per_second), by
  // authenticated identity: as many entries as the trust file has keys.
  struct RegistrationBudget {
    Allowance left;        // starts with 4 seconds' worth
    bool refused = false;  // the latest was refused (logged once until one passes)
  };
  std::unordered_map<std::string, RegistrationBudget> registration_budget_ STOKER_GUARDED_BY(mu_);
  bool reconciling_ STOKER_GUARDED_BY(mu_) = false;
  TimePoint reconcile_until_ STOKER_GUARDED_BY(mu_);
  std::vector<DeferredLeaseReply> deferred_ STOKER_GUARDED_BY(mu_);
  CoordinatorStats stats_ STOKER_GUARDED_BY(mu_);  // counters only
  size_t quarantine_reports_ STOKER_GUARDED_BY(mu_) = 0;  // kept, over all jobs
  CapacityEstimator capacity_ STOKER_GUARDED_BY(mu_);
  FairShare shares_ STOKER_GUARDED_BY(mu_);
  TimePoint next_capacity_prune_ STOKER_GUARDED_BY(mu_);
};

}  // namespace stoker::coordinator
