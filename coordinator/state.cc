// CoordinatorState (state.h): applying journalled updates to the durable state, and the snapshot that rebuilds it.
#include "coordinator/state.h"

#include <algorithm>

namespace stoker::coordinator {

RankRecord& CoordinatorState::Rank(const std::string& job, uint32_t rank) {
  auto it = jobs_.find(job);
  STOKER_CHECK(it != jobs_.end(), "update for unknown job " + job);
  STOKER_CHECK(rank < it->second.ranks.size(), "update for a rank out of range");
  return it->second.ranks[rank];
}

Status CoordinatorState::Check(const Update& update) const {
  return std::visit(
      [this](const auto& u) -> Status {
        using T = std::decay_t<decltype(u)>;
        if constexpr (std::is_same_v<T, JobCreated>) {
          if (jobs_.count(u.spec.name) != 0) return FailedPreconditionError("job '" + u.spec.name + "' created twice");
        } else if constexpr (std::is_same_v<T, RankSessionStarted> || std::is_same_v<T, RankProgress> ||
                             std::is_same_v<T, AttemptsReserved>) {
          auto it = jobs_.find(u.job);
          const std::string job = u.job.substr(0, 64);
          if (it == jobs_.end()) return FailedPreconditionError("an update for job '" + job + "', which nothing created");
          if (u.rank >= it->second.ranks.size()) {
            return FailedPreconditionError("an update for rank " + std::to_string(u.rank) + " of job '" + job +
                                           "', which has " + std::to_string(it->second.ranks.size()) + " ranks");
          }
        } else if constexpr (std::is_same_v<T, JobReshaped>) {
          const std::string job = u.spec.name.substr(0, 64);
          if (jobs_.count(u.spec.name) == 0) {
            return FailedPreconditionError("a shape change of job '" + job + "', which nothing created");
          }
          STOKER_RETURN_IF_ERROR(u.spec.Validate());
        }
        return Status::Ok();
      },
      update);
}

void CoordinatorState::Apply(const Update& update) {
  std::visit(
      [this](const auto& u) {
        using T = std::decay_t<decltype(u)>;
        if constexpr (std::is_same_v<T, JobCreated>) {
          STOKER_CHECK(jobs_.find(u.spec.name) == jobs_.end(), "job created twice: " + u.spec.name);
          JobRecord record;
          record.spec = u.spec;
          record.num_samples = u.num_samples;
          record.ranks.resize(u.spec.world_size);
          jobs_.emplace(u.spec.name, std::move(record));
        } else if constexpr (std::is_same_v<T, RankSessionStarted>) {
          RankRecord& r = Rank(u.job, u.rank);
          r.client_id = u.client_id;
          r.holder = u.holder;
          r.session_check = u.session_check;
          ++r.session;
          r.start_batch = u.start_batch;
          r.window = u.window;
          r.received = u.start_batch;
          r.consumed = u.start_batch;
        } else if constexpr (std::is_same_v<T, RankProgress>) {
          RankRecord& r = Rank(u.job, u.rank);
          r.received = std::max(r.received, u.received);
          r.consumed = std::max(r.consumed, u.consumed);
        } else if constexpr (std::is_same_v<T, AttemptsReserved>) {
          RankRecord& r = Rank(u.job, u.rank);
          r.attempts_reserved = std::max(r.attempts_reserved, u.up_to);
        } else if constexpr (std::is_same_v<T, WorkerJoined>) {
          workers_[u.worker_id] = u;
        } else if constexpr (std::is_same_v<T, WorkerLeft>) {
          workers_.erase(u.worker_id);
        } else if constexpr (std::is_same_v<T, JobRemoved>) {
          jobs_.erase(u.job);
        } else if constexpr (std::is_same_v<T, JobReshaped>) {
          auto it = jobs_.find(u.spec.name);
          STOKER_CHECK(it != jobs_.end(), "shape change of unknown job " + u.spec.name);
          JobRecord& record = it->second;
          record.spec = u.spec;
          record.shape_changes = u.shape_changes;
          record.attempts_floor = std::max(record.attempts_floor, u.attempts_floor);
          record.ranks.assign(u.spec.world_size, RankRecord{});
          for (RankRecord& r : record.ranks) r.attempts_reserved = u.attempts_floor;
        }
      },
      update);
}

std::vector<Update> CoordinatorState::Snapshot() const {
  std::vector<Update> out;
  for (const auto& [name, job] : jobs_) {
    out.push_back(JobCreated{job.spec, job.num_samples});
    // The shape change, so that a coordinator too old to know origins refuses the journal (the ranks' attempts
    // follow in their own records).
    if (job.shape_changes != 0) out.push_back(JobReshaped{job.spec, job.attempts_floor, job.shape_changes});
    for (uint32_t rank = 0; rank < job.ranks.size(); ++rank) {
      const RankRecord& r = job.ranks[rank];
      if (r.session == 0 && r.attempts_reserved == 0) continue;
      if (r.session > 0) {
        out.push_back(RankSessionStarted{name, rank, r.client_id, r.start_batch, r.window, r.holder, r.session_check});
      }
      out.push_back(RankProgress{name, rank, r.received, r.consumed});
      out.push_back(AttemptsReserved{name, rank, r.attempts_reserved});
    }
  }
  for (const auto& [id, w] : workers_) out.push_back(w);
  return out;
}

const JobRecord* CoordinatorState::FindJob(const std::string& name) const {
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : &it->second;
}

}  // namespace stoker::coordinator
