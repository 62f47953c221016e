// SealSessions: a worker's sealed data connections (auth/seal.h), socket-free. A client's first message on a
// connection is its seal offer; the worker answers with its own and both derive the connection's keys from the
// pair's seal key (auth/data_tickets.h: from the ticket key the registration brought and the identity the
// connection authenticated as). After that the connection's credits must carry a tag under its keys, each counter
// once, and its batches are sealed with them. Sessions are per connection (the ROUTER's routing id), at most
// `max_sessions`. A full table evicts the oldest session of the identity holding the most (its client is told to
// offer again when it next credits), so a client that floods offers with a valid ticket evicts its own sessions,
// not other identities' (and ranks sharing one key, the chart's default, may hold the whole table). Refusals are
// counted by reason.
//
// Thread safety: the I/O thread only. The SealSession objects it hands out are thread-safe (pipeline threads seal
// with them).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "auth/seal.h"
#include "wire/data_messages.h"

namespace stoker::worker {

class SealSessions {
 public:
  SealSessions(std::string worker_id, size_t max_sessions);

  // The ticket key of the worker's registration: until it comes no session can be made (nor, for the same reason,
  // can any client pass the data port's handshake).
  void SetTicketKey(std::string key);

  // A client's offer on connection `peer`, which authenticated as `identity`: a new session for the connection
  // (replacing any it had) and the welcome to answer with. FailedPrecondition without a ticket key or identity;
  // InvalidArgument for an offer that gives no key.
  StatusOr<SealWelcome> Offer(const std::string& peer, const std::string& identity, const SealHello& hello);

  // A sealed credit from `peer`, which authenticated as `identity`: its frame's bytes and the trailer frame after
  // it. OK if the connection has a session of that identity, the tag holds and the counter is new; else the
  // refusal is counted and `*reason` names it ("seal_no_session", "seal_bad_trailer", "seal_bad_tag",
  // "seal_replayed").
  Status CheckCredit(const std::string& peer, const std::string& identity, std::span<const uint8_t> credit,
                     std::span<const uint8_t> trailer, std::string* reason);

  // The session batches for `identity` on connection `peer` are sealed with: null if the connection has none, or
  // one another identity made (a routing id taken over by another client must not get this one's batches).
  std::shared_ptr<SealSession> Find(const std::string& peer, const std::string& identity) const;
  // The connection is gone.
  void Forget(const std::string& peer);

  size_t size() const { return by_peer_.size(); }
  size_t size_of(const std::string& identity) const;  // the sessions `identity` holds (a scan: for tests)
  // Refusals by reason, cumulative (offers and credits).
  const std::map<std::string, uint64_t>& refused() const { return refused_; }
  void CountRefusal(const std::string& reason) { ++refused_[reason]; }

 private:
  struct Entry {
    std::string identity;  // who made the session: only its batches and credits use it
    std::shared_ptr<SealSession> session;
    ReplayWindow credits;
    uint64_t made = 0;  // order of making: the smallest is evicted first
  };

  // Evicts the oldest session of the identity holding the most (the table is full).
  void EvictOne();

  const std::string worker_id_;
  const size_t max_sessions_;
  std::string ticket_key_;
  std::map<std::string, Entry> by_peer_;
  uint64_t made_ = 0;
  std::map<std::string, uint64_t> refused_;
};

}  // namespace stoker::worker
