// ClientCore (client_core.h): the window's insertions and hand-outs, waits and steps on the client's Clock, the
// staging loop, and health.
#include "client/src/client_core.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>

namespace stoker::client {
namespace {

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

ClientCore::ClientCore(std::shared_ptr<const Clock> clock_in, std::string id)
    : clock(std::move(clock_in)), client_id(std::move(id)) {}

ClientCore::~ClientCore() {
  if (doorbell >= 0) ::close(doorbell);
}

void ClientCore::Start(const JobSpec& job_spec, const Plan& job_plan, uint64_t steps_per_epoch, uint32_t size,
                       uint64_t start_batch) {
  spec = job_spec;
  plan = job_plan;
  steps = steps_per_epoch;
  total = steps_per_epoch * job_spec.epochs;
  window_size = size;
  start = start_batch;
  MutexLock lock(mu);
  window.emplace(size, start_batch);
  staged = start_batch;
  last_return = clock->Now();
  coordinator_heard = clock->Now();
  stats.last_batch_unix_seconds = UnixSeconds();
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
  batch->pixel_bytes = h.payload_bytes;
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
  PrefetchWindow::Outcome outcome;
  {
    MutexLock lock(mu);
    outcome = window->Insert(std::move(batch), heartbeats_sent);
    switch (outcome) {
      case PrefetchWindow::Outcome::kAccepted:
        ++stats.batches_received;
        stats.bytes_received += bytes;
        ack_dirty = true;
        break;
      case PrefetchWindow::Outcome::kUnconfirmed:
        stats.bytes_received += bytes;
        ack_dirty = true;  // a heartbeat soon: its reply says whether the coordinator granted that attempt
        break;
      case PrefetchWindow::Outcome::kDuplicate: ++stats.dropped_duplicate; break;
      case PrefetchWindow::Outcome::kStaleAttempt: ++stats.dropped_stale_attempt; break;
      case PrefetchWindow::Outcome::kUnlisted: ++stats.dropped_unlisted; break;
      case PrefetchWindow::Outcome::kOutOfWindow: ++stats.dropped_out_of_window; break;
    }
  }
  if (outcome == PrefetchWindow::Outcome::kAccepted) {
    ready.NotifyAll();
    stage_wanted.NotifyAll();
  }
  return outcome;
}

uint64_t ClientCore::HeartbeatSent() {
  MutexLock lock(mu);
  return ++heartbeats_sent;
}

void ClientCore::NoteLeases(const std::vector<LeaseRef>& leases, uint64_t heartbeat) {
  PrefetchWindow::Confirmed confirmed;
  {
    MutexLock lock(mu);
    confirmed = window->NoteLeases(leases, *plan, heartbeat);
    stats.batches_received += confirmed.accepted;
    stats.dropped_stale_attempt += confirmed.stale;
    stats.dropped_unlisted += confirmed.unlisted;
    if (confirmed.accepted > 0) ack_dirty = true;
  }
  if (confirmed.accepted > 0) {
    ready.NotifyAll();
    stage_wanted.NotifyAll();
  }
}

void ClientCore::CountWrongSamples() {
  MutexLock lock(mu);
  ++stats.dropped_wrong_samples;
}

void ClientCore::CountBadFrame() {
  MutexLock lock(mu);
  ++stats.dropped_bad_frame;
}

void ClientCore::CountWorkerError() {
  MutexLock lock(mu);
  ++stats.worker_errors;
}

void ClientCore::Fail(const Status& status) {
  {
    MutexLock lock(mu);
    if (!fatal.ok()) return;
    fatal = status;
  }
  ready.NotifyAll();
  stage_wanted.NotifyAll();
}

void ClientCore::Wake() const {
  uint64_t one = 1;
  ssize_t n = ::write(doorbell, &one, sizeof(one));
  (void)n;  // the eventfd counter cannot overflow at one write per release
}

// ---- the application -------------------------------------------------------------------------------------------

bool ClientCore::ReadyToHandOut() const {
  return !fatal.ok() || (window->Holds(window->next()) && (!stager || window->next() < staged));
}

StatusOr<ClientCore::Taken> ClientCore::Next(std::chrono::milliseconds timeout) {
  MutexLock lock(mu);
  if (end_of_epoch_pending) {
    end_of_epoch_pending = false;
    return Taken{DeliveryKind::kEndOfEpoch, ended_epoch, nullptr};
  }
  const uint64_t next = window->next();
  if (next >= total) return Taken{DeliveryKind::kEndOfJob, spec.epochs, nullptr};
  if (stager && next >= window->consumed() + stager->depth()) {
    // The batch could only be staged into a slot the consumer still holds: waiting would never end.
    return ResourceExhaustedError("the consumer holds " + std::to_string(next - window->consumed()) +
                                  " unreleased batches, as many as the device depth (" +
                                  std::to_string(stager->depth()) +
                                  "): release one before asking for the next, or raise the depth");
  }
  double waited = 0;
  std::optional<std::pair<TimePoint, TimePoint>> probe_window;  // a wait for the stall probe to judge
  if (!ReadyToHandOut()) {
    const TimePoint wait_start = clock->Now();
    const bool arrived = ready.WaitFor(mu, timeout, [this] {
      mu.AssertHeld();
      return ReadyToHandOut();
    });
    const TimePoint wait_end = clock->Now();
    waited = ToSeconds(wait_end - wait_start);
    stats.wait_seconds += waited;
    if (!delivered_any) {
      stats.startup_seconds += waited;  // before the first batch the consumer has nothing to overlap with
    } else if (stall_probe) {
      probe_window.emplace(wait_start, wait_end);  // asked after the lock is dropped: a probe may be slow
    } else {
      stats.stall_seconds += waited;
    }
    if (!arrived) {
      Status late = DeadlineExceededError("no batch " + std::to_string(next % steps) + " of epoch " +
                                          std::to_string(next / steps) + " within " +
                                          std::to_string(timeout.count()) + " ms (" +
                                          std::to_string(stats.connected_workers) + " workers connected)");
      lock.Unlock();
      if (probe_window) AddProbedStall(probe_window->first, probe_window->second, waited);
      return late;
    }
  }
  if (!fatal.ok()) return fatal;
  Taken taken = Handout(waited);
  lock.Unlock();
  if (probe_window) AddProbedStall(probe_window->first, probe_window->second, waited);
  return taken;
}

// Hands out batch `next`, which is there, and accounts the step it ends.
ClientCore::Taken ClientCore::Handout(double waited) {
  std::unique_ptr<ReceivedBatch> batch = window->TakeNext();
  ++stats.batches_delivered;
  stats.samples_delivered += batch->count;
  CountQuarantined(*batch, +1);
  const TimePoint now = clock->Now();
  if (delivered_any) {
    const double step = ToSeconds(now - last_return);
    stats.step_seconds += step;
    step_histogram.Observe(step);
    wait_histogram.Observe(waited);
  }
  delivered_any = true;
  last_return = now;
  stats.last_batch_unix_seconds = UnixSeconds();
  if (window->next() >= total) stats.end_of_job = true;
  if (batch->index + 1 == steps) {
    end_of_epoch_pending = true;
    ended_epoch = batch->epoch;
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
  std::map<std::string, uint64_t>& by_reason = stats.quarantined_by_reason;
  for (const std::string* reason : reasons) {
    std::string key = *reason;
    if (by_reason.count(key) == 0 && by_reason.size() >= ClientStats::kMaxQuarantineReasons) key = "other";
    uint64_t& counter = by_reason[key];
    counter = sign > 0 ? counter + 1 : counter - 1;
    if (counter == 0) by_reason.erase(key);
  }
  stats.samples_quarantined = sign > 0 ? stats.samples_quarantined + reasons.size()
                                       : stats.samples_quarantined - reasons.size();
}

// How much of a wait was stall, from the consumer's probe (it judges whether its device still had work queued).
void ClientCore::AddProbedStall(TimePoint wait_start, TimePoint wait_end, double waited) {
  const double stalled = std::clamp(stall_probe->StalledSeconds(wait_start, wait_end), 0.0, waited);
  MutexLock lock(mu);
  stats.stall_seconds += stalled;
}

Status ClientCore::PutBack(std::unique_ptr<ReceivedBatch>& batch) {
  MutexLock lock(mu);
  const uint32_t count = batch->count;
  const ReceivedBatch& counted = *batch;  // the window keeps the object: it is still there after PutBack
  if (!window->PutBack(batch)) return FailedPreconditionError("only the batch Next() returned last can be put back");
  --stats.batches_delivered;
  stats.samples_delivered -= count;
  CountQuarantined(counted, -1);
  stats.end_of_job = false;
  end_of_epoch_pending = false;  // its end of epoch comes again after it
  return Status::Ok();
}

void ClientCore::Release(uint64_t global) {
  {
    MutexLock lock(mu);
    if (!window->Release(global)) return;
    ack_dirty = true;
  }
  stage_wanted.NotifyAll();
  Wake();
}

ClientStats ClientCore::Stats() const {
  MutexLock lock(mu);
  ClientStats s = stats;
  s.position = window ? window->next() : 0;
  s.prefetched = window ? window->filled() : 0;
  s.metrics_address = metrics_address;
  return s;
}

// ---- the staging thread ----------------------------------------------------------------------------------------

// Batch `staged` goes to stager slot staged % depth once it has arrived and the consumer has released the batch
// that slot held before (staged - depth < consumed).
bool ClientCore::StageWanted() const {
  if (closing || !fatal.ok()) return true;
  if (staged >= total || staged >= window->consumed() + stager->depth()) return false;
  return window->Holds(staged);
}

void ClientCore::StageLoop() {
  ::pthread_setname_np(::pthread_self(), "stoker-stage");  // top -H, and gpu_feed_bench's CPU breakdown
  const uint64_t depth = stager->depth();
  MutexLock lock(mu);
  while (true) {
    stage_wanted.Wait(mu, [this] {
      mu.AssertHeld();
      return StageWanted();
    });
    if (closing || !fatal.ok()) return;
    const uint64_t g = staged;
    ReceivedBatch& batch = window->At(g);  // nobody else touches a filled, unstaged slot
    lock.Unlock();
    StageReport report;
    Status status = stager->Stage(g % depth, batch, &report);
    if (report.h2d_seconds >= 0) h2d_histogram.Observe(report.h2d_seconds);
    lock.Lock();
    if (!status.ok()) {
      if (fatal.ok()) fatal = status.WithContext("staging batch " + std::to_string(g));
      ready.NotifyAll();
      return;
    }
    h2d_bytes += report.h2d_bytes;
    staged = g + 1;
    ready.NotifyAll();
  }
}

// ---- health ----------------------------------------------------------------------------------------------------

Status ClientCore::Live() const {
  const int64_t turned = io_turned_ns.load(std::memory_order_relaxed);
  const Duration stuck = clock->Now().time_since_epoch() - Duration(turned);
  if (turned != 0 && stuck > std::chrono::seconds(10)) {
    return UnavailableError("the client's I/O thread has not turned for " +
                            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(stuck).count()) + " s");
  }
  return Status::Ok();
}

Status ClientCore::Ready() const {
  // Ready = connected: the rank is ours and the coordinator answered within a few heartbeats. Batches may still
  // flow from workers while the coordinator is away; /readyz says it is away.
  MutexLock lock(mu);
  if (!fatal.ok()) return fatal;
  const Duration silent = clock->Now() - coordinator_heard;
  const Duration limit = std::max<Duration>(4 * heartbeat_interval, std::chrono::seconds(2));
  if (silent > limit) {
    return UnavailableError("no reply from the coordinator for " + std::to_string(ToMillis(silent)) + " ms");
  }
  return Status::Ok();
}

}  // namespace stoker::client
