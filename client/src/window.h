// PrefetchWindow: a client's W prefetch slots and the positions that go with them. Batch g (a global index: epoch x
// steps + index) lives in slot g mod W. The coordinator leases only batches below consumed + W, so an honest
// worker's batch always finds its slot free; anything else is refused with a reason and never stored:
//
//   duplicate      — g was delivered already, or its slot holds g: a second copy
//   stale_attempt  — made under another attempt than the one the coordinator lists for its unit (a re-leased
//                    unit's old worker, fenced)
//   unlisted       — made under an attempt the coordinator does not list at all (no lease it granted)
//   out_of_window  — g is at or beyond consumed + W, or its slot still holds an earlier batch
//
// Only the attempt the coordinator currently lists for a unit is delivered. A batch whose unit's attempt the client
// has not heard yet (the lease was granted after its last heartbeat reply) waits in its slot, unconfirmed, until the
// reply to a heartbeat sent after it arrived: then it is confirmed (listed under that attempt) or dropped.
// Unconfirmed batches are neither handed out nor acknowledged.
//
// Positions: `next` (the batch Next() hands out next), `consumed` (every batch below it was released), the received
// watermark and the received batches above it (what the client's acks tell the coordinator: confirmed ones only).
//
// Thread safety: none; ClientCore guards it with its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "client/src/received_batch.h"
#include "wire/control_messages.h"
#include "base/json_writer.h"
#include "dataset/plan.h"

namespace stoker::client {

class PrefetchWindow {
 public:
  enum class Outcome { kAccepted, kUnconfirmed, kDuplicate, kStaleAttempt, kUnlisted, kOutOfWindow };

  // What a heartbeat reply decided about the unconfirmed batches.
  struct Confirmed {
    uint32_t accepted = 0;
    uint32_t stale = 0;     // listed under another attempt
    uint32_t unlisted = 0;  // not listed at all
  };

  // Slots for `size` batches, starting at global batch `start`.
  PrefetchWindow(uint32_t size, uint64_t start);

  // Stores the batch in its slot (confirmed, or waiting for confirmation), or refuses it (it is then dropped).
  // `heartbeats_sent`: how many heartbeats had left when it arrived.
  Outcome Insert(std::unique_ptr<ReceivedBatch> batch, uint64_t heartbeats_sent);
  // Whether batch g has arrived, confirmed, and waits in its slot.
  bool Holds(uint64_t g) const;
  // The batch in slot g mod W, which must hold g (Holds(g)).
  ReceivedBatch& At(uint64_t g);

  // Hands out batch `next` (Holds(next) must be true) and advances `next`; its slot stays taken until Release.
  std::unique_ptr<ReceivedBatch> TakeNext();
  // Takes back the batch TakeNext() returned last, still unreleased: `next` steps back to it. False otherwise.
  bool PutBack(std::unique_ptr<ReceivedBatch>& batch);
  // The application is done with batch g: its slot is free again (`consumed` moves past every released batch).
  // False if g is not out with the application.
  bool Release(uint64_t g);

  // The coordinator's current attempt per unit, from the reply to heartbeat number `heartbeat` (1-based): batches
  // under other attempts are refused from now on, and unconfirmed batches that arrived before that heartbeat left
  // are confirmed or dropped. Units wholly before `next` are forgotten (a copy of theirs is a duplicate by index).
  Confirmed NoteLeases(const std::vector<LeaseRef>& leases, const Plan& plan, uint64_t heartbeat);
  // A new coordinator session: its attempt numbers are the ones that count.
  void ForgetAttempts() { attempts_.clear(); }
  // Whether `attempt` is the one the coordinator lists for `unit` now.
  bool IsCurrentAttempt(uint64_t unit, uint64_t attempt) const {
    auto it = attempts_.find(unit);
    return it != attempts_.end() && it->second == attempt;
  }
  bool has_unconfirmed() const { return unconfirmed_ > 0; }

  uint32_t size() const { return size_; }
  uint64_t start() const { return start_; }
  uint64_t next() const { return next_; }
  uint64_t consumed() const { return consumed_; }
  uint64_t received_watermark() const { return received_watermark_; }
  const std::set<uint64_t>& received_above() const { return received_above_; }
  uint32_t filled() const;  // confirmed batches received and not handed out

  // Slots, leases and positions as members of the object `j` is writing (/state).
  void WriteState(JsonWriter& j) const;

 private:
  enum class Slot : uint8_t { kFree, kUnconfirmed, kFilled, kDelivered };

  void Fill(size_t slot);  // an unconfirmed or arriving batch becomes deliverable and counts as received

  const uint32_t size_;
  const uint64_t start_;
  std::vector<std::unique_ptr<ReceivedBatch>> batches_;
  std::vector<Slot> state_;
  std::vector<uint64_t> index_;    // the global index a slot holds
  std::vector<uint64_t> arrived_;  // an unconfirmed slot's heartbeats_sent at arrival
  uint32_t unconfirmed_ = 0;
  uint64_t next_;
  uint64_t consumed_;
  uint64_t received_watermark_;
  std::set<uint64_t> received_above_;
  std::map<uint64_t, uint64_t> attempts_;  // unit -> its current attempt
};

const char* OutcomeName(PrefetchWindow::Outcome outcome);

}  // namespace stoker::client
