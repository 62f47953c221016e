// CoordinatorImpl, workers: registering (a registered id keeps its data port until it is lost), heartbeats that
// renew and adopt leases, losing a worker, the list of workers each client is given, a job's spec for a worker,
// deregistering.
#include "coordinator/impl.h"

#include <algorithm>
#include <utility>

#include "auth/data_tickets.h"
#include "auth/keys.h"
#include "base/local_group.h"
#include "base/logging.h"

namespace stoker::coordinator {

namespace {

// A data endpoint clients can be pointed at: tcp://host:port, short (or, where `ipc` allows, ipc:// and an absolute
// path). Anything else would make every client of the job try to connect to whatever a worker wrote.
Status ValidDataEndpoint(const std::string& endpoint, bool ipc) {
  if (endpoint.size() > 256) return InvalidArgumentError("data endpoint longer than 256 bytes");
  if (ipc && endpoint.rfind("ipc:///", 0) == 0) return Status::Ok();
  if (endpoint.rfind("tcp://", 0) != 0) return InvalidArgumentError("data endpoint must be tcp://host:port");
  const size_t colon = endpoint.rfind(':');
  if (colon <= 6 || colon + 1 >= endpoint.size()) return InvalidArgumentError("data endpoint must be tcp://host:port");
  for (size_t i = colon + 1; i < endpoint.size(); ++i) {
    if (endpoint[i] < '0' || endpoint[i] > '9') return InvalidArgumentError("data endpoint's port is not a number");
  }
  return Status::Ok();
}

// Node-local workers a client key may have registered at once: this many, and as many again for each live rank
// held under it (a node's cores for each training process; the first before its client has registered).
constexpr size_t kLocalWorkersPerRank = 64;

}  // namespace

Status CoordinatorImpl::CheckLocalWorker(const RegisterWorkerRequest& request, const Caller& caller) {
  if (request.local_group.empty()) {
    if (IsClientKey(caller.identity)) {
      return PermissionDeniedError("a client key registers node-local workers only (stoker-worker --local-dir)");
    }
    return Status::Ok();
  }
  STOKER_RETURN_IF_ERROR(CheckLocalGroup(request.local_group).WithContext("worker " + request.worker_id));
  if (request.data_endpoint.rfind("ipc:///", 0) != 0) {
    return InvalidArgumentError("worker " + request.worker_id + " is node-local but its data endpoint is not ipc://");
  }
  if (request.data_sealed || !request.data_public_key.empty()) {
    return InvalidArgumentError("worker " + request.worker_id + " is node-local: its ipc:// data port is unsealed");
  }
  return Status::Ok();
}

Status CoordinatorImpl::CheckNewWorkerLocked(const RegisterWorkerRequest& request, const Caller& caller) const {
  STOKER_RETURN_IF_ERROR(CheckLocalWorker(request, caller));
  const bool local = !request.local_group.empty();
  STOKER_RETURN_IF_ERROR(ValidDataEndpoint(request.data_endpoint, options_.ipc_data_endpoints || local)
                             .WithContext("worker " + request.worker_id));
  if (!caller.identity.empty() && !request.data_sealed && !local) {
    return InvalidArgumentError("worker " + request.worker_id +
                                " registers without a sealed data port (clients of this version cannot use it)");
  }
  if (request.data_sealed && !request.data_public_key.empty()) {
    return InvalidArgumentError("worker " + request.worker_id + " registers a sealed data port with a CURVE key");
  }
  STOKER_RETURN_IF_ERROR(CheckSessionSecret(request.session));
  auto it = workers_.find(request.worker_id);
  if (it != workers_.end()) {
    const WorkerRuntime& w = it->second;
    if (w.identity != caller.identity) {
      return PermissionDeniedError("worker id " + request.worker_id + " is registered under another key");
    }
    // A live id is its registrant's process's: every pod of the role holds the same key, and /state lists the ids.
    // The registrant retrying has the secret; a restarted process registers once the old one is counted lost. An
    // id bound to no secret (an older worker's, or one from an older journal) is never bound while it lives: a
    // registration with a secret is then another process, which must not take it over.
    if (w.session_check.empty() ? !request.session.empty() : !SessionMatches(w.session_check, request.session)) {
      return AlreadyExistsError("worker id " + request.worker_id + " is registered by another process and not "
                                "lost; it can be registered again once it is (silent for the lease TTL)");
    }
    // A registered id keeps its data port until it is lost: clients follow the list to it, so a port that changed
    // under a live id would divert them (a stolen worker key re-registering the real workers' ids, which /state
    // lists, with its own endpoint). A worker elsewhere is another worker, under another id, or this one once the
    // coordinator has counted it lost (silent for the lease TTL). A restarted worker on the same port is the same.
    if (w.data_endpoint != request.data_endpoint || w.data_sealed != request.data_sealed ||
        w.data_public_key != request.data_public_key || w.local_group != request.local_group) {
      return AlreadyExistsError("worker id " + request.worker_id + " is registered at another data port and not "
                                "lost; a worker elsewhere registers under another id");
    }
    return Status::Ok();
  }
  // Node-local workers have a registry of their own size (a trainer key that fills it never keeps the pool's
  // workers out), and a client key at most kLocalWorkersPerRank per live rank it holds, and that many more.
  const size_t registered = std::count_if(workers_.begin(), workers_.end(), [&](const auto& entry) {
    return entry.second.local_group.empty() != local;
  });
  if (registered >= options_.max_registered_workers) {
    return ResourceExhaustedError("the coordinator has " + std::to_string(registered) + (local ? " node-local" : "") +
                                  " workers registered, its limit (--max-registered-workers)");
  }
  if (local && IsClientKey(caller.identity)) {
    const size_t held = std::count_if(workers_.begin(), workers_.end(), [&](const auto& entry) {
      return !entry.second.local_group.empty() && entry.second.identity == caller.identity;
    });
    if (held >= kLocalWorkersPerRank * (1 + LiveRanksHeldLocked(caller.identity))) {
      return ResourceExhaustedError("the key " + caller.identity + " has " + std::to_string(held) +
                                    " node-local workers registered: at most " +
                                    std::to_string(kLocalWorkersPerRank) + " per rank it holds, and as many more");
    }
  }
  return Status::Ok();
}

// A token bucket per key: a stolen key registering made-up workers gets them at the pool's own pace, never a
// registry's worth at once. A registration of an id already registered (a heartbeat's worker coming back, a retry)
// spends nothing.
Status CoordinatorImpl::SpendRegistrationLocked(const std::string& identity) {
  const double rate = options_.worker_registrations_per_second;
  if (rate == 0) return Status::Ok();
  const TimePoint now = clock_.Now();
  RegistrationBudget& b =
      registration_budget_.try_emplace(identity, RegistrationBudget{Allowance{4 * rate, now}}).first->second;
  if (b.left.Accrue(rate, now, 4) >= 1) {
    b.left.amount -= 1;
    b.refused = false;
    return Status::Ok();
  }
  if (!std::exchange(b.refused, true)) {
    STOKER_LOG(kWarning) << "the key " << (identity.empty() ? std::string("(none: --insecure)") : identity)
                         << " registers new workers faster than " << options_.worker_registrations_per_second
                         << " a second (--max-worker-registrations-per-second): they are asked to try again";
  }
  return ResourceExhaustedError("this key registers new workers faster than " +
                                std::to_string(options_.worker_registrations_per_second) +
                                " a second (--max-worker-registrations-per-second): ask again later");
}

StatusOr<RegisterWorkerResponse> CoordinatorImpl::RegisterWorker(const RegisterWorkerRequest& request,
                                                                 const Caller& caller) {
  MutexLock lock(mu_);
  if (Status allowed = CheckNewWorkerLocked(request, caller); !allowed.ok()) {
    auto live = workers_.find(request.worker_id);
    if (allowed.code() == StatusCode::kAlreadyExists && !std::exchange(live->second.move_refused, true)) {
      STOKER_LOG(kWarning) << "refused a registration of worker id " << request.worker_id << " at "
                           << request.data_endpoint << ": it is registered at " << live->second.data_endpoint
                           << (SessionMatches(live->second.session_check, request.session) ? "" : " by another process")
                           << " and not lost (further refusals for this id are only counted)";
    }
    return allowed;
  }
  if (workers_.count(request.worker_id) == 0) STOKER_RETURN_IF_ERROR(SpendRegistrationLocked(caller.identity));
  auto [it, inserted] = workers_.try_emplace(request.worker_id);
  WorkerRuntime& w = it->second;
  if (w.joined == 0) w.joined = ++workers_joined_;
  const uint32_t threads = std::max<uint32_t>(1, request.threads);
  // A registered id's data port, sealing, key and session are the ones it registered with (CheckNewWorkerLocked).
  if (inserted) w.session_check = request.session.empty() ? std::string() : SessionCheck(request.session);
  if (inserted || w.threads != threads) {
    ++membership_version_;
    // A node-local worker is not journaled: its group is a secret the journal does not keep, and after a restart it
    // registers again (with it) rather than come back as a pool worker whose ipc:// socket nobody can reach.
    if (request.local_group.empty()) {
      ApplyLocked(WorkerJoined{request.worker_id, request.data_endpoint, threads, request.data_public_key,
                               caller.identity, request.data_sealed, w.session_check});
    }
  }
  w.data_sealed = request.data_sealed;
  w.data_endpoint = request.data_endpoint;
  w.threads = threads;
  w.version = request.version.substr(0, 64);
  w.data_public_key = request.data_public_key;
  w.identity = caller.identity;
  w.local_group = request.local_group;
  w.last_heard = clock_.Now();
  if (inserted) {
    STOKER_LOG(kInfo) << "worker " << request.worker_id << " joined at " << request.data_endpoint << " ("
                      << w.threads << " threads" << (w.local_group.empty() ? "" : ", node-local") << ")";
  }
  RegisterWorkerResponse response{static_cast<uint32_t>(ToMillis(options_.heartbeat_interval)),
                                  static_cast<uint32_t>(ToMillis(options_.lease_ttl))};
  if (request.data_sealed && !options_.data_ticket_master.empty()) {
    response.data_ticket_key = WorkerTicketKey(options_.data_ticket_master, request.worker_id, w.session_check);
  }
  return response;
}

StatusOr<CoordinatorImpl::WorkerRuntime*> CoordinatorImpl::CallingWorkerLocked(const std::string& worker_id,
                                                                                const std::string& session,
                                                                                const Caller& caller) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {  // whatever the key: a node-local worker with its client's key registers again too
    return FailedPreconditionError("worker " + worker_id + " is not registered (coordinator restarted or it timed "
                                   "out): register again");
  }
  WorkerRuntime& w = it->second;
  if (w.identity != caller.identity) {
    return PermissionDeniedError("worker " + worker_id + " is registered under another key");
  }
  STOKER_RETURN_IF_ERROR(CheckSessionSecret(session));
  if (!SessionMatches(w.session_check, session)) {
    ++stats_.worker_session_refused;
    if (!std::exchange(w.session_refused, true)) {
      STOKER_LOG(kWarning) << "refused a request for worker " << worker_id << " from another process of its key "
                           << (caller.identity.empty() ? std::string("(none: --insecure)") : caller.identity)
                           << " (further refusals for this id are only counted)";
    }
    return PermissionDeniedError("worker " + worker_id + " is registered by another process");
  }
  return &w;
}

StatusOr<WorkerHeartbeatResponse> CoordinatorImpl::WorkerHeartbeat(const WorkerHeartbeatRequest& request,
                                                                   const Caller& caller) {
  MutexLock lock(mu_);
  STOKER_ASSIGN_OR_RETURN(WorkerRuntime * w, CallingWorkerLocked(request.worker_id, request.session, caller));
  const TimePoint now = clock_.Now();
  w->last_heard = now;
  if (request.draining && !w->draining) STOKER_LOG(kInfo) << "worker " << request.worker_id << " is draining";
  w->draining = request.draining;
  capacity_.Worker(request.worker_id, w->threads, request.busy_seconds, request.samples_made, now,
                   !w->local_group.empty(), w->local_job);
  WorkerHeartbeatResponse response;
  for (const LeaseRef& ref : request.leases) {
    JobRuntime* job = FindJobLocked(ref.job);
    ActiveLease* lease = nullptr;
    if (job != nullptr && ref.rank < job->ranks.size()) {
      auto& active = job->ranks[ref.rank].active;
      auto it = active.find(ref.unit);
      if (it != active.end() && it->second.attempt == ref.attempt && it->second.worker_id == request.worker_id) {
        lease = &it->second;
      }
    }
    if (lease == nullptr && AdoptLocked(ref, request.worker_id, now)) continue;
    if (lease == nullptr) {
      response.revoked.push_back(ref);  // re-leased elsewhere, committed, or from a reset session
    } else if (!lease->sent) {
      lease->expiry = now + options_.lease_ttl;
    }
  }
  return response;
}

// After a restart: a lease handed out before it, still being worked on. Keep it rather than redo it.
bool CoordinatorImpl::AdoptLocked(const LeaseRef& ref, const std::string& worker_id, TimePoint now) {
  JobRuntime* job = FindJobLocked(ref.job);
  // A node-local worker's leases are not adopted: it was not journaled, and a key that registered one now could
  // name any job's units (its units go back and are leased again, to it first if its client is back).
  if (IsLocalLocked(worker_id)) return false;
  if (!reconciling_ || job == nullptr || ref.rank >= job->ranks.size() || ref.unit >= job->plan.total_units() ||
      job->reported_workers.count(worker_id) != 0) {
    return false;
  }
  RankRuntime& r = job->ranks[ref.rank];
  // An attempt below the job's floor was leased for the shape it had before a checkpoint re-planned it.
  if (r.active.count(ref.unit) != 0 || ref.attempt >= r.next_attempt || ref.attempt < job->record->attempts_floor ||
      job->plan.UnitEnd(ref.unit) <= ViewLocked(*job, ref.rank).received) {
    return false;
  }
  ActiveLease lease{ref.attempt, worker_id, now + options_.lease_ttl, false, {}, job->plan.Unit(ref.unit).count,
                    JobTeamLocked(*job)};
  lease.no_pace = true;  // granted before the restart: when, nobody knows
  HoldLocked(r, ref.unit, std::move(lease));
  r.pending.erase(ref.unit);
  ++stats_.leases_adopted;
  return true;
}

void CoordinatorImpl::RemoveWorkerLocked(const std::string& worker_id, uint64_t* counter) {
  // Forget the worker first, so the parked requests served below can never be its own.
  const bool journaled = !IsLocalLocked(worker_id);
  workers_.erase(worker_id);
  parked_at_.erase(worker_id);
  capacity_.ForgetWorker(worker_id);
  ++membership_version_;
  if (journaled) ApplyLocked(WorkerLeft{worker_id});
  for (auto& [name, job] : jobs_) {
    job.reported_workers.erase(worker_id);
    job.delivery.erase(worker_id);
    for (uint32_t rank = 0; rank < job.ranks.size(); ++rank) {
      RankRuntime& r = job.ranks[rank];
      std::vector<uint64_t> lost;
      for (auto& [unit, lease] : r.active) {
        if (lease.worker_id != worker_id) continue;
        // Units it already sent wait for the client's ack (or the ack timeout), held by no worker: a process that
        // registers the id later is another, and reports nothing on them. The rest are redone elsewhere.
        if (lease.sent) {
          lease.worker_id.clear();
        } else {
          lost.push_back(unit);
        }
      }
      for (uint64_t unit : lost) ReleaseLocked(r, unit, counter);
      // Its requests waiting for work are answered now, not at their deadline: the sweep below looks only at
      // workers with room, and a worker of the same id registered again must not be leased on them.
      AnswerParkedFromLocked(r, worker_id);
    }
  }
  ServeAllJobsLocked();
}

// A client connects to the first ClientOptions::max_workers workers of this list. Workers that have delivered come
// first, then the rest in the order they joined: a key holder registering many made-up workers (whatever their ids)
// cannot push the working ones off the end of a client's list.
std::vector<WorkerInfo> CoordinatorImpl::WorkerListLocked(const std::string& client_identity,
                                                          const std::string& local_group) const {
  std::vector<const std::pair<const std::string, WorkerRuntime>*> order;
  order.reserve(workers_.size());
  for (const auto& entry : workers_) {
    // Another node's local workers are no use to this client (their sockets are on that node) and none of its
    // business; a session without a group is listed none.
    if (!entry.second.local_group.empty() && (local_group.empty() || entry.second.local_group != local_group)) continue;
    order.push_back(&entry);
  }
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    if (a->second.delivered != b->second.delivered) return a->second.delivered;
    return a->second.joined < b->second.joined;
  });
  std::vector<WorkerInfo> list;
  for (const auto* entry : order) {
    const std::string& id = entry->first;
    const WorkerRuntime& w = entry->second;
    std::string ticket, seal_key;
    if (w.data_sealed && w.local_group.empty() && !options_.data_ticket_master.empty() && !client_identity.empty()) {
      const std::string worker_key = WorkerTicketKey(options_.data_ticket_master, id, w.session_check);
      ticket = DataTicket(worker_key, client_identity);
      seal_key = DataSealKey(worker_key, client_identity);
    }
    list.push_back({id, w.data_endpoint, w.data_public_key, std::move(ticket), std::move(seal_key)});
  }
  return list;
}

Status CoordinatorImpl::CheckLocalGroup(const std::string& group) {
  if (group.empty() || IsLocalGroup(group)) return Status::Ok();
  return InvalidArgumentError("a local group is 32 lowercase hex digits (base/local_group.h)");
}

bool CoordinatorImpl::IsClientKey(const std::string& identity) {
  const std::optional<PeerIdentity> who = ParseIdentity(identity);
  return who && who->role == Role::kClient;
}

size_t CoordinatorImpl::LiveRanksHeldLocked(const std::string& identity) const {
  size_t held = 0;
  for (const auto& [name, job] : jobs_) {
    for (uint32_t rank = 0; rank < job.ranks.size(); ++rank) {
      held += job.ranks[rank].session_live && ViewLocked(job, rank).holder == identity;
    }
  }
  return held;
}

bool CoordinatorImpl::IsLocalLocked(const std::string& worker_id) const {
  auto it = workers_.find(worker_id);
  return it != workers_.end() && !it->second.local_group.empty();
}

// The client's own check found the batch a lie (coordinator/impl.h): its identity is the session's, so a key can
// only keep workers from the jobs it holds ranks of. Its units already leased to the worker go back at once, sent or
// not (the client dropped what came), and its parked requests for the job are answered empty.
void CoordinatorImpl::ReportWorkerLocked(const std::string& job_name, JobRuntime& job, const std::string& worker_id,
                                         const std::string& reporter) {
  if (workers_.count(worker_id) == 0 || !job.reported_workers.insert(worker_id).second) return;
  ++stats_.workers_reported;
  STOKER_LOG(kWarning) << "client " << reporter << " of job " << job_name << " reported worker " << worker_id
                       << " for batches that are not the plan's: the job leases it nothing more";
  HandBackLocked(job, worker_id, /*unsent_only=*/false, &stats_.releases.reported);
  ServeAllJobsLocked();
}

void CoordinatorImpl::HandBackLocked(JobRuntime& job, const std::string& worker_id, bool unsent_only,
                                     uint64_t* counter) {
  for (RankRuntime& r : job.ranks) {
    std::vector<uint64_t> held;
    for (const auto& [unit, lease] : r.active) {
      if (lease.worker_id == worker_id && !(unsent_only && lease.sent)) held.push_back(unit);
    }
    for (uint64_t unit : held) ReleaseLocked(r, unit, counter);
    AnswerParkedFromLocked(r, worker_id);
  }
}

Status CoordinatorImpl::MayServeLocked(const WorkerRuntime& w, const std::string& worker_id, const JobRuntime& job,
                                       uint32_t rank) const {
  if (job.reported_workers.count(worker_id) != 0) {
    return PermissionDeniedError("worker " + worker_id + " was reported by a client of this job for batches that "
                                 "were not the plan's: it serves this job no more");
  }
  if (BenchedLocked(job, worker_id, clock_.Now())) {
    return PermissionDeniedError("worker " + worker_id + " held units of this job it did not deliver while other "
                                 "workers did: it is benched for the job for a while");
  }
  if (w.local_group.empty()) return Status::Ok();
  const RankRuntime& r = job.ranks[rank];
  if (r.session_live && r.local_group != w.local_group) {
    return PermissionDeniedError("worker " + worker_id + " is node-local to another client: it serves only its own");
  }
  if (IsClientKey(w.identity) && ViewLocked(job, rank).holder != w.identity) {
    return PermissionDeniedError("worker " + worker_id + " registered under a client key serves only that key's ranks");
  }
  return Status::Ok();
}

StatusOr<JobSpec> CoordinatorImpl::GetJob(const std::string& name, const Caller& caller) {
  MutexLock lock(mu_);
  const JobRecord* record = state_.FindJob(name);
  if (record == nullptr) return NotFoundError("unknown job '" + name + "'");
  if (IsClientKey(caller.identity) &&
      std::none_of(record->ranks.begin(), record->ranks.end(),
                   [&](const RankRecord& r) { return r.holder == caller.identity; })) {
    return PermissionDeniedError("a client key gets only the spec of a job it holds a rank of");
  }
  return record->spec;
}

Status CoordinatorImpl::Deregister(const DeregisterRequest& request, const Caller& caller) {
  MutexLock lock(mu_);
  if (workers_.count(request.sender_id) != 0) {
    STOKER_RETURN_IF_ERROR(CallingWorkerLocked(request.sender_id, request.session, caller).status());
    STOKER_LOG(kInfo) << "worker " << request.sender_id << " left";
    RemoveWorkerLocked(request.sender_id, &stats_.releases.drain);
    return Status::Ok();
  }
  JobRuntime* job = FindJobLocked(request.job);
  if (job != nullptr && request.rank < job->ranks.size()) {
    RankRuntime& r = job->ranks[request.rank];
    const RankView view = ViewLocked(*job, request.rank);
    if (r.session_live && view.client_id == request.sender_id) {
      if (view.holder != caller.identity || !SessionMatches(view.session_check, request.session)) {
        return PermissionDeniedError("rank " + std::to_string(request.rank) + " of job '" + request.job +
                                     "' is held under another key or by another session");
      }
      r.session_live = false;
      AnswerParkedEmptyLocked(r, false);
      STOKER_LOG(kInfo) << "client " << request.sender_id << " released rank " << request.rank << " of job "
                        << request.job;
      return Status::Ok();
    }
  }
  return NotFoundError(request.sender_id + " holds nothing to deregister");
}

}  // namespace stoker::coordinator
