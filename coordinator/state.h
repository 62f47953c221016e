// CoordinatorState: the coordinator's durable state, plain data changed only by Apply(update). The same updates
// are what the journal records (coordinator/journal.h), so replaying them rebuilds this state after a restart.
// Soft state that peers re-establish on their own (leases, liveness, parked requests, what a client holds above
// its watermark) lives in the Impl instead, not here.
//
// Thread safety: none; the Impl owns it under its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "stoker/job_spec.h"

namespace stoker::coordinator {

struct JobCreated {
  JobSpec spec;             // with the manifest fingerprint filled in
  uint64_t num_samples = 0;
};

// A client claimed a rank; its session starts at start_batch.
struct RankSessionStarted {
  std::string job;
  uint32_t rank = 0;
  std::string client_id;
  uint64_t start_batch = 0;
  uint32_t window = 0;
  std::string holder;  // the authenticated identity that took the rank (empty without CURVE)
  std::string session_check;  // SessionCheck of the client's secret (auth/data_tickets.h); empty: not bound
};

// The client's acknowledged position: batches below `received` are delivered to its process, batches below
// `consumed` were handed to the application and released.
struct RankProgress {
  std::string job;
  uint32_t rank = 0;
  uint64_t received = 0;
  uint64_t consumed = 0;
};

// Attempt numbers below `up_to` may have been handed out for this rank; after a restart leasing resumes above it
// so a fenced attempt is never reused.
struct AttemptsReserved {
  std::string job;
  uint32_t rank = 0;
  uint64_t up_to = 0;
};

// Workers that joined and left: after a restart, the coordinator keeps serving the same worker list to clients
// and accepts heartbeats from the workers it knew without making them register again.
struct WorkerJoined {
  std::string worker_id;
  std::string data_endpoint;
  uint32_t threads = 1;
  std::string data_public_key;  // its data port's CURVE key, listed to clients (empty without CURVE)
  std::string identity;         // the authenticated identity it registered as (empty without CURVE)
  bool data_sealed = false;     // its data port checks data tickets and seals batches
  std::string session_check;    // SessionCheck of its registration's secret; empty: bound to its key only
};
struct WorkerLeft {
  std::string worker_id;
};

// A job no client has held for the retention period is forgotten (a checkpoint token can still resume it: the
// first registration with its spec creates it again).
struct JobRemoved {
  std::string job;
};

// A checkpoint resumed the job on another shape: its spec becomes `spec` (new world and batch size, the origin its
// plan starts from) and its ranks start afresh, attempts at `attempts_floor` or above so every old lease is fenced.
struct JobReshaped {
  JobSpec spec;
  uint64_t attempts_floor = 0;
  uint32_t shape_changes = 0;  // the job's count, this change included
};

using Update = std::variant<JobCreated, RankSessionStarted, RankProgress, AttemptsReserved, WorkerJoined, WorkerLeft,
                            JobRemoved, JobReshaped>;

struct RankRecord {
  std::string client_id;     // last client to claim the rank
  std::string holder;        // the identity it authenticated as: only it may ack, continue or release the rank
  std::string session_check;  // ... and only with the session's secret, whose hash this is (empty: any)
  uint64_t session = 0;      // how many sessions the rank has had
  uint64_t start_batch = 0;
  uint32_t window = 0;
  uint64_t received = 0;
  uint64_t consumed = 0;
  uint64_t attempts_reserved = 0;
};

struct JobRecord {
  JobSpec spec;
  uint64_t num_samples = 0;
  std::vector<RankRecord> ranks;
  uint32_t shape_changes = 0;
  uint64_t attempts_floor = 0;  // attempts below it were leased for an earlier shape
};

class CoordinatorState {
 public:
  // Applying an update the state cannot take (unknown job, rank out of range) is a bug in the caller.
  void Apply(const Update& update);
  // Whether Apply could take `update`: FailedPrecondition saying why not (a job created twice, an update for a job no
  // update created, a rank out of range). Replaying a journal checks every update first: a record can pass its
  // checksum and still not fit (a bug that wrote it, or files mixed up), and that must refuse the start, not abort.
  Status Check(const Update& update) const;

  const JobRecord* FindJob(const std::string& name) const;
  const std::map<std::string, JobRecord>& jobs() const { return jobs_; }
  const std::map<std::string, WorkerJoined>& workers() const { return workers_; }

  // The updates that rebuild this state from nothing: what a compacted journal holds.
  std::vector<Update> Snapshot() const;

 private:
  RankRecord& Rank(const std::string& job, uint32_t rank);
  std::map<std::string, JobRecord> jobs_;
  std::map<std::string, WorkerJoined> workers_;
};

}  // namespace stoker::coordinator
