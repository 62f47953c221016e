// ControlChannel: a client's connection to the coordinator — one DEALER socket and a RequestTracker of the requests
// still waiting for a reply, each with a deadline. (The worker keeps its tracker in its Impl and its socket in its
// adapter instead, so that its decisions can be tested without sockets.)
//
// Thread safety: none; it belongs to the peer's I/O thread, like its socket.
#pragma once

#include <functional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "stoker/clock.h"
#include "wire/control_codec.h"
#include "wire/control_messages.h"
#include "wire/request_tracker.h"
#include "stoker/status.h"
#include "wire/transport_errors.h"

namespace stoker {

class ControlChannel {
 public:
  using Pending = RequestTracker::Pending;

  // Failed sends and receives are counted in `errors` (sites "send_control", "recv_control").
  ControlChannel(zmq::context_t& context, const Clock& clock, Duration timeout, TransportErrors& errors);

  Status Connect(const std::string& endpoint);
  zmq::socket_t& socket() { return socket_; }

  // Sends without blocking and remembers the request until its reply or its deadline. Returns its id.
  uint64_t Send(RequestBody body);
  // Receives every reply waiting; calls handle(request, reply) for each that answers a pending request (replies to
  // requests already given up on are dropped). Malformed replies are logged and dropped.
  void Receive(const std::function<void(Pending&, DecodedReply&)>& handle);
  // Removes and returns the requests whose deadline has passed.
  std::vector<Pending> TakeExpired() { return tracker_.TakeExpired(); }
  bool IsPending(uint64_t id) const { return tracker_.IsPending(id); }

 private:
  zmq::socket_t socket_;
  RequestTracker tracker_;
  TransportErrors& errors_;
};

// Sends one encoded request frame without blocking; a failure is counted (its deadline brings the request back to
// whoever sent it). Shared by ControlChannel and the worker's adapter.
void SendControlFrame(zmq::socket_t& socket, uint64_t request_id, const RequestBody& body, TransportErrors& errors);

// Receives the next reply frame without blocking: nullopt when none is waiting (or the receive failed: counted).
std::optional<zmq::message_t> ReceiveControlFrame(zmq::socket_t& socket, TransportErrors& errors);

// Configures a DEALER to the coordinator: control messages are small (1 MiB cap).
void ConfigureControlSocket(zmq::socket_t& socket);

}  // namespace stoker
