#include "wire/control_codec.h"

#include <cmath>

#include "wire/frames.h"
#include "stoker/schema/control.capnp.h"
#include "wire/job_spec_wire.h"

namespace stoker {
namespace {

// Telemetry from a peer is advice, never trusted: a NaN, infinity or negative figure counts as nothing.
double FiniteOrZero(double v) { return std::isfinite(v) && v > 0 ? v : 0; }

template <typename ListBuilder, typename T, typename Fn>
void FillList(ListBuilder list, const std::vector<T>& values, Fn fill) {
  for (size_t i = 0; i < values.size(); ++i) fill(list[static_cast<unsigned>(i)], values[i]);
}

void Put(wire::LeaseRef::Builder out, const LeaseRef& in) {
  out.setJob(in.job);
  out.setRank(in.rank);
  out.setUnit(in.unit);
  out.setAttempt(in.attempt);
}
LeaseRef Get(wire::LeaseRef::Reader in) { return {in.getJob().cStr(), in.getRank(), in.getUnit(), in.getAttempt()}; }

void Put(wire::WorkerInfo::Builder out, const WorkerInfo& in) {
  out.setWorkerId(in.worker_id);
  out.setDataEndpoint(in.data_endpoint);
  out.setDataPublicKey(in.data_public_key);
  out.setDataTicket(in.data_ticket);
}
WorkerInfo Get(wire::WorkerInfo::Reader in) {
  return {in.getWorkerId().cStr(), in.getDataEndpoint().cStr(), in.getDataPublicKey().cStr(),
          in.getDataTicket().cStr()};
}

std::vector<LeaseRef> GetLeaseRefs(capnp::List<wire::LeaseRef>::Reader list) {
  std::vector<LeaseRef> out;
  for (auto r : list) out.push_back(Get(r));
  return out;
}
std::vector<WorkerInfo> GetWorkers(capnp::List<wire::WorkerInfo>::Reader list) {
  std::vector<WorkerInfo> out;
  for (auto w : list) out.push_back(Get(w));
  return out;
}

wire::UnitOutcome ToWireOutcome(UnitOutcome o) {
  switch (o) {
    case UnitOutcome::kSent: return wire::UnitOutcome::SENT;
    case UnitOutcome::kUndeliverable: return wire::UnitOutcome::UNDELIVERABLE;
    case UnitOutcome::kAbandoned: return wire::UnitOutcome::ABANDONED;
  }
  return wire::UnitOutcome::SENT;
}

std::string SenderOf(const RequestBody& body) {
  return std::visit(
      [](const auto& b) -> std::string {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, RegisterClientRequest> || std::is_same_v<T, ClientHeartbeatRequest>) {
          return b.client_id;
        } else if constexpr (std::is_same_v<T, DeregisterRequest> || std::is_same_v<T, GetJobRequest>) {
          return b.sender_id;
        } else {
          return b.worker_id;
        }
      },
      body);
}

}  // namespace

namespace {
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
  r.setSenderId(SenderOf(body));
  std::visit(
      [&r](const auto& b) {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, RegisterWorkerRequest>) {
          auto m = r.initRegisterWorker();
          m.setDataEndpoint(b.data_endpoint);
          m.setThreads(b.threads);
          m.setVersion(b.version);
          m.setDataPublicKey(b.data_public_key);
          m.setDataPlain(b.data_plain);
        } else if constexpr (std::is_same_v<T, WorkerHeartbeatRequest>) {
          auto m = r.initWorkerHeartbeat();
          FillList(m.initLeases(static_cast<unsigned>(b.leases.size())), b.leases,
                   [](auto out, const LeaseRef& in) { Put(out, in); });
          m.setDraining(b.draining);
          m.setBusySeconds(b.busy_seconds);
          m.setSamplesMade(b.samples_made);
        } else if constexpr (std::is_same_v<T, LeaseRequest>) {
          auto m = r.initLeaseRequest();
          m.setJob(b.job);
          m.setRank(b.rank);
          m.setMaxBatches(b.max_batches);
          m.setWaitMs(b.wait_ms);
        } else if constexpr (std::is_same_v<T, UnitDoneRequest>) {
          auto m = r.initUnitDone();
          m.setJob(b.job);
          m.setRank(b.rank);
          m.setUnit(b.unit);
          m.setAttempt(b.attempt);
          m.setOutcome(ToWireOutcome(b.outcome));
          m.setBatchesSent(b.batches_sent);
          FillList(m.initQuarantined(static_cast<unsigned>(b.quarantined.size())), b.quarantined,
                   [](auto out, const QuarantineReport& in) {
                     out.setSampleId(in.sample_id);
                     out.setReason(in.reason);
                     out.setDetail(in.detail);
                   });
        } else if constexpr (std::is_same_v<T, RegisterClientRequest>) {
          auto m = r.initRegisterClient();
          m.setJob(b.job);
          m.setRank(b.rank);
          m.setWindow(b.window);
          m.setHasSpec(b.spec.has_value());
          if (b.spec.has_value()) ToWire(*b.spec, m.initSpec());
          m.setHasResume(b.resume.has_value());
          if (b.resume.has_value()) {
            m.setResumeFrom(b.resume->position);
            m.setResumeSpecFingerprint(b.resume->spec_fingerprint);
          }
        } else if constexpr (std::is_same_v<T, ClientHeartbeatRequest>) {
          auto m = r.initClientHeartbeat();
          m.setJob(b.job);
          m.setRank(b.rank);
          m.setConsumed(b.consumed);
          m.setReceivedWatermark(b.received_watermark);
          auto above = m.initReceivedAbove(static_cast<unsigned>(b.received_above.size()));
          for (size_t i = 0; i < b.received_above.size(); ++i) above.set(static_cast<unsigned>(i), b.received_above[i]);
          m.setMembershipVersion(b.membership_version);
          m.setStepSeconds(b.step_seconds);
          m.setStallSeconds(b.stall_seconds);
          m.setSamplesDelivered(b.samples_delivered);
        } else if constexpr (std::is_same_v<T, GetJobRequest>) {
          r.initGetJob().setJob(b.job);
        } else if constexpr (std::is_same_v<T, DeregisterRequest>) {
          auto m = r.initDeregister();
          m.setJob(b.job);
          m.setRank(b.rank);
        }
      },
      body);
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
    const std::string& sender = out.sender_id;
    switch (r.which()) {
      case wire::Request::REGISTER_WORKER: {
        auto m = r.getRegisterWorker();
        out.body = RegisterWorkerRequest{sender, m.getDataEndpoint().cStr(), m.getThreads(), m.getVersion().cStr(),
                                         m.getDataPublicKey().cStr(), m.getDataPlain()};
        break;
      }
      case wire::Request::WORKER_HEARTBEAT: {
        auto m = r.getWorkerHeartbeat();
        out.body = WorkerHeartbeatRequest{sender, GetLeaseRefs(m.getLeases()), m.getDraining(),
                                          FiniteOrZero(m.getBusySeconds()), m.getSamplesMade()};
        break;
      }
      case wire::Request::LEASE_REQUEST: {
        auto m = r.getLeaseRequest();
        out.body = LeaseRequest{sender, m.getJob().cStr(), m.getRank(), m.getMaxBatches(), m.getWaitMs()};
        break;
      }
      case wire::Request::UNIT_DONE: {
        auto m = r.getUnitDone();
        UnitDoneRequest d;
        d.worker_id = sender;
        d.job = m.getJob().cStr();
        d.rank = m.getRank();
        d.unit = m.getUnit();
        d.attempt = m.getAttempt();
        switch (m.getOutcome()) {
          case wire::UnitOutcome::SENT: d.outcome = UnitOutcome::kSent; break;
          case wire::UnitOutcome::UNDELIVERABLE: d.outcome = UnitOutcome::kUndeliverable; break;
          case wire::UnitOutcome::ABANDONED: d.outcome = UnitOutcome::kAbandoned; break;
          default: return InvalidArgumentError("unit done with an unknown outcome");
        }
        d.batches_sent = m.getBatchesSent();
        for (auto q : m.getQuarantined()) {
          d.quarantined.push_back({q.getSampleId(), q.getReason().cStr(), q.getDetail().cStr()});
        }
        out.body = std::move(d);
        break;
      }
      case wire::Request::REGISTER_CLIENT: {
        auto m = r.getRegisterClient();
        RegisterClientRequest c;
        c.client_id = sender;
        c.job = m.getJob().cStr();
        c.rank = m.getRank();
        c.window = m.getWindow();
        if (m.getHasSpec()) {
          auto spec = FromWire(m.getSpec());
          if (!spec.ok()) return spec.status();
          c.spec = std::move(*spec);
        }
        if (m.getHasResume()) c.resume = ResumePoint{m.getResumeFrom(), m.getResumeSpecFingerprint()};
        out.body = std::move(c);
        break;
      }
      case wire::Request::CLIENT_HEARTBEAT: {
        auto m = r.getClientHeartbeat();
        ClientHeartbeatRequest h;
        h.client_id = sender;
        h.job = m.getJob().cStr();
        h.rank = m.getRank();
        h.consumed = m.getConsumed();
        h.received_watermark = m.getReceivedWatermark();
        for (uint64_t g : m.getReceivedAbove()) h.received_above.push_back(g);
        h.membership_version = m.getMembershipVersion();
        h.step_seconds = FiniteOrZero(m.getStepSeconds());
        h.stall_seconds = FiniteOrZero(m.getStallSeconds());
        h.samples_delivered = m.getSamplesDelivered();
        out.body = std::move(h);
        break;
      }
      case wire::Request::GET_JOB:
        out.body = GetJobRequest{sender, r.getGetJob().getJob().cStr()};
        break;
      case wire::Request::DEREGISTER: {
        auto m = r.getDeregister();
        out.body = DeregisterRequest{sender, m.getJob().cStr(), m.getRank()};
        break;
      }
      default:
        return InvalidArgumentError("request of an unknown kind");
    }
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
  std::visit(
      [&r](const auto& b) {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          r.setNone();
        } else if constexpr (std::is_same_v<T, RegisterWorkerResponse>) {
          auto m = r.initRegisterWorker();
          m.setHeartbeatIntervalMs(b.heartbeat_interval_ms);
          m.setLeaseTtlMs(b.lease_ttl_ms);
          m.setDataTicketKey(kj::arrayPtr(reinterpret_cast<const capnp::byte*>(b.data_ticket_key.data()),
                                          b.data_ticket_key.size()));
        } else if constexpr (std::is_same_v<T, WorkerHeartbeatResponse>) {
          FillList(r.initWorkerHeartbeat().initRevoked(static_cast<unsigned>(b.revoked.size())), b.revoked,
                   [](auto out, const LeaseRef& in) { Put(out, in); });
        } else if constexpr (std::is_same_v<T, LeaseResponse>) {
          auto m = r.initLease();
          m.setJobDone(b.job_done);
          FillList(m.initLeases(static_cast<unsigned>(b.leases.size())), b.leases, [](auto out, const LeaseGrant& g) {
            out.setJob(g.job);
            out.setRank(g.rank);
            out.setUnit(g.unit);
            out.setEpoch(g.epoch);
            out.setFirstBatch(g.first_batch);
            out.setBatchCount(g.batch_count);
            out.setAttempt(g.attempt);
            auto skip = out.initSkip(static_cast<unsigned>(g.skip.size()));
            for (size_t i = 0; i < g.skip.size(); ++i) skip.set(static_cast<unsigned>(i), g.skip[i]);
            out.setTtlMs(g.ttl_ms);
            out.setClientId(g.client_id);
            out.setClientIdentity(g.client_identity);
            out.setSpecFingerprint(g.spec_fingerprint);
          });
        } else if constexpr (std::is_same_v<T, RegisterClientResponse>) {
          auto m = r.initRegisterClient();
          ToWire(b.spec, m.initSpec());
          m.setStepsPerEpoch(b.steps_per_epoch);
          m.setSamplesPerEpoch(b.samples_per_epoch);
          m.setStartBatch(b.start_batch);
          m.setHeartbeatIntervalMs(b.heartbeat_interval_ms);
          FillList(m.initWorkers(static_cast<unsigned>(b.workers.size())), b.workers,
                   [](auto out, const WorkerInfo& in) { Put(out, in); });
          m.setMembershipVersion(b.membership_version);
        } else if constexpr (std::is_same_v<T, ClientHeartbeatResponse>) {
          auto m = r.initClientHeartbeat();
          m.setMembershipVersion(b.membership_version);
          m.setWorkersChanged(b.workers_changed);
          FillList(m.initWorkers(static_cast<unsigned>(b.workers.size())), b.workers,
                   [](auto out, const WorkerInfo& in) { Put(out, in); });
          FillList(m.initLeases(static_cast<unsigned>(b.leases.size())), b.leases,
                   [](auto out, const LeaseRef& in) { Put(out, in); });
        } else if constexpr (std::is_same_v<T, JobSpec>) {
          ToWire(b, r.initJob());
        }
      },
      body);
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
    switch (r.which()) {
      case wire::Reply::NONE:
      case wire::Reply::UNIT_DONE:
        out.body = std::monostate{};
        break;
      case wire::Reply::REGISTER_WORKER: {
        auto m = r.getRegisterWorker();
        auto key = m.getDataTicketKey();
        out.body = RegisterWorkerResponse{m.getHeartbeatIntervalMs(), m.getLeaseTtlMs(),
                                          std::string(reinterpret_cast<const char*>(key.begin()), key.size())};
        break;
      }
      case wire::Reply::WORKER_HEARTBEAT:
        out.body = WorkerHeartbeatResponse{GetLeaseRefs(r.getWorkerHeartbeat().getRevoked())};
        break;
      case wire::Reply::LEASE: {
        auto m = r.getLease();
        LeaseResponse l;
        l.job_done = m.getJobDone();
        for (auto g : m.getLeases()) {
          LeaseGrant grant;
          grant.job = g.getJob().cStr();
          grant.rank = g.getRank();
          grant.unit = g.getUnit();
          grant.epoch = g.getEpoch();
          grant.first_batch = g.getFirstBatch();
          grant.batch_count = g.getBatchCount();
          grant.attempt = g.getAttempt();
          for (uint64_t s : g.getSkip()) grant.skip.push_back(s);
          grant.ttl_ms = g.getTtlMs();
          grant.client_id = g.getClientId().cStr();
          grant.client_identity = g.getClientIdentity().cStr();
          grant.spec_fingerprint = g.getSpecFingerprint();
          l.leases.push_back(std::move(grant));
        }
        out.body = std::move(l);
        break;
      }
      case wire::Reply::REGISTER_CLIENT: {
        auto m = r.getRegisterClient();
        RegisterClientResponse c;
        auto spec = FromWire(m.getSpec());
        if (!spec.ok()) return spec.status();
        c.spec = std::move(*spec);
        c.steps_per_epoch = m.getStepsPerEpoch();
        c.samples_per_epoch = m.getSamplesPerEpoch();
        c.start_batch = m.getStartBatch();
        c.heartbeat_interval_ms = m.getHeartbeatIntervalMs();
        c.workers = GetWorkers(m.getWorkers());
        c.membership_version = m.getMembershipVersion();
        out.body = std::move(c);
        break;
      }
      case wire::Reply::CLIENT_HEARTBEAT: {
        auto m = r.getClientHeartbeat();
        ClientHeartbeatResponse h;
        h.membership_version = m.getMembershipVersion();
        h.workers_changed = m.getWorkersChanged();
        h.workers = GetWorkers(m.getWorkers());
        h.leases = GetLeaseRefs(m.getLeases());
        out.body = std::move(h);
        break;
      }
      case wire::Reply::JOB: {
        auto spec = FromWire(r.getJob());
        if (!spec.ok()) return spec.status();
        out.body = std::move(*spec);
        break;
      }
      default:
        return InvalidArgumentError("reply of an unknown kind");
    }
    return Status::Ok();
  });
  if (!status.ok()) return status;
  return out;
}

}  // namespace stoker
