// ReplyCache (reply_cache.h). Eviction scans for the least recently used sender: it runs only when a cap is
// reached, over at most max_senders entries.
#include "coordinator/reply_cache.h"

namespace stoker::coordinator {

const std::string* ReplyCache::Find(const std::string& sender, uint64_t request_id, TimePoint now) {
  auto it = senders_.find(sender);
  if (it == senders_.end()) return nullptr;
  for (const auto& [id, reply] : it->second.replies) {
    if (id != request_id) continue;
    it->second.last_used = now;
    return &reply;
  }
  return nullptr;
}

void ReplyCache::Erase(std::unordered_map<std::string, Sender>::iterator it) {
  bytes_ -= it->second.bytes;
  senders_.erase(it);
}

void ReplyCache::EvictLeastRecentlyUsed(const std::string& keep) {
  auto oldest = senders_.end();
  for (auto it = senders_.begin(); it != senders_.end(); ++it) {
    if (it->first == keep) continue;
    if (oldest == senders_.end() || it->second.last_used < oldest->second.last_used) oldest = it;
  }
  if (oldest == senders_.end()) return;
  Erase(oldest);
  ++evictions_;
}

void ReplyCache::Remember(const std::string& sender, uint64_t request_id, std::string reply, TimePoint now) {
  const size_t size = reply.size() + sender.size();
  if (size > limits_.max_bytes) return;
  if (senders_.size() >= limits_.max_senders && senders_.count(sender) == 0) EvictLeastRecentlyUsed(sender);
  Sender& s = senders_[sender];
  s.replies.emplace_back(request_id, std::move(reply));
  s.bytes += size;
  bytes_ += size;
  s.last_used = now;
  auto drop_oldest = [&] {
    const size_t dropped = s.replies.front().second.size() + sender.size();
    s.bytes -= dropped;
    bytes_ -= dropped;
    s.replies.pop_front();
  };
  while (s.replies.size() > limits_.replies_per_sender) drop_oldest();
  while (bytes_ > limits_.max_bytes && senders_.size() > 1) EvictLeastRecentlyUsed(sender);
  while (bytes_ > limits_.max_bytes && s.replies.size() > 1) drop_oldest();  // a reply alone always fits
}

void ReplyCache::ForgetIdle(TimePoint now, Duration idle) {
  for (auto it = senders_.begin(); it != senders_.end();) {
    auto next = std::next(it);
    if (now - it->second.last_used > idle) Erase(it);
    it = next;
  }
}

}  // namespace stoker::coordinator
