// ClientCore (client_core.h): the window's insertions and hand-outs, acks, waits and steps on the client's Clock,
// the staging loop, health and /state.
#include "client/src/client_core.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>

#include "base/json_writer.h"

namespace stoker::client {
namespace {

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

ClientCore::ClientCore(std::shared_ptr<const Clock> clock, std::string client_id, int doorbell)
    : clock_(std::move(clock)), client_id_(std::move(client_id)), doorbell_(doorbell) {}

ClientCore::~ClientCore() {
  if (doorbell_ >= 0) ::close(doorbell_);
}

void ClientCore::Start(Session session) {
  spec_ = std::move(session.spec);
  plan_.emplace(std::move(session.plan));
  steps_ = session.steps_per_epoch;
  total_ = steps_ * spec_.epochs;
  window_size_ = session.window_size;
  start_ = session.start_batch;
  stall_probe_ = std::move(session.stall_probe);
  stager_ = std::move(session.stager);
  labels_ = std::move(session.labels);
  MutexLock lock(mu_);
  window_.emplace(window_size_, start_);
  staged_ = start_;
  last_return_ = clock_->Now();
  coordinator_heard_ = clock_->Now();
  stats_.last_batch_unix_seconds = UnixSeconds();
}

std::unique_ptr<ReceivedBatch> MakeReceivedBatch(BatchHeader h, uint64_t steps_per_epoch,
                                                 std::vector<zmq::message_t> payload, bool join_frames) {
  auto batch = std::make_unique<ReceivedBatch>();
  batch->epoch = h.epoch;
  batch->index = h.index;
  batch->global = uint64_t{h.epoch} * steps_per_epoch + h.index;
  batch->rank = h.rank;
  batch->unit = h.unit;
  batch->attempt = h.attempt;
  batch->worker_id = std::move(h.worker_id);
  batch->count = h.count;
  batch->height = h.height;
  batch->width = h.width;
  batch->channels = h.channels;
  batch->labels = std::move(h.labels);
  batch->sample_ids = std::move(h.sample_ids);
  batch->flags = std::move(h.flags);
  batch->quarantine_reasons = std::move(h.quarantine_reasons);
  batch->crops.reserve(h.crops.size());
  for (const EncodedCrop& c : h.crops) {
    batch->crops.push_back(SampleCrop{c.bytes, c.encoded, c.flip, c.x, c.y, c.width, c.height});
  }
  batch->pixel_bytes = h.payload_bytes;
  if (payload.empty()) return batch;  // opened into a pinned buffer: the caller hands it over
  batch->payload = std::move(payload[0]);
  batch->more_payload.reserve(payload.size() - 1);
  for (size_t i = 1; i < payload.size(); ++i) batch->more_payload.push_back(std::move(payload[i]));
  if (!batch->more_payload.empty() && join_frames) {
    zmq::message_t joined(batch->pixel_bytes);  // the host path hands over one contiguous buffer
    batch->CopyPayloadTo(static_cast<uint8_t*>(joined.data()));
    batch->payload = std::move(joined);
    batch->more_payload.clear();
  }
  return batch;
}

// ---- the I/O thread --------------------------------------------------------------------------------------------

PrefetchWindow::Outcome ClientCore::Accept(std::unique_ptr<ReceivedBatch> batch) {
  const uint64_t bytes = batch->pixel_bytes;
  const bool opened_into_pinned = batch->opened != nullptr;
  PrefetchWindow::Outcome outcome;
  {
    MutexLock lock(mu_);
    outcome = window_->Insert(std::move(batch), heartbeats_sent_);
    if (opened_into_pinned && outcome == PrefetchWindow::Outcome::kAccepted) ++stats_.batches_opened_into_pinned;
    switch (outcome) {
      case PrefetchWindow::Outcome::kAccepted:
        ++stats_.batches_received;
        stats_.bytes_received += bytes;
        ack_dirty_ = true;
        break;
      case PrefetchWindow::Outcome::kUnconfirmed:
        stats_.bytes_received += bytes;
        ack_dirty_ = true;  // a heartbeat soon: its reply says whether the coordinator granted that attempt
        break;
      case PrefetchWindow::Outcome::kDuplicate: ++stats_.dropped_duplicate; break;
      case PrefetchWindow::Outcome::kStaleAttempt: ++stats_.dropped_stale_attempt; break;
      case PrefetchWindow::Outcome::kUnlisted: ++stats_.dropped_unlisted; break;
      case PrefetchWindow::Outcome::kOutOfWindow: ++stats_.dropped_out_of_window; break;
    }
  }
  if (outcome == PrefetchWindow::Outcome::kAccepted) NotifyArrived();
  return outcome;
}

// A batch became deliverable, or the stream ended: Next() and the staging thread look again.
void ClientCore::NotifyArrived() {
  ready_.NotifyAll();
  stage_wanted_.NotifyAll();
}

bool ClientCore::AckPending() const {
  MutexLock lock(mu_);
  return ack_dirty_;
}

uint64_t ClientCore::TakeAck(ClientHeartbeatRequest& hb) {
  MutexLock lock(mu_);
  hb.consumed = window_->consumed();
  hb.received_watermark = window_->received_watermark();
  hb.received_above.assign(window_->received_above().begin(), window_->received_above().end());
  hb.step_seconds = stats_.step_seconds;
  hb.stall_seconds = stats_.stall_seconds;
  hb.receive_seconds = stats_.receive_seconds;
  hb.h2d_seconds = stats_.h2d_seconds;
  hb.samples_delivered = stats_.samples_delivered;
  ack_dirty_ = false;
  return ++heartbeats_sent_;
}

void ClientCore::NoteLeases(const std::vector<LeaseRef>& leases, uint64_t heartbeat) {
  PrefetchWindow::Confirmed confirmed;
  {
    MutexLock lock(mu_);
    confirmed = window_->NoteLeases(leases, *plan_, heartbeat);
    stats_.batches_received += confirmed.accepted;
    stats_.dropped_stale_attempt += confirmed.stale;
    stats_.dropped_unlisted += confirmed.unlisted;
    if (confirmed.accepted > 0) ack_dirty_ = true;
  }
  if (confirmed.accepted > 0) NotifyArrived();
}

void ClientCore::ForgetAttempts() {
  MutexLock lock(mu_);
  window_->ForgetAttempts();
}

bool ClientCore::CountWrongSamples(uint64_t unit, uint64_t attempt) {
  MutexLock lock(mu_);
  ++stats_.dropped_wrong_samples;
  return window_.has_value() && window_->IsCurrentAttempt(unit, attempt);
}

void ClientCore::CountSealRefused(bool replayed) {
  MutexLock lock(mu_);
  ++(replayed ? stats_.dropped_replayed : stats_.dropped_seal_failed);
}

void ClientCore::CountReceiveSeconds(double seconds) {
  MutexLock lock(mu_);
  stats_.receive_seconds += seconds;
}

void ClientCore::CountBadFrame() {
  MutexLock lock(mu_);
  ++stats_.dropped_bad_frame;
}

void ClientCore::CountWorkerReconnect() {
  MutexLock lock(mu_);
  ++stats_.worker_reconnects;
}

void ClientCore::CountWorkerError() {
  MutexLock lock(mu_);
  ++stats_.worker_errors;
}

void ClientCore::NoteWorkers(std::vector<std::string> endpoints) {
  MutexLock lock(mu_);
  stats_.connected_workers = static_cast<uint32_t>(endpoints.size());
  worker_endpoints_ = std::move(endpoints);
}

void ClientCore::StartHeartbeats(Duration interval) {
  MutexLock lock(mu_);
  heartbeat_interval_ = interval;
  coordinator_heard_ = clock_->Now();
}

void ClientCore::CoordinatorAnswered() {
  MutexLock lock(mu_);
  coordinator_heard_ = clock_->Now();
}

void ClientCore::Fail(const Status& status) {
  {
    MutexLock lock(mu_);
    if (!fatal_.ok()) return;
    fatal_ = status;
  }
  NotifyArrived();
}

void ClientCore::Close() {
  {
    MutexLock lock(mu_);
    closing_ = true;
  }
  stage_wanted_.NotifyAll();
  Wake();
}

bool ClientCore::closing() const {
  MutexLock lock(mu_);
  return closing_;
}

void ClientCore::Wake() const {
  uint64_t one = 1;
  ssize_t n = ::write(doorbell_, &one, sizeof(one));
  (void)n;  // the eventfd counter cannot overflow at one write per release
}

// ---- the application -------------------------------------------------------------------------------------------

bool ClientCore::ReadyToHandOut() const {
  return !fatal_.ok() || (window_->Holds(window_->next()) && (!stager_ || window_->next() < staged_));
}

StatusOr<ClientCore::Taken> ClientCore::Next(std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  if (end_of_epoch_pending_) {
    end_of_epoch_pending_ = false;
    return Taken{DeliveryKind::kEndOfEpoch, ended_epoch_, nullptr};
  }
  const uint64_t next = window_->next();
  if (next >= total_) return Taken{DeliveryKind::kEndOfJob, spec_.epochs, nullptr};
  if (stager_ && next >= window_->consumed() + stager_->depth()) {
    // The batch could only be staged into a slot the consumer still holds: waiting would never end.
    return ResourceExhaustedError("the consumer holds " + std::to_string(next - window_->consumed()) +
                                  " unreleased batches, as many as the device depth (" +
                                  std::to_string(stager_->depth()) +
                                  "): release one before asking for the next, or raise the depth");
  }
  double waited = 0;
  std::optional<std::pair<TimePoint, TimePoint>> probe_window;  // a wait for the stall probe to judge
  if (!ReadyToHandOut()) {
    const TimePoint wait_start = clock_->Now();
    const bool arrived = ready_.WaitFor(mu_, timeout, [this] {
      mu_.AssertHeld();
      return ReadyToHandOut();
    });
    const TimePoint wait_end = clock_->Now();
    waited = ToSeconds(wait_end - wait_start);
    stats_.wait_seconds += waited;
    if (!delivered_any_) {
      stats_.startup_seconds += waited;  // before the first batch the consumer has nothing to overlap with
    } else if (stall_probe_) {
      probe_window.emplace(wait_start, wait_end);  // asked after the lock is dropped: a probe may be slow
    } else {
      stats_.stall_seconds += waited;
    }
    if (!arrived) {
      Status late = DeadlineExceededError("no batch " + std::to_string(next % steps_) + " of epoch " +
                                          std::to_string(next / steps_) + " within " +
                                          std::to_string(timeout.count()) + " ms (" +
                                          std::to_string(stats_.connected_workers) + " workers connected)");
      lock.Unlock();
      if (probe_window) AddProbedStall(probe_window->first, probe_window->second, waited);
      return late;
    }
  }
  if (!fatal_.ok()) return fatal_;
  Taken taken = Handout(waited);
  lock.Unlock();
  if (probe_window) AddProbedStall(probe_window->first, probe_window->second, waited);
  return taken;
}

// Hands out batch `next`, which is there, and accounts the step it ends.
ClientCore::Taken ClientCore::Handout(double waited) {
  std::unique_ptr<ReceivedBatch> batch = window_->TakeNext();
  ++stats_.batches_delivered;
  stats_.samples_delivered += batch->count;
  CountQuarantined(*batch, +1);
  const TimePoint now = clock_->Now();
  if (delivered_any_) {
    const double step = ToSeconds(now - last_return_);
    stats_.step_seconds += step;
    step_histogram_.Observe(step);
    wait_histogram_.Observe(waited);
  }
  delivered_any_ = true;
  last_return_ = now;
  stats_.last_batch_unix_seconds = UnixSeconds();
  if (window_->next() >= total_) stats_.end_of_job = true;
  if (batch->index + 1 == steps_) {
    end_of_epoch_pending_ = true;
    ended_epoch_ = batch->epoch;
  }
  const uint32_t epoch = batch->epoch;
  return Taken{DeliveryKind::kBatch, epoch, std::move(batch)};
}

// Counts (sign +1) or uncounts (-1, a batch put back) a batch's quarantined samples by reason. A worker chooses the
// words, so at most kMaxQuarantineReasons distinct ones are kept; the rest count as "other", and samples a worker
// flagged without saying why as "unreported".
void ClientCore::CountQuarantined(const ReceivedBatch& batch, int sign) {
  static const std::string kUnreported = "unreported";
  std::vector<const std::string*> reasons;
  for (size_t slot = 0, told = 0; slot < batch.flags.size(); ++slot) {
    if ((batch.flags[slot] & kSampleFlagQuarantined) == 0) continue;
    reasons.push_back(batch.quarantine_reasons.empty() ? &kUnreported : &batch.quarantine_reasons[told++]);
  }
  std::map<std::string, uint64_t>& by_reason = stats_.quarantined_by_reason;
  for (const std::string* reason : reasons) {
    std::string key = *reason;
    if (by_reason.count(key) == 0 && by_reason.size() >= ClientStats::kMaxQuarantineReasons) key = "other";
    uint64_t& counter = by_reason[key];
    counter = sign > 0 ? counter + 1 : counter - 1;
    if (counter == 0) by_reason.erase(key);
  }
  stats_.samples_quarantined = sign > 0 ? stats_.samples_quarantined + reasons.size()
                                        : stats_.samples_quarantined - reasons.size();
}

// How much of a wait was stall, from the consumer's probe (it judges whether its device still had work queued).
void ClientCore::AddProbedStall(TimePoint wait_start, TimePoint wait_end, double waited) {
  const double stalled = std::clamp(stall_probe_->StalledSeconds(wait_start, wait_end), 0.0, waited);
  MutexLock lock(mu_);
  stats_.stall_seconds += stalled;
}

Status ClientCore::PutBack(std::unique_ptr<ReceivedBatch>& batch) {
  MutexLock lock(mu_);
  const uint32_t count = batch->count;
  const ReceivedBatch& counted = *batch;  // the window keeps the object: it is still there after PutBack
  if (!window_->PutBack(batch)) return FailedPreconditionError("only the batch Next() returned last can be put back");
  --stats_.batches_delivered;
  stats_.samples_delivered -= count;
  CountQuarantined(counted, -1);
  stats_.end_of_job = false;
  end_of_epoch_pending_ = false;  // its end of epoch comes again after it
  return Status::Ok();
}

void ClientCore::Release(uint64_t global) {
  {
    MutexLock lock(mu_);
    if (!window_->Release(global)) return;
    ack_dirty_ = true;
  }
  stage_wanted_.NotifyAll();
  Wake();
}

uint64_t ClientCore::position() const {
  MutexLock lock(mu_);
  return window_->next();
}

void ClientCore::NoteMetricsAddress(std::string address) {
  MutexLock lock(mu_);
  metrics_address_ = std::move(address);
}

ClientStats ClientCore::Stats() const {
  MutexLock lock(mu_);
  ClientStats s = stats_;
  s.position = window_ ? window_->next() : 0;
  s.prefetched = window_ ? window_->filled() : 0;
  s.metrics_address = metrics_address_;
  return s;
}

// ---- the staging thread ----------------------------------------------------------------------------------------

// Batch `staged_` goes to stager slot staged_ % depth once it has arrived and the consumer has released the batch
// that slot held before (staged_ - depth < consumed).
bool ClientCore::StageWanted() const {
  if (closing_ || !fatal_.ok()) return true;
  if (staged_ >= total_ || staged_ >= window_->consumed() + stager_->depth()) return false;
  return window_->Holds(staged_);
}

void ClientCore::StageLoop() {
  ::pthread_setname_np(::pthread_self(), "stoker-stage");  // top -H, and gpu_feed_bench's CPU breakdown
  const uint64_t depth = stager_->depth();
  MutexLock lock(mu_);
  while (true) {
    stage_wanted_.Wait(mu_, [this] {
      mu_.AssertHeld();
      return StageWanted();
    });
    if (closing_ || !fatal_.ok()) return;
    const uint64_t g = staged_;
    ReceivedBatch& batch = window_->At(g);  // nobody else touches a filled, unstaged slot
    lock.Unlock();
    StageReport report;
    Status status = stager_->Stage(g % depth, batch, &report);
    if (report.h2d_seconds >= 0) h2d_histogram_.Observe(report.h2d_seconds);
    lock.Lock();
    if (!status.ok()) {
      if (fatal_.ok()) fatal_ = status.WithContext("staging batch " + std::to_string(g));
      ready_.NotifyAll();
      return;
    }
    h2d_bytes_ += report.h2d_bytes;
    stats_.receive_seconds += report.copy_seconds;
    if (report.h2d_seconds > 0) stats_.h2d_seconds += report.h2d_seconds;
    staged_ = g + 1;
    ready_.NotifyAll();
  }
}

// ---- health ----------------------------------------------------------------------------------------------------

Status ClientCore::Live() const {
  const int64_t turned = io_turned_ns_.load(std::memory_order_relaxed);
  const Duration stuck = clock_->Now().time_since_epoch() - Duration(turned);
  if (turned != 0 && stuck > std::chrono::seconds(10)) {
    return UnavailableError("the client's I/O thread has not turned for " +
                            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(stuck).count()) + " s");
  }
  return Status::Ok();
}

Status ClientCore::Ready() const {
  // Ready = connected: the rank is ours and the coordinator answered within a few heartbeats. Batches may still
  // flow from workers while the coordinator is away; /readyz says it is away.
  MutexLock lock(mu_);
  if (!fatal_.ok()) return fatal_;
  const Duration silent = clock_->Now() - coordinator_heard_;
  const Duration limit = std::max<Duration>(4 * heartbeat_interval_, std::chrono::seconds(2));
  if (silent > limit) {
    return UnavailableError("no reply from the coordinator for " + std::to_string(ToMillis(silent)) + " ms");
  }
  return Status::Ok();
}

uint64_t ClientCore::h2d_bytes() const {
  MutexLock lock(mu_);
  return h2d_bytes_;
}

std::string ClientCore::StateJson() const {
  MutexLock lock(mu_);
  JsonWriter j;
  j.BeginObject();
  j.Key("client_id").Value(client_id_);
  for (const auto& [key, value] : labels_) j.Key(key).Value(value);
  j.Key("total").Value(total_).Key("steps_per_epoch").Value(steps_);
  if (window_) window_->WriteState(j);
  j.Key("workers").BeginArray();
  for (const std::string& w : worker_endpoints_) j.Value(w);
  j.EndArray();
  j.Key("fatal").Value(fatal_.ok() ? std::string() : fatal_.ToString());
  j.Key("wait_seconds").Value(stats_.wait_seconds).Key("stall_seconds").Value(stats_.stall_seconds);
  j.Key("step_seconds").Value(stats_.step_seconds).Key("end_of_job").Value(stats_.end_of_job);
  j.EndObject();
  return j.str();
}

}  // namespace stoker::client
