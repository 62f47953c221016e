// The requests an Impl asked its adapter to send (the Outbox::requests of WorkerImpl and ClientImpl), picked out by
// type, as the unit tests that play the coordinator answer them.
//
// Thread safety: none; a test's own values.
#pragma once

#include <cstddef>
#include <optional>
#include <variant>
#include <vector>

#include "wire/request_tracker.h"

namespace stoker::testing {

// Removes every request of type T from `requests` and returns the latest of them (nullopt: none was sent). The
// others stay, in order, for later.
template <typename T>
std::optional<RequestTracker::Pending> TakeLatest(std::vector<RequestTracker::Pending>& requests) {
  std::optional<RequestTracker::Pending> latest;
  std::vector<RequestTracker::Pending> kept;
  for (RequestTracker::Pending& r : requests) {
    if (std::holds_alternative<T>(r.body)) {
      latest = std::move(r);
    } else {
      kept.push_back(std::move(r));
    }
  }
  requests = std::move(kept);
  return latest;
}

template <typename T>
size_t CountOf(const std::vector<RequestTracker::Pending>& requests) {
  size_t n = 0;
  for (const RequestTracker::Pending& r : requests) n += std::holds_alternative<T>(r.body) ? 1 : 0;
  return n;
}

}  // namespace stoker::testing
