// Helpers at the edge between stoker and its transport libraries (ZeroMQ, Cap'n Proto): serialising a message
// into one frame, parsing an untrusted frame under explicit limits, configuring sockets, binding to an endpoint
// and finding out which port was bound, and peer ids.
//
// Cap'n Proto validates lazily: a malformed message throws kj::Exception when a bad field is read, not when it is
// parsed. Every read of an untrusted message therefore runs inside CatchWireErrors, which turns any exception into
// an InvalidArgument Status so it never crosses a thread or a socket.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <zmq.hpp>

#include "stoker/status.h"

namespace stoker {

// First segment of the builders for control messages and headers: most fit in it (1 KiB), bigger ones grow.
// (Cap'n Proto's default, 8 KiB, is allocated and zeroed for every message: a measurable share of the
// coordinator's CPU at tens of thousands of requests per second.)
constexpr unsigned kControlFirstSegmentWords = 128;

// The smallest payload frame a client may ask workers for (Credit.maxFrameBytes): smaller asks are refused by the
// client and raised to this by workers.
constexpr uint64_t kMinPayloadFrameBytes = 64 << 10;

// Serialises `message` into a single ZeroMQ frame (standard unpacked Cap'n Proto serialization), written straight
// into the frame's buffer.
zmq::message_t ToFrame(capnp::MessageBuilder& message);

// Reader limits for untrusted input (RELIABILITY.md, "Limits to set on untrusted input").
capnp::ReaderOptions ControlReaderOptions();               // control messages: 512 KiB, nesting 16
capnp::ReaderOptions BatchHeaderReaderOptions(uint32_t batch_size);  // sized to the job's batch

// A parsed frame. Owns the frame (or an aligned copy of it when ZeroMQ's buffer is not 8-byte aligned), so the
// reader stays valid as long as this object lives.
class ParsedFrame {
 public:
  // InvalidArgument if the frame is not a whole number of words or its segment table is malformed.
  static StatusOr<std::unique_ptr<ParsedFrame>> Parse(zmq::message_t frame, const capnp::ReaderOptions& options);

  template <typename T>
  typename T::Reader Root() {
    return reader_->getRoot<T>();
  }

 private:
  ParsedFrame() = default;
  zmq::message_t frame_;
  kj::Array<capnp::word> copy_;
  std::unique_ptr<capnp::FlatArrayMessageReader> reader_;
};

// Runs fn(); a kj::Exception or std::exception thrown inside becomes InvalidArgument("<what>: <description>").
template <typename Fn>
Status CatchWireErrors(const char* what, Fn&& fn) {
  try {
    return fn();
  } catch (const kj::Exception& e) {
    return InvalidArgumentError(std::string(what) + ": malformed message: " + e.getDescription().cStr());
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string(what) + ": " + e.what());
  }
}

struct SocketOptions {
  int64_t max_message_bytes = -1;  // ZMQ_MAXMSGSIZE: larger inbound messages drop the connection
  int linger_ms = 0;               // ZMQ_LINGER on close
  int send_hwm = 1000;
  int receive_hwm = 1000;
  bool router_mandatory = false;   // ROUTER: unroutable sends fail (EHOSTUNREACH) instead of vanishing
  bool router_handover = false;    // ROUTER: a reconnecting peer with the same routing id takes over
  int reconnect_ivl_ms = 100;      // first reconnect delay ...
  int reconnect_ivl_max_ms = 2000; // ... doubling up to this (backoff)
  int handshake_ivl_ms = 5000;     // ZMQ_HANDSHAKE_IVL: half-open connections are dropped after this
  int heartbeat_ivl_ms = 1000;     // ZMTP heartbeats detect dead TCP peers ...
  int heartbeat_timeout_ms = 5000; // ... within this
};
void ConfigureSocket(zmq::socket_t& socket, const SocketOptions& options);

// Binds `endpoint`; a port of 0 ("tcp://127.0.0.1:0") asks for an ephemeral one. Returns the endpoint actually
// bound, e.g. "tcp://127.0.0.1:43121". InvalidArgument / Unavailable with ZeroMQ's words on failure.
StatusOr<std::string> BindSocket(zmq::socket_t& socket, const std::string& endpoint);

// The endpoint peers should connect to: `bound` with a wildcard host (*, 0.0.0.0) replaced by advertise_host.
std::string AdvertisedEndpoint(const std::string& bound, const std::string& advertise_host);

// One zmq_poll of `items` for at most `timeout`. A poll interrupted by a signal (EINTR: SIGTERM asking a worker to
// drain, say) returns OK with nothing ready, so the caller's loop goes round and looks at the signal's flag; any
// other failure (a closed socket, a terminated context) is Unavailable with ZeroMQ's words.
Status PollOnce(std::span<zmq::pollitem_t> items, std::chrono::milliseconds timeout);

// A fresh peer id: the prefix, '-', and 16 random hex digits ("w-3f09a1c2b4d5e6f7").
std::string NewPeerId(const std::string& prefix);

}  // namespace stoker

#include "stoker/schema/common.capnp.h"

namespace stoker {
// Status <-> wire::Status (schema/common.capnp). Codes map one to one.
void ToWire(const Status& status, wire::Status::Builder out);
Status FromWire(wire::Status::Reader in);
}  // namespace stoker
