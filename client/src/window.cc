// PrefetchWindow (window.h): slots, positions and the attempts that fence stale copies.
#include "client/src/window.h"

#include "stoker/check.h"

namespace stoker::client {

PrefetchWindow::PrefetchWindow(uint32_t size, uint64_t start)
    : size_(size),
      start_(start),
      batches_(size),
      state_(size, Slot::kFree),
      index_(size, 0),
      arrived_(size, 0),
      next_(start),
      consumed_(start),
      received_watermark_(start) {}

PrefetchWindow::Outcome PrefetchWindow::Insert(std::unique_ptr<ReceivedBatch> batch, uint64_t heartbeats_sent) {
  auto known = attempts_.find(batch->unit);
  if (known != attempts_.end() && batch->attempt < known->second) return Outcome::kStaleAttempt;
  const uint64_t g = batch->global;
  const size_t slot = g % size_;
  if (g < next_ || g < start_ || (state_[slot] != Slot::kFree && index_[slot] == g)) return Outcome::kDuplicate;
  if (g >= consumed_ + size_ || state_[slot] != Slot::kFree) return Outcome::kOutOfWindow;
  const bool listed = known != attempts_.end() && batch->attempt == known->second;
  index_[slot] = g;
  batches_[slot] = std::move(batch);
  if (!listed) {  // not heard of yet (or newer than we heard): wait for the coordinator's word
    state_[slot] = Slot::kUnconfirmed;
    arrived_[slot] = heartbeats_sent;
    ++unconfirmed_;
    return Outcome::kUnconfirmed;
  }
  Fill(slot);
  return Outcome::kAccepted;
}

void PrefetchWindow::Fill(size_t slot) {
  state_[slot] = Slot::kFilled;
  const uint64_t g = index_[slot];
  if (g == received_watermark_) {
    ++received_watermark_;
    while (!received_above_.empty() && *received_above_.begin() == received_watermark_) {
      received_above_.erase(received_above_.begin());
      ++received_watermark_;
    }
  } else if (g > received_watermark_) {
    received_above_.insert(g);
  }
}

bool PrefetchWindow::Holds(uint64_t g) const {
  const size_t slot = g % size_;
  return state_[slot] == Slot::kFilled && index_[slot] == g;
}

ReceivedBatch& PrefetchWindow::At(uint64_t g) {
  STOKER_CHECK(Holds(g), "slot does not hold batch " + std::to_string(g));
  return *batches_[g % size_];
}

std::unique_ptr<ReceivedBatch> PrefetchWindow::TakeNext() {
  STOKER_CHECK(Holds(next_), "batch " + std::to_string(next_) + " has not arrived");
  const size_t slot = next_ % size_;
  state_[slot] = Slot::kDelivered;
  ++next_;
  return std::move(batches_[slot]);
}

bool PrefetchWindow::PutBack(std::unique_ptr<ReceivedBatch>& batch) {
  const uint64_t g = batch->global;
  const size_t slot = g % size_;
  if (g + 1 != next_ || state_[slot] != Slot::kDelivered || index_[slot] != g) return false;
  batches_[slot] = std::move(batch);
  state_[slot] = Slot::kFilled;
  next_ = g;
  return true;
}

bool PrefetchWindow::Release(uint64_t g) {
  const size_t slot = g % size_;
  if (state_[slot] != Slot::kDelivered || index_[slot] != g) return false;
  state_[slot] = Slot::kFree;
  while (consumed_ < next_ && state_[consumed_ % size_] == Slot::kFree) ++consumed_;
  return true;
}

PrefetchWindow::Confirmed PrefetchWindow::NoteLeases(const std::vector<LeaseRef>& leases, const Plan& plan,
                                                      uint64_t heartbeat) {
  for (const LeaseRef& lease : leases) {
    if (lease.unit >= plan.total_units() || plan.UnitEnd(lease.unit) <= next_) continue;
    // The coordinator's word is the truth: after it restarts without its journal attempts start again low.
    attempts_[lease.unit] = lease.attempt;
  }
  while (!attempts_.empty() && plan.UnitEnd(attempts_.begin()->first) <= next_) attempts_.erase(attempts_.begin());
  Confirmed out;
  for (size_t slot = 0; slot < size_ && unconfirmed_ > 0; ++slot) {
    if (state_[slot] != Slot::kUnconfirmed || arrived_[slot] >= heartbeat) continue;  // the reply may predate it
    --unconfirmed_;
    const ReceivedBatch& b = *batches_[slot];
    auto listed = attempts_.find(b.unit);
    if (listed != attempts_.end() && listed->second == b.attempt) {
      Fill(slot);
      ++out.accepted;
      continue;
    }
    (listed == attempts_.end() ? out.unlisted : out.stale) += 1;
    batches_[slot].reset();
    state_[slot] = Slot::kFree;
  }
  return out;
}

uint32_t PrefetchWindow::filled() const {
  uint32_t n = 0;
  for (Slot s : state_) n += s == Slot::kFilled;
  return n;
}

void PrefetchWindow::WriteState(JsonWriter& j) const {
  j.Key("next").Value(next_).Key("consumed").Value(consumed_);
  j.Key("received_watermark").Value(received_watermark_);
  j.Key("received_above").BeginArray();
  for (uint64_t i : received_above_) j.Value(i);
  j.EndArray();
  j.Key("slots").BeginArray();
  for (size_t i = 0; i < state_.size(); ++i) {
    const char* st = state_[i] == Slot::kFree          ? "free"
                     : state_[i] == Slot::kUnconfirmed ? "unconfirmed"
                     : state_[i] == Slot::kFilled      ? "filled"
                                                       : "out";
    j.BeginObject().Key("state").Value(st);
    if (state_[i] != Slot::kFree) j.Key("index").Value(index_[i]);
    j.EndObject();
  }
  j.EndArray();
  j.Key("leases").BeginArray();
  for (const auto& [unit, attempt] : attempts_) {
    j.BeginObject().Key("unit").Value(unit).Key("attempt").Value(attempt).EndObject();
  }
  j.EndArray();
}

const char* OutcomeName(PrefetchWindow::Outcome outcome) {
  switch (outcome) {
    case PrefetchWindow::Outcome::kAccepted: return "accepted";
    case PrefetchWindow::Outcome::kUnconfirmed: return "unconfirmed";
    case PrefetchWindow::Outcome::kUnlisted: return "unlisted";
    case PrefetchWindow::Outcome::kDuplicate: return "duplicate";
    case PrefetchWindow::Outcome::kStaleAttempt: return "stale_attempt";
    case PrefetchWindow::Outcome::kOutOfWindow: return "out_of_window";
  }
  return "unknown";
}

}  // namespace stoker::client
