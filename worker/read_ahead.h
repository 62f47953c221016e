// Read-ahead for datasets on object storage. When a unit is leased, its samples' byte ranges are coalesced (samples
// of one shard whose gaps are small become one request) and queued for the worker's fetch threads, which read them
// with the pooled, keep-alive client while the pipeline threads are still decoding the units before it: the
// storage's latency is hidden behind decoding. A unit's ReadAhead hands each sample's bytes to the pipeline thread
// that builds it (Take) and frees each range once all its samples are taken.
//
// Memory is bounded: a unit's ranges are fetched only once the unit is admitted, and a unit is admitted only while
// the bytes of admitted, untaken ranges plus its own stay under the budget (--read-ahead-bytes) — or when nothing is
// held, so a unit larger than the budget cannot wedge the queue. Units are admitted whole and in the order they were
// leased, which is the order the pipeline threads take them (within a unit, in any order): a thread waiting for a
// range only ever waits for a unit admitted before or with it, or for memory that the units before it will free as
// their samples are taken. A revoked unit's ReadAhead is dropped with its batches: its ranges are skipped and its
// memory returned.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "stoker/clock.h"
#include "stoker/status.h"
#include "base/sync.h"
#include "storage/object_store.h"

namespace stoker::worker {

// One sample's bytes in a shard.
struct SampleSpan {
  uint32_t shard = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// Samples of one shard merged into one request.
struct CoalescedRange {
  uint32_t shard = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::vector<size_t> members;  // indices into the spans given
};

// Sorts by (shard, offset) and merges spans of a shard whose gap is at most `max_gap` bytes while the merged range
// stays within `max_length` (a single larger span is a range of its own). Pure; every span lands in one range.
std::vector<CoalescedRange> CoalesceSpans(const std::vector<SampleSpan>& spans, uint64_t max_gap,
                                          uint64_t max_length);

class FetchQueue;

// The fetched bytes of one unit's samples.
class ReadAhead {
 public:
  struct Range {
    std::string url;
    std::string etag;
    uint64_t offset = 0;
    uint64_t length = 0;
  };
  // Where a sample's bytes sit: range index and offset inside it.
  struct Place {
    size_t range = 0;
    uint64_t offset = 0;
    uint64_t size = 0;
  };
  ReadAhead(std::shared_ptr<FetchQueue> queue, std::vector<Range> ranges,
            std::unordered_multimap<uint64_t, Place> places);
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // Waits (until `deadline`) for the sample's range and copies its bytes to *out: OK, the range's fetch error, or
  // DeadlineExceeded when it is still not there. Nullopt when this read-ahead does not hold the sample (or it was
  // taken as often as it occurs in the unit).
  std::optional<Status> Take(uint64_t sample_id, std::vector<uint8_t>* out,
                             std::chrono::steady_clock::time_point deadline);

  // For the FetchQueue: the unit's bytes now count against the budget; then the fetch threads read each range.
  void MarkAdmitted();
  void Fetch(size_t i, storage::ObjectStore& store);
  uint64_t total_length() const;
  size_t range_count() const { return ranges_.size(); }

 private:
  enum class State { kQueued, kDone, kFailed };
  struct Slot {
    State state = State::kQueued;
    Status status;
    std::unique_ptr<uint8_t[]> data;
    uint32_t untaken = 0;  // samples (occurrences) not yet taken from it
    bool charged = false;  // its length counts against the queue's budget
  };
  const std::shared_ptr<FetchQueue> queue_;
  const std::vector<Range> ranges_;
  Mutex mu_;
  CondVar changed_;
  std::unordered_multimap<uint64_t, Place> places_ STOKER_GUARDED_BY(mu_);
  std::vector<Slot> slots_ STOKER_GUARDED_BY(mu_);
};

// The worker's read-ahead queue and memory budget, shared by every job's remote reader.
class FetchQueue {
 public:
  explicit FetchQueue(uint64_t budget_bytes) : budget_(budget_bytes) {}
  // Queues the unit; its ranges are fetched once it is admitted.
  void Submit(const std::shared_ptr<ReadAhead>& ahead);
  // For a fetch thread: the next range of an admitted unit (admitting the next unit when the budget allows); false
  // when closed.
  bool Next(std::shared_ptr<ReadAhead>* ahead, size_t* range);
  void Release(uint64_t bytes);
  void Close();

  void UnitOpened();
  void UnitClosed();
  struct Gauges {
    uint64_t bytes = 0;      // charged: being fetched, or fetched and not yet taken
    uint64_t units = 0;      // units with a read-ahead alive (the read-ahead depth)
    uint64_t queued = 0;     // units waiting for budget plus admitted ranges waiting for a fetch thread
    uint64_t budget = 0;
  };
  Gauges gauges() const;
  // Waits until no read-ahead is alive and nothing is charged (a unit's last reference may be a fetch thread's,
  // so it can close after its owner let go); false after `timeout`.
  bool WaitUntilIdle(std::chrono::milliseconds timeout) const;

 private:
  struct Ready {
    std::weak_ptr<ReadAhead> ahead;
    size_t range;
  };
  const uint64_t budget_;
  mutable Mutex mu_;
  CondVar changed_;
  mutable CondVar idle_;  // units_ and charged_ reached zero
  std::deque<std::weak_ptr<ReadAhead>> units_waiting_ STOKER_GUARDED_BY(mu_);  // not admitted yet, in lease order
  std::deque<Ready> ready_ STOKER_GUARDED_BY(mu_);  // ranges of admitted units

  uint64_t charged_ STOKER_GUARDED_BY(mu_) = 0;
  uint64_t units_ STOKER_GUARDED_BY(mu_) = 0;
  bool closed_ STOKER_GUARDED_BY(mu_) = false;
};

// The fetch threads: each takes the next admitted range and reads it (blocking, on one pooled connection).
class RangeFetcher {
 public:
  RangeFetcher(storage::ObjectStore& store, uint64_t budget_bytes, size_t threads);
  ~RangeFetcher();  // closes the queue and joins the threads
  RangeFetcher(const RangeFetcher&) = delete;
  RangeFetcher& operator=(const RangeFetcher&) = delete;

  const std::shared_ptr<FetchQueue>& queue() const { return queue_; }

 private:
  storage::ObjectStore& store_;
  std::shared_ptr<FetchQueue> queue_;
  std::vector<std::thread> threads_;
};

}  // namespace stoker::worker
