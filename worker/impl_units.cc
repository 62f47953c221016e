// WorkerImpl, the life of a unit: leasing within a stream's credit, a grant becoming batches to build, where each
// finished batch goes, and how the unit ends — sent and reported, revoked, fenced, or handed back.
#include "worker/impl.h"

#include "base/logging.h"

namespace stoker::worker {

void WorkerImpl::RequestLeases() {
  for (auto& [key, stream] : streams_) {
    auto jit = jobs_.find(std::get<0>(key));
    if (stream.lease_request != 0 || stream.job_done || jit == jobs_.end()) continue;
    if (std::get<1>(key) >= jit->second->plan.world_size()) continue;  // waiting for the job's spec again
    if (clock_.Now() < stream.hold_until) continue;  // its storage just failed: give it a moment
    const uint32_t in_hand = InHand(key);
    if (in_hand >= stream.credits) continue;
    const uint32_t free = stream.credits - in_hand;
    // Asking for less than a unit would only be parked: wait until a whole unit fits (or nothing is in hand).
    if (free < std::min(stream.credits, jit->second->spec.batches_per_unit) && in_hand > 0) continue;
    const uint64_t id = Send(LeaseRequest{id_, std::get<0>(key), std::get<1>(key), free,
                                          static_cast<uint32_t>(ToMillis(options_.lease_wait)), session_});
    stream.lease_request = id;
    lease_requests_[id] = key;
  }
}

void WorkerImpl::LeaseAnswered(uint64_t request_id, const LeaseResponse& response) {
  auto rit = lease_requests_.find(request_id);
  if (rit == lease_requests_.end()) return;
  auto sit = streams_.find(rit->second);
  if (sit != streams_.end() && sit->second.lease_request == request_id) {
    sit->second.lease_request = 0;
    sit->second.job_done = response.job_done;
  }
  lease_requests_.erase(rit);
}

void WorkerImpl::HoldStream(uint64_t request_id, Duration hold) {
  auto rit = lease_requests_.find(request_id);
  if (rit == lease_requests_.end()) return;
  auto sit = streams_.find(rit->second);
  if (sit != streams_.end()) sit->second.hold_until = clock_.Now() + hold;
}

void WorkerImpl::StartUnit(const LeaseGrant& grant) {
  UnitKey key{grant.job, grant.rank, grant.unit};
  UnitWork work;
  work.lease = grant;
  // The coordinator's clock for this lease started when it granted it, which may be long after we asked (the
  // request can wait, parked, for work). Count from receipt, less a quarter for the reply's transit: never later
  // than the coordinator's own expiry. Heartbeat renewals then count exactly, from when each heartbeat left.
  work.expires = clock_.Now() + Millis(grant.ttl_ms) - Millis(grant.ttl_ms / 4);
  auto jit = jobs_.find(grant.job);
  if (jit != jobs_.end() && jit->second->spec_fingerprint != grant.spec_fingerprint) {
    // The coordinator knows this job under another spec (recreated, or resumed on another shape): reload it, redo
    // the unit elsewhere.
    STOKER_LOG(kInfo) << "job " << grant.job << " changed its spec: reloading it";
    jobs_.erase(jit);
    FetchJob(grant.job);
    jit = jobs_.end();
  }
  auto sit = streams_.find(StreamOf(work));
  if (jit == jobs_.end() || sit == streams_.end() || draining_) {
    // Nothing to make it for (its client is not connected here, or we are leaving): give it straight back.
    ReportUnit(key, work, sit == streams_.end() ? UnitOutcome::kUndeliverable : UnitOutcome::kAbandoned);
    return;
  }
  QueueBuilds(jit->second, key, work);
  if (work.to_send == 0) {  // everything already delivered: nothing to make
    ReportUnit(key, work, UnitOutcome::kSent);
    return;
  }
  units_[key] = std::move(work);
}

// One BatchBuild per batch of the unit the client does not have yet (the grant's skip list), in order.
void WorkerImpl::QueueBuilds(const std::shared_ptr<const JobContext>& job, const UnitKey& key, UnitWork& work) {
  const LeaseGrant& grant = work.lease;
  std::vector<bool> skip(grant.batch_count, false);
  for (uint64_t s : grant.skip) {
    if (s >= grant.first_batch && s < grant.first_batch + grant.batch_count) skip[s - grant.first_batch] = true;
  }
  const uint32_t batch_size = job->spec.batch_size;
  for (uint32_t i = 0; i < grant.batch_count; ++i) {
    if (skip[i]) continue;
    ++work.to_send;
    auto build = std::make_shared<BatchBuild>();
    build->job = job;
    build->unit = key;
    build->attempt = grant.attempt;
    build->epoch = grant.epoch;
    build->index = grant.first_batch + i;
    build->samples.resize(batch_size);
    job->plan.BatchSamples(grant.epoch, grant.rank, build->index, build->samples);
    build->labels.assign(batch_size, -1);
    build->flags.assign(batch_size, 0);
    build->quarantine.resize(batch_size);
    if (job->spec.pipeline.DecodesOnGpu()) build->crops.resize(batch_size);
    build->payload_bytes = job->spec.BatchBytes();
    build->cancelled = work.cancelled;
    build->remaining.store(batch_size);
    outbox_.builds.push_back(std::move(build));
  }
}

std::optional<BatchRoute> WorkerImpl::RouteBatch(const BatchBuild& build) {
  if (build.cancelled->load()) return std::nullopt;  // revoked, fenced or handed back
  auto uit = units_.find(build.unit);
  if (uit == units_.end()) return std::nullopt;
  if (std::string failure = build.storage_failure(); !failure.empty()) {
    HandBackForStorage(uit, failure);
    return std::nullopt;
  }
  if (clock_.Now() > uit->second.expires) {
    Fence(uit);
    return std::nullopt;
  }
  auto sit = streams_.find(StreamOf(uit->second));
  if (sit == streams_.end()) {
    GiveBack(uit, UnitOutcome::kUndeliverable);  // the client's stream is gone: the whole unit goes back
    return std::nullopt;
  }
  return BatchRoute{sit->second.peer, sit->second.max_frame_bytes, uit->second.lease.client_identity};
}

void WorkerImpl::BatchSent(BatchBuild& build, bool delivered) {
  auto uit = units_.find(build.unit);
  if (uit == units_.end()) return;
  if (!delivered) {
    GiveBack(uit, UnitOutcome::kUndeliverable);  // the client's connection is gone
    return;
  }
  UnitWork& work = uit->second;
  ++work.sent;
  work.busy_ns += build.busy_ns.load(std::memory_order_relaxed);
  const std::array<int64_t, 4> stages = build.StageNanos();
  for (size_t i = 0; i < stages.size(); ++i) work.stage_ns[i] += stages[i];
  for (QuarantineReport& q : build.quarantine) {
    if (!q.reason.empty()) work.quarantined.push_back(std::move(q));
  }
  if (work.sent == work.to_send) {
    // Ask for the stream's next work before saying this unit is done: the place the report frees goes to the job
    // owed it most among those waiting at the coordinator, and this stream is only among them if its request came
    // first (else a job with one rank would lose its turn to a job always waiting on some other rank).
    const UnitWork finished = std::move(work);
    units_.erase(uit);
    ++unit_counts_.done;
    if (registered_ && !draining_) RequestLeases();
    ReportUnit(build.unit, finished, UnitOutcome::kSent);
  }
}

// The lease of a unit ran out without renewal (the coordinator is unreachable, or this process was stopped): the
// coordinator has given, or will give, the unit to another worker. Send nothing more of it.
void WorkerImpl::Fence(UnitIt it) {
  STOKER_LOG(kWarning) << "lease of unit " << std::get<2>(it->first) << " (rank " << std::get<1>(it->first)
                       << " of " << std::get<0>(it->first) << ") expired unrenewed: no longer sending it";
  it->second.cancelled->store(true);
  units_.erase(it);
  ++unit_counts_.fenced;
}

void WorkerImpl::Revoke(const UnitKey& key, uint64_t attempt) {
  auto it = units_.find(key);
  if (it == units_.end() || it->second.lease.attempt != attempt) return;
  it->second.cancelled->store(true);
  units_.erase(it);
  ++unit_counts_.revoked;
}

// Stops the unit's batches and tells the coordinator so it re-leases the unit at once.
void WorkerImpl::GiveBack(UnitIt it, UnitOutcome outcome) {
  it->second.cancelled->store(true);
  ReportUnit(it->first, it->second, outcome);
  if (outcome == UnitOutcome::kUndeliverable) ++unit_counts_.undeliverable;
  if (outcome == UnitOutcome::kAbandoned) ++unit_counts_.abandoned;
  units_.erase(it);
}

// Storage could not serve one of the unit's reads: the unit goes back to the coordinator whole (never sent with a
// hole in it, never dropped), and its stream leases nothing for a moment so a dead bucket is not hammered. The
// error names the shard; it is logged at most once a second.
void WorkerImpl::HandBackForStorage(UnitIt it, const std::string& failure) {
  const TimePoint now = clock_.Now();
  ++storage_hand_backs_;
  last_storage_failure_ = failure;
  if (now - last_storage_log_ >= Millis(1000)) {
    last_storage_log_ = now;
    STOKER_LOG(kWarning) << "handing back unit " << std::get<2>(it->first) << " (rank " << std::get<1>(it->first)
                         << " of " << std::get<0>(it->first) << "): storage failed: " << failure;
  }
  auto sit = streams_.find(StreamOf(it->second));
  if (sit != streams_.end()) sit->second.hold_until = now + kStorageHold;
  GiveBack(it, UnitOutcome::kAbandoned);
}

void WorkerImpl::ReportUnit(const UnitKey& key, const UnitWork& work, UnitOutcome outcome) {
  UnitDoneRequest done;
  done.worker_id = id_;
  done.job = std::get<0>(key);
  done.rank = std::get<1>(key);
  done.unit = std::get<2>(key);
  done.attempt = work.lease.attempt;
  done.outcome = outcome;
  done.batches_sent = work.sent;
  done.busy_seconds = static_cast<double>(work.busy_ns) * 1e-9;
  std::array<double, 4> stage_seconds{};
  for (size_t i = 0; i < stage_seconds.size(); ++i) stage_seconds[i] = static_cast<double>(work.stage_ns[i]) * 1e-9;
  done.SetStageSeconds(stage_seconds);
  done.quarantined = work.quarantined;
  done.session = session_;
  Send(std::move(done));
}

}  // namespace stoker::worker
