// Control messages <-> Cap'n Proto (schema/control.capnp): a field list per message (wire/fields.h), the union
// of requests and of replies, and the envelope around them.
#include "wire/control_codec.h"

#include <tuple>
#include <type_traits>
#include <utility>

#include "stoker/schema/control.capnp.h"
#include "wire/fields.h"
#include "wire/frames.h"
#include "wire/job_spec_wire.h"

namespace stoker {
namespace {

// What each message carries (wire/fields.h). The sender's id is not among a request's fields: the envelope
// carries it (SenderId).

constexpr auto kLeaseRef = fields::List<LeaseRef>(STOKER_FIELD(job, Job), STOKER_FIELD(rank, Rank),
                                                  STOKER_FIELD(unit, Unit), STOKER_FIELD(attempt, Attempt));
constexpr auto kWorkerInfo =
    fields::List<WorkerInfo>(STOKER_FIELD(worker_id, WorkerId), STOKER_FIELD(data_endpoint, DataEndpoint),
                             STOKER_FIELD(data_public_key, DataPublicKey), STOKER_FIELD(data_ticket, DataTicket),
                             fields::Bytes(STOKER_FIELD(data_seal_key, DataSealKey)));
constexpr auto kLeaseGrant = fields::List<LeaseGrant>(
    STOKER_FIELD(job, Job), STOKER_FIELD(rank, Rank), STOKER_FIELD(unit, Unit), STOKER_FIELD(epoch, Epoch),
    STOKER_FIELD(first_batch, FirstBatch), STOKER_FIELD(batch_count, BatchCount), STOKER_FIELD(attempt, Attempt),
    STOKER_FIELD(skip, Skip), STOKER_FIELD(ttl_ms, TtlMs), STOKER_FIELD(client_id, ClientId),
    STOKER_FIELD(client_identity, ClientIdentity), STOKER_FIELD(spec_fingerprint, SpecFingerprint),
    fields::Bytes(STOKER_FIELD(session_check, SessionCheck)));
constexpr auto kQuarantineReport = fields::List<QuarantineReport>(
    STOKER_FIELD(sample_id, SampleId), STOKER_FIELD(reason, Reason), STOKER_FIELD(detail, Detail));
constexpr auto kUnitOutcomes = fields::MakeEnumMap(
    "unit done with an unknown outcome", std::pair{UnitOutcome::kSent, wire::UnitOutcome::SENT},
    std::pair{UnitOutcome::kUndeliverable, wire::UnitOutcome::UNDELIVERABLE},
    std::pair{UnitOutcome::kAbandoned, wire::UnitOutcome::ABANDONED});

// A registration's spec and resume point are optional: each travels behind a flag (hasSpec, hasResume).
struct SpecAndResume {
  void Put(const RegisterClientRequest& c, wire::RegisterClient::Builder m) const {
    m.setHasSpec(c.spec.has_value());
    if (c.spec.has_value()) ToWire(*c.spec, m.initSpec());
    m.setHasResume(c.resume.has_value());
    if (c.resume.has_value()) {
      m.setResumeFrom(c.resume->position);
      m.setResumeSpecFingerprint(c.resume->spec_fingerprint);
      m.setResumeToken(c.resume->token);
      m.setResumeLive(c.resume->live);
    }
  }
  Status Get(wire::RegisterClient::Reader m, RegisterClientRequest* c) const {
    if (m.getHasSpec()) {
      STOKER_ASSIGN_OR_RETURN(c->spec, FromWire(m.getSpec()));
    }
    if (m.getHasResume()) {
      c->resume = ResumePoint{m.getResumeFrom(), m.getResumeSpecFingerprint(), m.getResumeToken(), m.getResumeLive()};
    }
    return Status::Ok();
  }
};

// In RequestBody's order.
constexpr auto kRequests = std::tuple(
    fields::Member(fields::List<RegisterWorkerRequest>(
                       STOKER_FIELD(data_endpoint, DataEndpoint), STOKER_FIELD(threads, Threads),
                       STOKER_FIELD(version, Version), STOKER_FIELD(data_public_key, DataPublicKey),
                       STOKER_FIELD(data_sealed, DataSealed), STOKER_FIELD(local_group, LocalGroup),
                       fields::Bytes(STOKER_FIELD(session, Session))),
                   STOKER_CAPNP_ACCESSORS(RegisterWorker)),
    fields::Member(fields::List<WorkerHeartbeatRequest>(
                       fields::Each(kLeaseRef, STOKER_FIELD(leases, Leases)), STOKER_FIELD(draining, Draining),
                       fields::Telemetry(STOKER_FIELD(busy_seconds, BusySeconds)),
                       STOKER_FIELD(samples_made, SamplesMade), fields::Bytes(STOKER_FIELD(session, Session))),
                   STOKER_CAPNP_ACCESSORS(WorkerHeartbeat)),
    fields::Member(fields::List<LeaseRequest>(STOKER_FIELD(job, Job), STOKER_FIELD(rank, Rank),
                                              STOKER_FIELD(max_batches, MaxBatches), STOKER_FIELD(wait_ms, WaitMs),
                                              fields::Bytes(STOKER_FIELD(session, Session))),
                   STOKER_CAPNP_ACCESSORS(LeaseRequest)),
    fields::Member(fields::List<UnitDoneRequest>(
                       STOKER_FIELD(job, Job), STOKER_FIELD(rank, Rank), STOKER_FIELD(unit, Unit),
                       STOKER_FIELD(attempt, Attempt), fields::Mapped(kUnitOutcomes, STOKER_FIELD(outcome, Outcome)),
                       STOKER_FIELD(batches_sent, BatchesSent),
                       fields::Each(kQuarantineReport, STOKER_FIELD(quarantined, Quarantined)),
                       fields::Telemetry(STOKER_FIELD(busy_seconds, BusySeconds)),
                       fields::Telemetry(STOKER_FIELD(read_seconds, ReadSeconds)),
                       fields::Telemetry(STOKER_FIELD(decode_seconds, DecodeSeconds)),
                       fields::Telemetry(STOKER_FIELD(augment_seconds, AugmentSeconds)),
                       fields::Telemetry(STOKER_FIELD(seal_seconds, SealSeconds)),
                       fields::Bytes(STOKER_FIELD(session, Session))),
                   STOKER_CAPNP_ACCESSORS(UnitDone)),
    fields::Member(fields::List<RegisterClientRequest>(STOKER_FIELD(job, Job), STOKER_FIELD(rank, Rank),
                                                       STOKER_FIELD(window, Window), STOKER_FIELD(probe, Probe),
                                                       STOKER_FIELD(local_group, LocalGroup),
                                                       fields::Bytes(STOKER_FIELD(session, Session)), SpecAndResume()),
                   STOKER_CAPNP_ACCESSORS(RegisterClient)),
    fields::Member(fields::List<ClientHeartbeatRequest>(
                       STOKER_FIELD(job, Job), STOKER_FIELD(rank, Rank), STOKER_FIELD(consumed, Consumed),
                       STOKER_FIELD(received_watermark, ReceivedWatermark),
                       STOKER_FIELD(received_above, ReceivedAbove),
                       STOKER_FIELD(membership_version, MembershipVersion),
                       fields::Telemetry(STOKER_FIELD(step_seconds, StepSeconds)),
                       fields::Telemetry(STOKER_FIELD(stall_seconds, StallSeconds)),
                       STOKER_FIELD(samples_delivered, SamplesDelivered), STOKER_FIELD(local_group, LocalGroup),
                       STOKER_FIELD(rejected_workers, RejectedWorkers),
                       fields::Bytes(STOKER_FIELD(session, Session)),
                       fields::Telemetry(STOKER_FIELD(receive_seconds, ReceiveSeconds)),
                       fields::Telemetry(STOKER_FIELD(h2d_seconds, H2dSeconds))),
                   STOKER_CAPNP_ACCESSORS(ClientHeartbeat)),
    fields::Member(fields::List<GetJobRequest>(STOKER_FIELD(job, Job)), STOKER_CAPNP_ACCESSORS(GetJob)),
    fields::Member(fields::List<DeregisterRequest>(STOKER_FIELD(job, Job), STOKER_FIELD(rank, Rank),
                                                   fields::Bytes(STOKER_FIELD(session, Session))),
                   STOKER_CAPNP_ACCESSORS(Deregister)));

// The member of each request that the envelope's senderId carries: its worker, client or tool id.
template <typename T>
auto& SenderId(T& body) {
  using Request = std::remove_const_t<T>;
  if constexpr (std::is_same_v<Request, RegisterClientRequest> || std::is_same_v<Request, ClientHeartbeatRequest>) {
    return body.client_id;
  } else if constexpr (std::is_same_v<Request, DeregisterRequest> || std::is_same_v<Request, GetJobRequest>) {
    return body.sender_id;
  } else {
    return body.worker_id;
  }
}

// A reply that is its status only: `none`, or `unitDone`, which is read the same.
struct StatusOnly {
  void Put(const std::monostate&, wire::Reply::Builder r) const { r.setNone(); }
  bool Is(wire::Reply::Reader r) const { return r.isNone() || r.isUnitDone(); }
  Status Get(wire::Reply::Reader, std::monostate*) const { return Status::Ok(); }
};

// In ReplyBody's order.
constexpr auto kReplies = std::tuple(
    StatusOnly(),
    fields::Member(fields::List<RegisterWorkerResponse>(
                       STOKER_FIELD(heartbeat_interval_ms, HeartbeatIntervalMs),
                       STOKER_FIELD(lease_ttl_ms, LeaseTtlMs),
                       fields::Bytes(STOKER_FIELD(data_ticket_key, DataTicketKey))),
                   STOKER_CAPNP_ACCESSORS(RegisterWorker)),
    fields::Member(fields::List<WorkerHeartbeatResponse>(fields::Each(kLeaseRef, STOKER_FIELD(revoked, Revoked))),
                   STOKER_CAPNP_ACCESSORS(WorkerHeartbeat)),
    fields::Member(fields::List<LeaseResponse>(STOKER_FIELD(job_done, JobDone),
                                               fields::Each(kLeaseGrant, STOKER_FIELD(leases, Leases))),
                   STOKER_CAPNP_ACCESSORS(Lease)),
    fields::Member(fields::List<RegisterClientResponse>(
                       STOKER_FIELD(spec, Spec), STOKER_FIELD(steps_per_epoch, StepsPerEpoch),
                       STOKER_FIELD(samples_per_epoch, SamplesPerEpoch), STOKER_FIELD(start_batch, StartBatch),
                       STOKER_FIELD(heartbeat_interval_ms, HeartbeatIntervalMs),
                       fields::Each(kWorkerInfo, STOKER_FIELD(workers, Workers)),
                       STOKER_FIELD(membership_version, MembershipVersion)),
                   STOKER_CAPNP_ACCESSORS(RegisterClient)),
    fields::Member(fields::List<ClientHeartbeatResponse>(
                       STOKER_FIELD(membership_version, MembershipVersion),
                       STOKER_FIELD(workers_changed, WorkersChanged),
                       fields::Each(kWorkerInfo, STOKER_FIELD(workers, Workers)),
                       fields::Each(kLeaseRef, STOKER_FIELD(leases, Leases))),
                   STOKER_CAPNP_ACCESSORS(ClientHeartbeat)),
    fields::Whole<JobSpec>(STOKER_CAPNP_ACCESSORS(Job)));

constexpr const char* kMethodNames[] = {"register_worker", "worker_heartbeat", "lease_request",
                                        "unit_done",       "register_client",  "client_heartbeat",
                                        "get_job",         "deregister"};
static_assert(std::size(kMethodNames) == std::variant_size_v<RequestBody>);

}  // namespace

const char* MethodName(const RequestBody& body) { return kMethodNames[body.index()]; }

const std::vector<std::string>& MethodNames() {
  static const std::vector<std::string> names(std::begin(kMethodNames), std::end(kMethodNames));
  return names;
}

zmq::message_t EncodeRequest(uint64_t request_id, const RequestBody& body) {
  capnp::MallocMessageBuilder message(kControlFirstSegmentWords);
  auto r = message.initRoot<wire::Request>();
  r.setProtocolVersion(wire::PROTOCOL_VERSION);
  r.setRequestId(request_id);
  r.setSenderId(std::visit([](const auto& b) -> const std::string& { return SenderId(b); }, body));
  fields::PutVariant(body, r, kRequests);
  return ToFrame(message);
}

StatusOr<DecodedRequest> DecodeRequest(zmq::message_t frame, uint64_t* request_id) {
  STOKER_ASSIGN_OR_RETURN(auto parsed, ParsedFrame::Parse(std::move(frame), ControlReaderOptions()));
  DecodedRequest out;
  Status status = CatchWireErrors("request", [&]() -> Status {
    auto r = parsed->Root<wire::Request>();
    out.request_id = r.getRequestId();
    *request_id = out.request_id;
    if (r.getProtocolVersion() != wire::PROTOCOL_VERSION) {
      return UnimplementedError("protocol version " + std::to_string(r.getProtocolVersion()) +
                                " is not supported; this coordinator speaks version " +
                                std::to_string(wire::PROTOCOL_VERSION));
    }
    out.sender_id = r.getSenderId().cStr();
    if (out.sender_id.empty() || out.sender_id.size() > 64) return InvalidArgumentError("request without a sender id");
    STOKER_RETURN_IF_ERROR(fields::GetVariant(r, &out.body, kRequests,
                                              [] { return InvalidArgumentError("request of an unknown kind"); }));
    std::visit([&](auto& b) { SenderId(b) = out.sender_id; }, out.body);
    return Status::Ok();
  });
  if (!status.ok()) return status;
  return out;
}

zmq::message_t EncodeReply(uint64_t request_id, const Status& status, const ReplyBody& body) {
  capnp::MallocMessageBuilder message(kControlFirstSegmentWords);
  auto r = message.initRoot<wire::Reply>();
  r.setProtocolVersion(wire::PROTOCOL_VERSION);
  r.setRequestId(request_id);
  ToWire(status, r.initStatus());
  fields::PutVariant(body, r, kReplies);
  return ToFrame(message);
}

StatusOr<DecodedReply> DecodeReply(zmq::message_t frame) {
  STOKER_ASSIGN_OR_RETURN(auto parsed, ParsedFrame::Parse(std::move(frame), ControlReaderOptions()));
  DecodedReply out;
  Status status = CatchWireErrors("reply", [&]() -> Status {
    auto r = parsed->Root<wire::Reply>();
    if (r.getProtocolVersion() != wire::PROTOCOL_VERSION) {
      return UnimplementedError("the coordinator speaks protocol version " + std::to_string(r.getProtocolVersion()) +
                                ", this build speaks " + std::to_string(wire::PROTOCOL_VERSION));
    }
    out.request_id = r.getRequestId();
    out.status = FromWire(r.getStatus());
    return fields::GetVariant(r, &out.body, kReplies,
                              [] { return InvalidArgumentError("reply of an unknown kind"); });
  });
  if (!status.ok()) return status;
  return out;
}

}  // namespace stoker
