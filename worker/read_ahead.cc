// Read-ahead (read_ahead.h): coalescing, a unit's fetched ranges, the budgeted queue and its fetch threads.
#include "worker/read_ahead.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace stoker::worker {

std::vector<CoalescedRange> CoalesceSpans(const std::vector<SampleSpan>& spans, uint64_t max_gap,
                                          uint64_t max_length) {
  std::vector<size_t> order(spans.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return spans[a].shard != spans[b].shard ? spans[a].shard < spans[b].shard : spans[a].offset < spans[b].offset;
  });
  std::vector<CoalescedRange> out;
  for (size_t i : order) {
    const SampleSpan& s = spans[i];
    if (!out.empty()) {
      CoalescedRange& last = out.back();
      const uint64_t end = last.offset + last.length;
      const uint64_t new_end = std::max(end, s.offset + s.size);
      if (last.shard == s.shard && s.offset <= end + max_gap && new_end - last.offset <= max_length) {
        last.length = new_end - last.offset;
        last.members.push_back(i);
        continue;
      }
    }
    out.push_back({s.shard, s.offset, s.size, {i}});
  }
  return out;
}

ReadAhead::ReadAhead(std::shared_ptr<FetchQueue> queue, std::vector<Range> ranges,
                     std::unordered_multimap<uint64_t, Place> places)
    : queue_(std::move(queue)), ranges_(std::move(ranges)) {
  {
    MutexLock lock(mu_);
    slots_.resize(ranges_.size());
    for (const auto& [id, place] : places) ++slots_[place.range].untaken;
    places_ = std::move(places);
  }
  // Outside our lock: the queue takes its own lock and then ours (FetchQueue::Next -> MarkAdmitted), so taking it
  // while holding ours would be the opposite order (TSan reported the inversion).
  queue_->UnitOpened();
}

ReadAhead::~ReadAhead() {
  uint64_t charged = 0;
  {
    MutexLock lock(mu_);
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].charged) charged += ranges_[i].length;
    }
  }
  if (charged > 0) queue_->Release(charged);
  queue_->UnitClosed();
}

void ReadAhead::MarkAdmitted() {
  MutexLock lock(mu_);
  for (Slot& slot : slots_) slot.charged = true;
}

uint64_t ReadAhead::total_length() const {
  uint64_t total = 0;
  for (const Range& r : ranges_) total += r.length;
  return total;
}

void ReadAhead::Fetch(size_t i, storage::ObjectStore& store) {
  const Range& range = ranges_[i];
  // Not zero-filled: every byte is written by the read (or the buffer is dropped).
  std::unique_ptr<uint8_t[]> data(new uint8_t[range.length]);
  Status status = store.ReadRange(range.url, range.offset, range.length, range.etag, data.get());
  bool release = false;
  {
    MutexLock lock(mu_);
    Slot& slot = slots_[i];
    if (status.ok() && slot.untaken > 0) {
      slot.data = std::move(data);
      slot.state = State::kDone;
    } else {
      slot.state = status.ok() ? State::kDone : State::kFailed;  // nobody wants it any more, or it failed
      slot.status = status;
      slot.charged = false;
      release = true;
    }
    changed_.NotifyAll();
  }
  if (release) queue_->Release(range.length);
}

std::optional<Status> ReadAhead::Take(uint64_t sample_id, std::vector<uint8_t>* out,
                                      std::chrono::steady_clock::time_point deadline) {
  uint64_t release = 0;
  Status result;
  {
    MutexLock lock(mu_);
    auto it = places_.find(sample_id);
    if (it == places_.end()) return std::nullopt;
    const Place place = it->second;
    places_.erase(it);
    Slot& slot = slots_[place.range];
    const bool arrived = changed_.WaitUntil(mu_, deadline, [&] {
      mu_.AssertHeld();
      return slot.state != State::kQueued;
    });
    if (!arrived) {
      result = DeadlineExceededError(ranges_[place.range].url + ": its read-ahead did not arrive in time");
    } else if (slot.state == State::kFailed) {
      result = slot.status;
    } else {
      out->resize(place.size);
      if (place.size > 0) std::memcpy(out->data(), slot.data.get() + place.offset, place.size);
    }
    if (--slot.untaken == 0 && slot.state == State::kDone && slot.charged) {
      slot.data.reset();
      slot.charged = false;
      release = ranges_[place.range].length;
    }
  }
  if (release > 0) queue_->Release(release);
  return result;
}

// Waking is counted: one thread per thing it can do (a unit to admit, a range to fetch). Waking all 64 fetch
// threads on every change cost the worker a fifth of its CPU in futex contention (perf, devbox).
void FetchQueue::Submit(const std::shared_ptr<ReadAhead>& ahead) {
  MutexLock lock(mu_);
  units_waiting_.push_back(ahead);
  changed_.NotifyOne();
}

bool FetchQueue::Next(std::shared_ptr<ReadAhead>* ahead, size_t* range) {
  // A unit dropped meanwhile may have its last owner here: it must die after the lock is released (its destructor
  // gives its memory back through Release, which takes the lock).
  std::vector<std::shared_ptr<ReadAhead>> graveyard;
  MutexLock lock(mu_);
  while (true) {
    if (closed_) return false;
    if (!ready_.empty()) {
      Ready next = std::move(ready_.front());
      ready_.pop_front();
      *ahead = next.ahead.lock();
      *range = next.range;
      if (*ahead == nullptr) continue;  // dropped after it was admitted: its destructor returned its memory
      return true;
    }
    // Units already dropped (revoked, handed back) are skipped without being charged.
    while (!units_waiting_.empty() && units_waiting_.front().expired()) units_waiting_.pop_front();
    std::shared_ptr<ReadAhead> next = units_waiting_.empty() ? nullptr : units_waiting_.front().lock();
    if (next != nullptr && (charged_ == 0 || charged_ + next->total_length() <= budget_)) {
      units_waiting_.pop_front();
      charged_ += next->total_length();
      next->MarkAdmitted();
      for (size_t i = 0; i < next->range_count(); ++i) {
        ready_.push_back({next, i});
        if (i > 0) changed_.NotifyOne();  // this thread takes the first range; others for the rest
      }
      if (!units_waiting_.empty()) changed_.NotifyOne();  // the next unit may fit too
      graveyard.push_back(std::move(next));
      continue;
    }
    if (next != nullptr) graveyard.push_back(std::move(next));
    // Nothing to fetch, or no room for the next unit: wait for a Submit or a Release (the timeout is a backstop).
    changed_.WaitUntil(mu_, std::chrono::steady_clock::now() + std::chrono::seconds(1));
  }
}

void FetchQueue::Release(uint64_t bytes) {
  MutexLock lock(mu_);
  charged_ -= std::min(charged_, bytes);
  if (!units_waiting_.empty()) changed_.NotifyOne();  // room for the next unit, perhaps
  if (charged_ == 0 && units_ == 0) idle_.NotifyAll();
}

void FetchQueue::Close() {
  MutexLock lock(mu_);
  closed_ = true;
  changed_.NotifyAll();
}

void FetchQueue::UnitOpened() {
  MutexLock lock(mu_);
  ++units_;
}

void FetchQueue::UnitClosed() {
  MutexLock lock(mu_);
  if (units_ > 0) --units_;
  if (charged_ == 0 && units_ == 0) idle_.NotifyAll();
}

bool FetchQueue::WaitUntilIdle(std::chrono::milliseconds timeout) const {
  MutexLock lock(mu_);
  return idle_.WaitUntil(mu_, std::chrono::steady_clock::now() + timeout,
                         [this]() STOKER_REQUIRES(mu_) { return charged_ == 0 && units_ == 0; });
}

FetchQueue::Gauges FetchQueue::gauges() const {
  MutexLock lock(mu_);
  return {charged_, units_, units_waiting_.size() + ready_.size(), budget_};
}

RangeFetcher::RangeFetcher(storage::ObjectStore& store, uint64_t budget_bytes, size_t threads)
    : store_(store), queue_(std::make_shared<FetchQueue>(budget_bytes)) {
  for (size_t i = 0; i < std::max<size_t>(1, threads); ++i) {
    threads_.emplace_back([this] {
      std::shared_ptr<ReadAhead> ahead;
      size_t range = 0;
      while (queue_->Next(&ahead, &range)) {
        ahead->Fetch(range, store_);
        ahead.reset();  // may be the last owner: the unit's memory returns here
      }
    });
  }
}

RangeFetcher::~RangeFetcher() {
  queue_->Close();
  for (std::thread& t : threads_) t.join();
}

}  // namespace stoker::worker
