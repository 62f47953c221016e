// The control plane's socket on the peers' side: a DEALER to the coordinator, configured, and one frame sent or
// received at a time without blocking, failures counted. The requests in flight and their deadlines are the
// peers' Impls' (RequestTracker in WorkerImpl and ClientImpl), so that their decisions are tested without sockets.
//
// Thread safety: none; a socket belongs to its peer's I/O thread.
#pragma once

#include <cstdint>
#include <optional>
#include <zmq.hpp>

#include "wire/control_messages.h"
#include "wire/transport_errors.h"

namespace stoker {

// Sends one encoded request frame without blocking; a failure is counted (its deadline brings the request back to
// whoever sent it).
void SendControlFrame(zmq::socket_t& socket, uint64_t request_id, const RequestBody& body, TransportErrors& errors);

// Receives the next reply frame without blocking: nullopt when none is waiting (or the receive failed: counted).
std::optional<zmq::message_t> ReceiveControlFrame(zmq::socket_t& socket, TransportErrors& errors);

// Configures a DEALER to the coordinator: control messages are small (1 MiB cap).
void ConfigureControlSocket(zmq::socket_t& socket);

}  // namespace stoker
