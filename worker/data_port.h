// DataPort: the worker's data socket (the ROUTER clients connect to) and what guards it. With CURVE on (every
// secure deployment) the port is a ZeroMQ PLAIN server whose ZAP handler admits a client only with the data ticket
// the coordinator issued to its identity (auth/data_tickets.h), and every connection is sealed (auth/seal.h): the
// client's first message is a seal offer, answered here, and its credits must carry a tag under the connection's
// keys (worker/seal_sessions.h). Batches are prepared, sealed on a pipeline thread and sent through the
// BatchSender. With CURVE off (--insecure) the port is open and nothing is sealed.
//
// Thread safety: the worker's I/O thread only (the ZAP handler answers on its own thread).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <zmq.hpp>

#include "auth/curve.h"
#include "auth/keys.h"
#include "wire/data_messages.h"
#include "worker/batch_sender.h"
#include "worker/seal_sessions.h"

namespace stoker::worker {

class DataPort {
 public:
  DataPort(zmq::context_t& context, std::shared_ptr<BatchBufferPool> pool, const std::string& worker_id,
           std::shared_ptr<prometheus::Histogram> collate_seconds,
           std::shared_ptr<prometheus::Histogram> send_seconds, TransportErrors& errors);

  // Before Bind: the ZAP handler and the PLAIN server (CURVE on), or nothing (--insecure).
  Status Secure(zmq::context_t& context, const Security& security);
  StatusOr<std::string> Bind(const std::string& listen);
  // The key tickets are checked and seal keys derived with, from the registration reply.
  void SetTicketKey(const std::string& key);

  bool sealed() const { return sealed_; }
  zmq::socket_t& socket() { return socket_; }
  BatchSender& sender() { return sender_; }

  // Everything waiting on the socket: seal offers answered, credits that pass handed to `on_credit` with the
  // connection's routing id and authenticated identity. The rest is counted (bad_frames, seal refusals) and
  // dropped; a credit of another protocol version, or one on a connection without a session, is answered with a
  // DataError so the client learns why nothing comes (and, for the latter, offers again).
  using OnCredit = std::function<void(const std::string& peer, const std::string& identity, const Credit&)>;
  void Drain(const OnCredit& on_credit);
  void SendError(const std::string& peer, const DataError& error);

  // What a finished batch for `identity` routed to `peer` needs next: sending, sealing first (with *seal_with, on a
  // pipeline thread), or nothing, because its connection has no session of that identity or has a new one since it
  // was sealed (the batch is then undeliverable, and its unit goes back).
  enum class Step { kSend, kSeal, kUndeliverable };
  Step Next(BatchBuild& build, const std::string& peer, const std::string& identity, uint64_t max_frame_bytes,
            std::shared_ptr<SealSession>* seal_with);
  // Sends it; false if the connection is gone (its session is forgotten).
  bool Send(const std::string& peer, BatchBuild& build);

  uint64_t bad_frames() const { return bad_frames_; }
  const std::map<std::string, uint64_t>& seal_refusals() const { return sessions_.refused(); }
  size_t seal_sessions() const { return sessions_.size(); }
  const ZapHandler* zap() const { return zap_.get(); }

 private:
  void Handle(const std::string& peer, zmq::message_t frame, const zmq::message_t* trailer, const OnCredit& on_credit);

  zmq::socket_t socket_;
  BatchSender sender_;
  SealSessions sessions_;
  std::unique_ptr<ZapHandler> zap_;  // admits clients by ticket (null without CURVE)
  TransportErrors& errors_;
  bool sealed_ = false;
  uint64_t bad_frames_ = 0;
};

}  // namespace stoker::worker
