// RequestTracker (request_tracker.h): the requests still awaiting their reply, and when each is given up on.
#include "wire/request_tracker.h"

namespace stoker {

const RequestTracker::Pending& RequestTracker::Add(RequestBody body) {
  const uint64_t id = next_id_++;
  const TimePoint now = clock_.Now();
  return pending_[id] = Pending{id, std::move(body), now, now + timeout_};
}

std::optional<RequestTracker::Pending> RequestTracker::Answer(uint64_t id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return std::nullopt;
  Pending request = std::move(it->second);
  pending_.erase(it);
  return request;
}

std::vector<RequestTracker::Pending> RequestTracker::TakeExpired() {
  std::vector<Pending> expired;
  const TimePoint now = clock_.Now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now >= it->second.deadline) {
      expired.push_back(std::move(it->second));
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  return expired;
}

}  // namespace stoker
