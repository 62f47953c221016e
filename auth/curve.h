// CURVE on ZeroMQ sockets, and the ZAP handler that decides who may connect (ZeroMQ RFC 26 and 27).
//
// The coordinator's control port is a CURVE server with its process's secret key; a client socket names the
// server's public key and presents its own key pair. Every handshake on a CURVE server of a context is put to that
// context's ZapHandler, which admits only the keys it was given (and of the roles it serves) and answers with the
// peer's identity "<role>:<name>". A worker's data port is a PLAIN server whose handler admits data tickets instead
// (auth/data_tickets.h), answering with the identity the ticket was issued to. libzmq attaches that identity to every
// message from the connection (the "User-Id" property, PeerIdentityOf): a server reads who sent a request from
// there, never from a field the sender wrote. Without a running handler libzmq would admit any key, so a server
// socket is only made CURVE after its process's handler is bound.
//
// Thread safety: the helpers configure a socket before its owner thread uses it; ZapHandler's methods may be
// called from any thread (it answers on its own).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "auth/keys.h"
#include "base/metrics.h"
#include "stoker/clock.h"
#include "stoker/status.h"
#include "base/sync.h"
#include "wire/transport_errors.h"

namespace stoker {

// Makes `socket` a CURVE server with this key pair (before it binds).
void MakeCurveServer(zmq::socket_t& socket, const std::string& public_z85, const std::string& secret_z85);
// Makes `socket` a CURVE client of the server whose public key is `server_public_z85` (before it connects).
void MakeCurveClient(zmq::socket_t& socket, const KeyPair& own, const std::string& server_public_z85);
// A worker's data port: ZeroMQ PLAIN, every handshake put to the ZAP handler, which admits a client only with its
// data ticket (auth/data_tickets.h). ZeroMQ encrypts nothing here: batches are sealed above it (auth/seal.h).
void MakePlainServer(zmq::socket_t& socket);
// Connects as `identity` with its `ticket` for that port.
void MakePlainClient(zmq::socket_t& socket, const std::string& identity, const std::string& ticket);

// The authenticated identity of the connection a message came on: "<role>:<name>", or "" without CURVE.
std::string PeerIdentityOf(zmq::message_t& message);

class ZapHandler {
 public:
  // Binds the context's ZAP endpoint and starts answering. `admitted`: the keys (of the roles this process serves)
  // a handshake may present. With `plain` (a worker's data port) PLAIN handshakes are admitted instead,
  // for clients presenting their data ticket, once SetTicketKey has given the key to check them with.
  static StatusOr<std::unique_ptr<ZapHandler>> Start(zmq::context_t& context, std::vector<TrustedKey> admitted,
                                                     bool plain = false);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  // The worker's ticket key, from its registration reply (plain only). Until it comes a PLAIN handshake waits for
  // it, within the handler's first kWaitForTicketKey: a client that dials a worker as it joins (the list reaches
  // clients as soon as the registration's reply leaves) is admitted a moment later, not refused (ZeroMQ never
  // retries a refused handshake). After that, a handshake without the key is refused at once. The window is shorter
  // than the sockets' handshake limit (SocketOptions::handshake_ivl_ms), which would drop a connection held longer.
  void SetTicketKey(std::string key);
  static constexpr Duration kWaitForTicketKey = Millis(4000);

  // Handshakes refused, by reason ("unknown_key", "mechanism", "bad_ticket", "no_ticket_key"), and admitted.
  std::map<std::string, uint64_t> Refused() const;
  // ZAP requests the handler could not receive or answer, by site ("zap_recv", "zap_reply"): logged once, counted.
  std::map<std::string, uint64_t> Errors() const { return errors_.Counts(); }
  uint64_t admitted() const { return admitted_.load(); }
  // Handshakes waiting for the ticket key now (0 or 1: the handler answers in turn).
  int waiting_for_key() const { return waiting_.load(); }

 private:
  ZapHandler(zmq::context_t& context, std::vector<TrustedKey> admitted, bool plain);
  void Serve();
  void Answer(std::vector<zmq::message_t>& request);
  // The client identity a PLAIN request's ticket proves, or "" with *reason set.
  std::string CheckTicket(const std::vector<zmq::message_t>& request, std::string* reason) const;

  zmq::socket_t socket_;
  std::map<std::string, TrustedKey> by_key_;  // public z85 -> key; fixed after Start
  const bool plain_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> admitted_{0};
  mutable std::atomic<int> waiting_{0};
  mutable Mutex mu_;
  std::map<std::string, uint64_t> refused_ STOKER_GUARDED_BY(mu_);
  std::string ticket_key_ STOKER_GUARDED_BY(mu_);
  mutable CondVar key_set_;  // SetTicketKey, or the handler stopping
  const std::chrono::steady_clock::time_point wait_for_key_until_ =
      std::chrono::steady_clock::now() + kWaitForTicketKey;
  TransportErrors errors_;
  std::thread thread_;
};

// stoker_<component>_handshakes_total{result="admitted"|"refused"|"error", reason}: the CURVE handshakes the
// process's ZAP handler decided, and the ZAP requests it failed to receive or answer (nothing without one: CURVE off).
void CollectHandshakes(const std::string& component, const ZapHandler* zap, MetricFamilies& out);

}  // namespace stoker
