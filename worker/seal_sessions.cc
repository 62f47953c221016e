// SealSessions (seal_sessions.h): a session per data connection, made from the client's offer and the worker's.
#include "worker/seal_sessions.h"

#include <algorithm>

#include "auth/data_tickets.h"

namespace stoker::worker {

SealSessions::SealSessions(std::string worker_id, size_t max_sessions)
    : worker_id_(std::move(worker_id)), max_sessions_(std::max<size_t>(max_sessions, 1)) {}

void SealSessions::SetTicketKey(std::string key) { ticket_key_ = std::move(key); }

StatusOr<SealWelcome> SealSessions::Offer(const std::string& peer, const std::string& identity,
                                         const SealHello& hello) {
  if (ticket_key_.empty() || identity.empty()) {
    CountRefusal("seal_bad_offer");
    return FailedPreconditionError("this worker cannot seal yet (not registered, or the connection has no identity)");
  }
  SealOffer own = SealOffer::Make();
  SealTranscript t{identity, worker_id_, hello.random, hello.public_key, own.random(), own.public_key()};
  const std::string pair_key = DataSealKey(ticket_key_, identity);
  auto session = SealSession::Derive(pair_key, t, own, SealDirection::kWorkerToClient);
  if (!session.ok()) {
    CountRefusal("seal_bad_offer");
    return session.status();
  }
  by_peer_.erase(peer);  // a new offer on a connection replaces its session
  if (by_peer_.size() >= max_sessions_) EvictOne();
  by_peer_[peer] = Entry{identity, std::move(*session), ReplayWindow(), ++made_};
  return SealWelcome{own.random(), own.public_key()};
}

// Only when the table is full (a flood, or far more ranks than a worker serves): two passes over it.
void SealSessions::EvictOne() {
  std::map<std::string, size_t> held;
  for (const auto& [peer, entry] : by_peer_) ++held[entry.identity];
  const std::string& most =
      std::max_element(held.begin(), held.end(), [](const auto& a, const auto& b) { return a.second < b.second; })
          ->first;
  auto oldest = by_peer_.end();
  for (auto it = by_peer_.begin(); it != by_peer_.end(); ++it) {
    if (it->second.identity == most && (oldest == by_peer_.end() || it->second.made < oldest->second.made)) {
      oldest = it;
    }
  }
  by_peer_.erase(oldest);
  CountRefusal("seal_evicted");
}

size_t SealSessions::size_of(const std::string& identity) const {
  return static_cast<size_t>(std::count_if(by_peer_.begin(), by_peer_.end(),
                                           [&](const auto& e) { return e.second.identity == identity; }));
}

Status SealSessions::CheckCredit(const std::string& peer, const std::string& identity,
                                 std::span<const uint8_t> credit, std::span<const uint8_t> trailer,
                                 std::string* reason) {
  auto refuse = [&](const char* why, Status status) {
    *reason = why;
    CountRefusal(why);
    return status;
  };
  auto it = by_peer_.find(peer);
  if (it == by_peer_.end() || it->second.identity != identity) {
    return refuse("seal_no_session", FailedPreconditionError("no sealed session"));
  }
  auto decoded = DecodeSealTrailer(trailer, 1);
  if (!decoded.ok()) return refuse("seal_bad_trailer", decoded.status());
  const std::span<const uint8_t> associated[] = {credit};
  Status opened = it->second.session->Open(decoded->first_counter, associated, {}, {}, decoded->tags[0]);
  if (!opened.ok()) return refuse("seal_bad_tag", opened);
  if (!it->second.credits.Accept(decoded->first_counter)) {
    return refuse("seal_replayed", InvalidArgumentError("a credit's counter was used before"));
  }
  return Status::Ok();
}

std::shared_ptr<SealSession> SealSessions::Find(const std::string& peer, const std::string& identity) const {
  auto it = by_peer_.find(peer);
  return it == by_peer_.end() || it->second.identity != identity ? nullptr : it->second.session;
}

void SealSessions::Forget(const std::string& peer) { by_peer_.erase(peer); }

}  // namespace stoker::worker
