// ControlChannel: a peer's connection to the coordinator — one DEALER socket, request ids, and the requests still
// waiting for a reply, each with a deadline. Workers and clients both talk to the coordinator through one.
//
// Thread safety: none; it belongs to the peer's I/O thread, like its socket.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/control_codec.h"
#include "common/control_messages.h"
#include "common/status.h"

namespace stoker {

class ControlChannel {
 public:
  struct Pending {
    uint64_t id = 0;
    RequestBody body;
    TimePoint sent;
    TimePoint deadline;
  };

  ControlChannel(zmq::context_t& context, const Clock& clock, Duration timeout);

  Status Connect(const std::string& endpoint);
  zmq::socket_t& socket() { return socket_; }

  // Sends without blocking and remembers the request until its reply or its deadline. Returns its id.
  uint64_t Send(RequestBody body);
  // Receives every reply waiting; calls handle(request, reply) for each that answers a pending request (replies to
  // requests already given up on are dropped). Malformed replies are logged and dropped.
  void Receive(const std::function<void(Pending&, DecodedReply&)>& handle);
  // Removes and returns the requests whose deadline has passed.
  std::vector<Pending> TakeExpired();
  bool IsPending(uint64_t id) const { return pending_.count(id) != 0; }

 private:
  const Clock& clock_;
  const Duration timeout_;
  zmq::socket_t socket_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Pending> pending_;
};

}  // namespace stoker
