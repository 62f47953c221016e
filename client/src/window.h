// PrefetchWindow: a client's W prefetch slots and the positions that go with them. Batch g (a global index: epoch x
// steps + index) lives in slot g mod W. The coordinator leases only batches below consumed + W, so an honest
// worker's batch always finds its slot free; anything else is refused with a reason and never stored:
//
//   duplicate      — g was delivered already, or its slot holds g: a second copy
//   stale_attempt  — made under an older attempt than the one the coordinator lists for its unit (a re-leased
//                    unit's old worker, fenced)
//   out_of_window  — g is at or beyond consumed + W, or its slot still holds an earlier batch
//
// Positions: `next` (the batch Next() hands out next), `consumed` (every batch below it was released), the received
// watermark and the received batches above it (what the client's acks tell the coordinator).
//
// Thread safety: none; ClientCore guards it with its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "client/src/received_batch.h"
#include "common/control_messages.h"
#include "common/json_writer.h"
#include "common/plan.h"

namespace stoker::internal {

class PrefetchWindow {
 public:
  enum class Outcome { kAccepted, kDuplicate, kStaleAttempt, kOutOfWindow };

  // Slots for `size` batches, starting at global batch `start`.
  PrefetchWindow(uint32_t size, uint64_t start);

  // Stores the batch in its slot, or refuses it (the batch is then dropped).
  Outcome Insert(std::unique_ptr<ReceivedBatch> batch);
  // Whether batch g has arrived and waits in its slot.
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

  // The coordinator's current attempt per unit (heartbeat replies): batches of older attempts are stale from now on.
  // Units wholly before `next` are forgotten (any copy of theirs is a duplicate by index anyway).
  void NoteLeases(const std::vector<LeaseRef>& leases, const Plan& plan);
  // A new coordinator session: its attempt numbers are the ones that count.
  void ForgetAttempts() { attempts_.clear(); }

  uint32_t size() const { return size_; }
  uint64_t start() const { return start_; }
  uint64_t next() const { return next_; }
  uint64_t consumed() const { return consumed_; }
  uint64_t received_watermark() const { return received_watermark_; }
  const std::set<uint64_t>& received_above() const { return received_above_; }
  uint32_t filled() const;  // batches received and not handed out

  // Slots, leases and positions as members of the object `j` is writing (/state).
  void WriteState(JsonWriter& j) const;

 private:
  enum class Slot : uint8_t { kFree, kFilled, kDelivered };

  const uint32_t size_;
  const uint64_t start_;
  std::vector<std::unique_ptr<ReceivedBatch>> batches_;
  std::vector<Slot> state_;
  std::vector<uint64_t> index_;  // the global index a slot holds
  uint64_t next_;
  uint64_t consumed_;
  uint64_t received_watermark_;
  std::set<uint64_t> received_above_;
  std::map<uint64_t, uint64_t> attempts_;  // unit -> its current attempt
};

const char* OutcomeName(PrefetchWindow::Outcome outcome);

}  // namespace stoker::internal
