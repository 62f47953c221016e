// Hand-made peers for the security tests: a ZeroMQ socket that authenticates with one of a test cluster's keys (or
// none), to speak the published protocol to real servers the way an attacker on the pod network could.
#pragma once

#include <optional>
#include <string>
#include <zmq.hpp>

#include "auth/curve.h"
#include "base/env.h"
#include "auth/keys.h"
#include "stoker/status.h"

namespace stoker::testing {

// The key pair in a key file `stoker keygen` wrote.
inline StatusOr<KeyPair> ReadKey(const std::string& path) { return ReadKeyFile(path); }

// A DEALER connected to `endpoint`: a CURVE client with `own` toward the server key `server_public`, or with no
// CURVE at all when `own` is empty (such a peer is refused at the handshake by a CURVE server). A send gives up
// after two seconds: once a refused handshake has dropped the connection, a DEALER has no pipe to queue on until it
// reconnects, and a blocking send would wait for a peer that never accepts it (CI hung 600 s there).
inline zmq::socket_t Dealer(zmq::context_t& context, const std::string& endpoint, const std::optional<KeyPair>& own,
                            const std::string& server_public = "") {
  zmq::socket_t s(context, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndtimeo, 2000);
  if (own) MakeCurveClient(s, *own, server_public);
  s.connect(endpoint);
  return s;
}

// A DEALER to a worker's data port: ZeroMQ PLAIN as `identity` with `ticket` (tests/support/sealed_peer.h adds the
// seal handshake on top).
inline zmq::socket_t PlainDealer(zmq::context_t& context, const std::string& endpoint, const std::string& identity,
                                 const std::string& ticket) {
  zmq::socket_t s(context, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndtimeo, 2000);
  MakePlainClient(s, identity, ticket);
  s.connect(endpoint);
  return s;
}

// The first value of `"key": "..."` in a JSON text (good enough for /state's flat fields).
inline std::string JsonField(const std::string& json, const std::string& key) {
  const std::string open = "\"" + key + "\": \"";
  const size_t at = json.find(open);
  if (at == std::string::npos) return "";
  const size_t end = json.find('"', at + open.size());
  return json.substr(at + open.size(), end - at - open.size());
}

}  // namespace stoker::testing
