// RequestTracker: a peer's requests to the coordinator that still await their reply — each with its id, its body,
// when it left and when it is given up on. It holds no socket: the worker's Impl keeps one and hands the requests
// it makes to its adapter to send (the client's ClientImpl likewise); the adapters send them through wire/control_channel.h.
//
// Thread safety: none; it belongs to one thread, like the socket its requests travel on.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "stoker/clock.h"
#include "wire/control_messages.h"

namespace stoker {

class RequestTracker {
 public:
  struct Pending {
    uint64_t id = 0;
    RequestBody body;
    TimePoint sent;
    TimePoint deadline;
  };

  RequestTracker(const Clock& clock, Duration timeout) : clock_(clock), timeout_(timeout) {}

  // Remembers a request leaving now, until its reply or its deadline. Returns it, with its fresh id.
  const Pending& Add(RequestBody body);
  // The request a reply answers, removed; nullopt if it is not pending (answered already, or given up on).
  std::optional<Pending> Answer(uint64_t id);
  // Removes and returns the requests whose deadline has passed.
  std::vector<Pending> TakeExpired();
  bool IsPending(uint64_t id) const { return pending_.count(id) != 0; }
  size_t size() const { return pending_.size(); }

 private:
  const Clock& clock_;
  const Duration timeout_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Pending> pending_;
};

}  // namespace stoker
