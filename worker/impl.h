// WorkerImpl: every decision a worker makes, with no sockets and no threads, on an injected Clock — which clients
// it serves (streams: one per (job, rank, client) with credit), what it asks the coordinator for (registration,
// heartbeats, leases within each stream's credit, jobs), which batches it makes (one BatchBuild per leased batch),
// where each finished batch goes and whether it may still go at all (a revoked, fenced or undeliverable unit's
// batches never leave), what it reports (UnitDone: sent, undeliverable, abandoned), and how it drains.
//
// Its adapter (worker/worker.cc) owns the sockets, the pipeline threads and the doorbell. It feeds the Impl what
// arrives (replies, credits, loaded jobs, finished batches, the passing of time) and drains what the Impl wants
// done from TakeOutbox(), as the coordinator's service drains its Impl's deferred replies. worker/impl_test.cc
// drives it on a FakeClock.
//
// A lease's local expiry runs from when the heartbeat that last renewed it left (or three quarters of its TTL after
// the grant arrived), so it always passes before the coordinator's own: a worker cut off from the coordinator stops
// sending a unit before the unit can be re-leased elsewhere (self-fencing).
//
// Thread safety: none; it belongs to the worker's I/O thread.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "stoker/clock.h"
#include "wire/control_codec.h"
#include "wire/data_messages.h"
#include "base/json_writer.h"
#include "wire/request_tracker.h"
#include "worker/batch_build.h"
#include "worker/options.h"

namespace stoker::worker {

// Where a finished batch goes: the client connection of its stream, in frames of at most max_frame_bytes (0: one).
struct BatchRoute {
  std::string peer;
  uint64_t max_frame_bytes = 0;
  std::string identity;  // the authenticated identity the batch is for (the lease's client): its keys only
};

// What happened to units, cumulative (the worker's stats and metrics).
struct UnitCounts {
  uint64_t done = 0;
  uint64_t revoked = 0;
  uint64_t fenced = 0;
  uint64_t abandoned = 0;
  uint64_t undeliverable = 0;
};

// Credits refused before the worker keeps anything for them, by reason (the worker's errors_total).
struct CreditRefusals {
  uint64_t malformed = 0;   // a job name not of [A-Za-z0-9._-]{1,64}, a client id over 256 bytes, a session
                            // check neither empty nor 32 bytes, a rank the job does not have
  uint64_t failed_job = 0;  // a job that failed here recently: answered from failed_jobs_, no coordinator request
  uint64_t busy = 0;        // kMaxJobFetches jobs already being fetched, or kMaxStreams streams held
};

class WorkerImpl {
 public:
  // What the Impl asks its adapter to do, in the order it asked.
  struct Outbox {
    std::vector<RequestTracker::Pending> requests;            // to the coordinator
    std::vector<std::pair<std::string, DataError>> errors;    // to a client connection (peer, error)
    std::vector<std::shared_ptr<BatchBuild>> builds;          // batches to make, in lease order
    std::vector<JobSpec> loads;                               // jobs to load off the I/O thread (JobLoaded)
    std::string ticket_key;  // the sealed data port's key for tickets and seal keys, when a registration brought one
  };

  // `counters` (the pipeline's) give the heartbeat its telemetry.
  WorkerImpl(const WorkerOptions& options, std::string id, uint32_t threads, const Clock& clock,
             const BuildCounters& counters);

  // ---- what arrives -------------------------------------------------------------------------------------------
  // `data_sealed`: the data port checks data tickets and seals batches (CURVE on); the registration reply brings
  // the ticket key, handed out in the Outbox.
  void Register(const std::string& advertised_endpoint, bool data_sealed = false);
  void HandleReply(const DecodedReply& reply);
  // `identity`: what the connection authenticated as (empty without CURVE). A stream belongs to its (job, rank,
  // client id, identity, session check): a credit naming another session's client id from another key, or from the
  // same key without that session's check, opens a stream of its own, which no lease is for, and never re-points the
  // other session's. What credits can make a worker hold is bounded:
  // job names are validated, a job that failed to load is refused from failed_jobs_ (at most kMaxFailedJobs, each
  // for kFailedJobRetry) without asking the coordinator again, at most kMaxJobFetches unknown jobs are fetched at
  // once, and at most kMaxStreams streams are held; refusals are counted (credit_refusals()). A credit for a rank
  // beyond a held job's plan makes the worker ask for the job again (it may have been resumed on more ranks), at
  // most once a kShapeRecheck per job; the stream waits for the answer, and is refused if the rank is still not
  // there.
  void HandleCredit(const std::string& peer, const std::string& identity, const Credit& credit);
  void JobLoaded(const std::string& name, StatusOr<std::shared_ptr<const JobContext>> job);
  // A batch's last sample is done: where to send it, or nullopt if it must not leave (its unit was revoked, fenced,
  // handed back, or its client is gone). After a route, the adapter says whether the send succeeded.
  std::optional<BatchRoute> RouteBatch(const BatchBuild& build);
  void BatchSent(BatchBuild& build, bool delivered);
  // Heartbeats, requests past their deadline, fencing, credits not refreshed, idle jobs, and leasing.
  void Tick();

  // ---- draining -----------------------------------------------------------------------------------------------
  void StartDrain();
  // Draining and nothing left to finish, or the grace period is over.
  bool DrainDue() const;
  TimePoint drain_deadline() const { return drain_deadline_; }
  // Hands back every unit still held (UnitDone abandoned).
  void AbandonAll();
  // Sends the Deregister request; returns its id (IsPending tells when it is answered or given up on).
  uint64_t Deregister();
  bool IsPending(uint64_t request_id) const { return tracker_.IsPending(request_id); }
  bool deregistered() const { return deregistered_; }

  Outbox TakeOutbox();

  // ---- what it looks like -------------------------------------------------------------------------------------
  const std::string& id() const { return id_; }
  bool registered() const { return registered_; }
  bool draining() const { return draining_; }
  // Serving a client whose job is not finished: idle pipeline threads are then held back by credits or windows.
  bool serving() const;
  size_t units_held() const { return units_.size(); }
  size_t streams() const { return streams_.size(); }
  const UnitCounts& unit_counts() const { return unit_counts_; }
  const CreditRefusals& credit_refusals() const { return credit_refusals_; }
  size_t failed_jobs() const { return failed_jobs_.size(); }

  static constexpr size_t kMaxFailedJobs = 256;
  static constexpr size_t kMaxJobFetches = 8;
  static constexpr size_t kMaxStreams = 16384;
  static constexpr Duration kFailedJobRetry = Millis(5000);
  // Jobs, failed jobs, streams and units, as members of the object `j` is writing (the adapter's /state).
  void WriteState(JsonWriter& j) const;

 private:
  // A client's stream of one rank: (job, rank, client id, authenticated identity, session check). Streams of a rank
  // whose holder changed (a restarted training process) coexist until the old one's credit expires; each lease names
  // the client, identity and session check it is for, so credits from another process of the same key (which can
  // read the client id in /state but not the check) make a stream of their own that no lease is for. The check is
  // never written to /state or a log.
  using StreamKey = std::tuple<std::string, uint32_t, std::string, std::string, std::string>;
  struct Stream {
    std::string peer;
    uint32_t credits = 0;
    uint64_t max_frame_bytes = 0;  // 0: each payload in one frame
    TimePoint refreshed;
    uint64_t lease_request = 0;    // id of the lease request in flight for this stream, 0 if none
    bool job_done = false;
    TimePoint hold_until;          // storage failed one of its units: no new leases before this
  };
  struct UnitWork {
    LeaseGrant lease;   // names the client the batches are for
    TimePoint expires;  // self-fencing: past this without a renewal, nothing more of the unit is sent
    uint32_t to_send = 0;
    uint32_t sent = 0;
    int64_t busy_ns = 0;  // pipeline-thread time of the batches sent
    std::array<int64_t, 4> stage_ns{};  // of that, by stage (BatchBuild::StageNanos)
    std::vector<QuarantineReport> quarantined;
    std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  };
  struct FailedJob {
    Status status;
    TimePoint retry_at;
  };
  using UnitIt = std::map<UnitKey, UnitWork>::iterator;

  uint64_t Send(RequestBody body);
  void SendRegister();
  void SendHeartbeat();
  void RegisterReplied(const DecodedReply& reply);
  void HeartbeatReplied(const RequestTracker::Pending& request, const DecodedReply& reply);
  void LeaseReplied(const RequestTracker::Pending& request, const DecodedReply& reply);
  void JobReplied(const std::string& job, const DecodedReply& reply);
  void RequestExpired(RequestTracker::Pending& request);

  // Why a credit must be refused before anything is kept for it; OK to take it.
  Status CheckCredit(const StreamKey& key, const Credit& credit);
  void FetchJob(const std::string& name);
  void FailJob(const std::string& name, const Status& status);
  void ForgetIdleJobs(TimePoint now);

  void DropStream(const StreamKey& key);
  void DropStreamsBeyondPlan(const std::string& name);
  void DropSilentStreams(TimePoint now);
  StreamKey StreamOf(const UnitWork& work) const;
  uint32_t InHand(const StreamKey& key) const;

  void RequestLeases();
  void LeaseAnswered(uint64_t request_id, const LeaseResponse& response);
  // The stream lease request `request_id` was for asks for no lease before `hold` has passed.
  void HoldStream(uint64_t request_id, Duration hold);
  void StartUnit(const LeaseGrant& grant);
  void QueueBuilds(const std::shared_ptr<const JobContext>& job, const UnitKey& key, UnitWork& work);
  void Fence(UnitIt it);
  void Revoke(const UnitKey& key, uint64_t attempt);
  void ReportUnit(const UnitKey& key, const UnitWork& work, UnitOutcome outcome);
  void GiveBack(UnitIt it, UnitOutcome outcome);
  void HandBackForStorage(UnitIt it, const std::string& failure);

  const WorkerOptions options_;
  const std::string id_;
  // Drawn at start (auth/data_tickets.h NewSessionSecret) and carried by every request for this worker id: the
  // coordinator binds the id to it, so another process of the worker key cannot act for this one.
  const std::string session_;
  const uint32_t threads_;
  const Clock& clock_;
  const BuildCounters& counters_;
  RequestTracker tracker_;
  Outbox outbox_;
  std::string advertised_;
  bool data_sealed_ = false;

  bool registered_ = false;
  bool draining_ = false;
  bool deregistered_ = false;
  TimePoint drain_deadline_;
  Duration heartbeat_interval_ = Millis(250);
  TimePoint next_heartbeat_;
  // A registration refused for now (its id still registered elsewhere, the coordinator full): sent again then.
  std::optional<TimePoint> register_again_;
  bool register_refused_ = false;  // since the last registration that passed (the refusal is logged once)
  static constexpr Duration kJobIdleRelease = Millis(60000);
  static constexpr Duration kIdleCheckEvery = Millis(1000);
  TimePoint next_idle_check_;  // ForgetIdleJobs runs at most once a kIdleCheckEvery

  std::map<std::string, std::shared_ptr<const JobContext>> jobs_;
  std::map<std::string, TimePoint> job_last_active_;
  std::set<std::string> fetching_;  // GetJob in flight or the job loading
  // When a credit for a rank beyond a held job's plan last made the worker ask for the job again (CheckCredit).
  static constexpr Duration kShapeRecheck = Millis(1000);
  std::map<std::string, TimePoint> shape_checked_;
  std::map<std::string, FailedJob> failed_jobs_;
  std::map<StreamKey, Stream> streams_;
  std::map<uint64_t, StreamKey> lease_requests_;  // lease request id -> the stream it spends credit of
  std::map<UnitKey, UnitWork> units_;
  UnitCounts unit_counts_;
  CreditRefusals credit_refusals_;
  // Units handed back because storage could not serve a read (403, 404, a changed object, retries exhausted).
  static constexpr Duration kStorageHold = Millis(1000);
  static constexpr Duration kRefusedLeaseHold = Millis(5000);  // a lease refused (a reported worker, another group's)
  uint64_t storage_hand_backs_ = 0;
  std::string last_storage_failure_;
  TimePoint last_storage_log_;
};

}  // namespace stoker::worker
