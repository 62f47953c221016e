// ReplyCache: the coordinator's recent lease replies per sender, so that a retried lease request (its reply was
// lost) is answered with what the first one got instead of being applied twice. Keyed by "<identity>/<sender id>";
// bounded three ways, because admitted peers choose the senders and the replies' sizes: replies per sender, senders,
// and bytes over all of them (the least recently used senders go first).
//
// Thread safety: none; it belongs to the service's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>

#include "stoker/clock.h"

namespace stoker::coordinator {

class ReplyCache {
 public:
  struct Limits {
    size_t replies_per_sender = 8;
    size_t max_senders = 4096;
    size_t max_bytes = size_t{64} << 20;  // encoded replies over all senders
  };
  explicit ReplyCache(const Limits& limits) : limits_(limits) {}

  // The reply `sender` got for `request_id`, if it is still held (the sender counts as used at `now`).
  const std::string* Find(const std::string& sender, uint64_t request_id, TimePoint now);
  // Keeps `reply`, making room by dropping the least recently used senders. A reply larger than max_bytes alone is
  // not kept (a retry of it is applied again, as it would be after the cache dropped it).
  void Remember(const std::string& sender, uint64_t request_id, std::string reply, TimePoint now);
  // Forgets senders not used for `idle` (a restarted worker has a new id).
  void ForgetIdle(TimePoint now, Duration idle);

  size_t bytes() const { return bytes_; }
  size_t senders() const { return senders_.size(); }
  // Senders dropped to stay under max_senders or max_bytes.
  uint64_t evictions() const { return evictions_; }

 private:
  struct Sender {
    std::deque<std::pair<uint64_t, std::string>> replies;  // oldest first
    TimePoint last_used;
    size_t bytes = 0;
  };
  void EvictLeastRecentlyUsed(const std::string& keep);
  void Erase(std::unordered_map<std::string, Sender>::iterator it);

  const Limits limits_;
  std::unordered_map<std::string, Sender> senders_;
  size_t bytes_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace stoker::coordinator
