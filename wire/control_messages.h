// The control protocol's requests and responses as plain C++ values. control_codec.h turns them into and out of
// Cap'n Proto frames (schema/control.capnp). The coordinator decodes each request fully before its Impl sees it,
// so malformed input can never leave it half-updated; workers and clients use the same values. Field meanings are
// documented once, in schema/control.capnp.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "stoker/job_spec.h"

namespace stoker {

struct LeaseRef {
  std::string job;
  uint32_t rank = 0;
  uint64_t unit = 0;
  uint64_t attempt = 0;
  bool operator==(const LeaseRef&) const = default;
};

struct LeaseGrant {
  std::string job;
  uint32_t rank = 0;
  uint64_t unit = 0;
  uint32_t epoch = 0;
  uint64_t first_batch = 0;
  uint32_t batch_count = 0;
  uint64_t attempt = 0;
  std::vector<uint64_t> skip;
  uint32_t ttl_ms = 0;
  std::string client_id;          // the session the batches are for: send them to this client only
  uint64_t spec_fingerprint = 0;  // the job's SpecFingerprint: a worker holding another spec under the name reloads
  std::string client_identity;    // the authenticated identity holding the rank: its connections only
  std::string session_check;      // the rank's SessionCheck: only credits carrying it get the batches (empty: any)
};

struct WorkerInfo {
  std::string worker_id;
  std::string data_endpoint;
  std::string data_public_key;  // z85; empty without CURVE
  std::string data_ticket;      // this client's ticket for its data port (auth/data_tickets.h); empty without CURVE
  std::string data_seal_key;    // this client's seal key for it (32 bytes, auth/seal.h); empty without CURVE
  bool operator==(const WorkerInfo&) const = default;
};

struct QuarantineReport {
  uint64_t sample_id = 0;
  std::string reason;
  std::string detail;
};

enum class UnitOutcome { kSent, kUndeliverable, kAbandoned };

struct RegisterWorkerRequest {
  std::string worker_id;
  std::string data_endpoint;
  uint32_t threads = 1;
  std::string version;
  std::string data_public_key;  // z85; empty without CURVE
  bool data_sealed = false;     // the data port checks data tickets and seals batches (auth/seal.h)
  std::string local_group;      // non-empty: node-local to the clients of this group (schema/control.capnp)
  std::string session;          // the worker process's secret (32 random bytes; empty: an older worker)
};
struct RegisterWorkerResponse {
  uint32_t heartbeat_interval_ms = 0;
  uint32_t lease_ttl_ms = 0;
  std::string data_ticket_key;  // 32 bytes for a sealed data port (CURVE on); empty otherwise
};

struct WorkerHeartbeatRequest {
  std::string worker_id;
  std::vector<LeaseRef> leases;
  bool draining = false;
  double busy_seconds = 0;   // telemetry, cumulative
  uint64_t samples_made = 0;
  std::string session;  // RegisterWorkerRequest::session
};
struct WorkerHeartbeatResponse {
  std::vector<LeaseRef> revoked;
};

struct LeaseRequest {
  std::string worker_id;
  std::string job;
  uint32_t rank = 0;
  uint32_t max_batches = 0;
  uint32_t wait_ms = 0;
  std::string session;  // RegisterWorkerRequest::session
};
struct LeaseResponse {
  std::vector<LeaseGrant> leases;
  bool job_done = false;
};

struct UnitDoneRequest {
  std::string worker_id;
  std::string job;
  uint32_t rank = 0;
  uint64_t unit = 0;
  uint64_t attempt = 0;
  UnitOutcome outcome = UnitOutcome::kSent;
  uint32_t batches_sent = 0;
  std::vector<QuarantineReport> quarantined;
  double busy_seconds = 0;  // pipeline-thread seconds the batches sent took (a NaN or negative one reads as 0)
  // Of those, by stage (the same reading of bad values).
  double read_seconds = 0, decode_seconds = 0, augment_seconds = 0, seal_seconds = 0;
  std::string session;  // RegisterWorkerRequest::session

  // The stages by name (the metrics' `stage` label) and their seconds, in that order.
  static constexpr std::array<const char*, 4> kStages = {"read", "decode", "augment", "seal"};
  std::array<double, 4> StageSeconds() const { return {read_seconds, decode_seconds, augment_seconds, seal_seconds}; }
  void SetStageSeconds(const std::array<double, 4>& s) {
    read_seconds = s[0], decode_seconds = s[1], augment_seconds = s[2], seal_seconds = s[3];
  }
};

// Where a registration resumes: a checkpoint token (dataset/checkpoint.h), which the coordinator decodes. A client
// before tokens travelled sends only the version 1 fields.
struct ResumePoint {
  uint64_t position = 0;          // version 1: global batch index
  uint64_t spec_fingerprint = 0;  // version 1: SpecFingerprint of the job the checkpoint was taken in
  std::string token;              // the whole token: what the coordinator goes by when it is there
  bool live = false;  // a live shape change: the old shape's training ranks end (RegisterClient.resumeLive)
};

struct RegisterClientRequest {
  std::string client_id;
  std::string job;
  uint32_t rank = 0;
  std::optional<JobSpec> spec;
  uint32_t window = 0;
  std::optional<ResumePoint> resume;
  bool probe = false;  // only describe: claims nothing (Client::Describe)
  std::string local_group;  // the node-local workers' group beside this client; empty: none
  std::string session;      // the client's secret for this rank's session (32 random bytes)
};
struct RegisterClientResponse {
  JobSpec spec;
  uint64_t steps_per_epoch = 0;
  uint64_t samples_per_epoch = 0;
  uint64_t start_batch = 0;
  uint32_t heartbeat_interval_ms = 0;
  std::vector<WorkerInfo> workers;
  uint64_t membership_version = 0;
};

// The most worker ids a client reports as having sent batches that were not the plan's (ClientHeartbeat).
constexpr size_t kMaxRejectedWorkers = 64;

struct ClientHeartbeatRequest {
  std::string client_id;
  std::string job;
  uint32_t rank = 0;
  uint64_t consumed = 0;
  uint64_t received_watermark = 0;
  std::vector<uint64_t> received_above;
  uint64_t membership_version = 0;
  double step_seconds = 0;   // telemetry, cumulative
  double stall_seconds = 0;
  uint64_t samples_delivered = 0;
  std::string local_group;  // as in RegisterClientRequest
  std::vector<std::string> rejected_workers;  // worker ids whose batches were not the plan's (kMaxRejectedWorkers)
  std::string session;                        // RegisterClientRequest::session
  // The client's stages, cumulative (a NaN or negative one reads as 0): taking batches in, host-to-device.
  double receive_seconds = 0, h2d_seconds = 0;

  // The client's stages by name (the metrics' `stage` label, after UnitDoneRequest::kStages) and their seconds.
  static constexpr std::array<const char*, 2> kStages = {"receive", "h2d"};
  std::array<double, 2> StageSeconds() const { return {receive_seconds, h2d_seconds}; }
};

// The stages of a job's batches in their order, as the metrics' `stage` label: the workers' (UnitDoneRequest), then
// its clients' (ClientHeartbeatRequest).
inline constexpr std::array<const char*, 6> kJobStages = {"read", "decode", "augment", "seal", "receive", "h2d"};
static_assert(kJobStages.size() == UnitDoneRequest::kStages.size() + ClientHeartbeatRequest::kStages.size());

struct ClientHeartbeatResponse {
  uint64_t membership_version = 0;
  bool workers_changed = false;
  std::vector<WorkerInfo> workers;
  std::vector<LeaseRef> leases;
};

struct DeregisterRequest {
  std::string sender_id;  // "w-…" or "c-…"
  std::string job;
  uint32_t rank = 0;
  std::string session;  // RegisterClientRequest::session or RegisterWorkerRequest::session
};

struct GetJobRequest {
  std::string sender_id;
  std::string job;
};

// Who sent a request, as the transport authenticated it: the CURVE key's "<role>:<name>", never a field of the
// message. Empty with CURVE off (--insecure): every caller may then do anything.
struct Caller {
  std::string identity;
};

using RequestBody = std::variant<RegisterWorkerRequest, WorkerHeartbeatRequest, LeaseRequest, UnitDoneRequest,
                                 RegisterClientRequest, ClientHeartbeatRequest, GetJobRequest, DeregisterRequest>;

// Replies: std::monostate for "status only" (unitDone, deregister, and every error).
using ReplyBody = std::variant<std::monostate, RegisterWorkerResponse, WorkerHeartbeatResponse, LeaseResponse,
                               RegisterClientResponse, ClientHeartbeatResponse, JobSpec>;

}  // namespace stoker
