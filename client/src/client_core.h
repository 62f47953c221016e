// ClientCore: what a Client's threads share — the prefetch window (client/src/window.h), the positions, the
// counters, and the consumer's side of handing batches out (Next, PutBack, Release). The I/O thread's ClientImpl
// (client/src/client_impl.h) inserts what arrives and reads the acks; the application thread takes batches in plan
// order; with a BatchStager (the GPU path) a staging thread stages each batch, in plan order, before Next() may hand
// it out. Every time it reads goes through its Clock, so client_core_test.cc drives it on a FakeClock without
// sockets.
//
// The core outlives the Client while batches are out (a Batch holds it to release its slot), so it owns the
// doorbell eventfd that wakes the I/O thread.
//
// Thread safety: every method may be called from any thread. What Start fixes is read without the lock: Start runs
// before any other thread uses the core.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <prometheus/histogram.h>
#include <string>
#include <vector>

#include "base/metrics.h"
#include "base/sync.h"
#include "client/src/received_batch.h"
#include "client/src/window.h"
#include "dataset/plan.h"
#include "stoker/client_types.h"
#include "stoker/clock.h"
#include "stoker/job_spec.h"
#include "wire/control_messages.h"
#include "wire/data_messages.h"
#include "wire/transport_errors.h"

namespace stoker::client {

class ClientCore {
 public:
  // What Next() hands the Client: a batch, or the end of an epoch or of the job.
  struct Taken {
    DeliveryKind kind = DeliveryKind::kBatch;
    uint32_t epoch = 0;
    std::unique_ptr<ReceivedBatch> batch;  // kBatch only
  };

  // What the registration settled, fixed for the rest of the core's life.
  struct Session {
    JobSpec spec;
    Plan plan;
    uint64_t steps_per_epoch = 0;
    uint32_t window_size = 0;
    uint64_t start_batch = 0;
    std::shared_ptr<StallProbe> stall_probe;  // null: every wait in Next() is a stall
    std::shared_ptr<BatchStager> stager;      // null: the host path
    MetricLabels labels;                      // pipeline, rank, gpu, gpu_uuid
  };

  // `doorbell`: an eventfd the core owns from now on, which wakes the I/O thread (-1: none, in tests).
  ClientCore(std::shared_ptr<const Clock> clock, std::string client_id, int doorbell = -1);
  ~ClientCore();
  ClientCore(const ClientCore&) = delete;
  ClientCore& operator=(const ClientCore&) = delete;

  // Once, after registration and before any other thread uses the core: the window opens at the session's start.
  void Start(Session session);

  // ---- what Start fixed -------------------------------------------------------------------------------------
  // The client's clock, which the core owns (ClientOptions::clock or the process's steady clock): everything else
  // in the client borrows it.
  const Clock& clock() const { return *clock_; }
  const std::string& client_id() const { return client_id_; }
  const JobSpec& spec() const { return spec_; }
  const Plan& plan() const { return *plan_; }
  uint64_t steps_per_epoch() const { return steps_; }
  uint64_t start_batch() const { return start_; }
  uint32_t window_size() const { return window_size_; }
  bool stages() const { return stager_ != nullptr; }  // the GPU path: a staging thread copies every batch
  // The stager's spare pinned buffers that sealed batches are opened into (null: none, or the host path).
  std::shared_ptr<HostBufferPool> spare_buffers() const { return stager_ ? stager_->spare_buffers() : nullptr; }
  const MetricLabels& labels() const { return labels_; }
  int doorbell() const { return doorbell_; }

  // ---- the I/O thread ---------------------------------------------------------------------------------------
  // A batch that passed every check of the codec and carries the plan's samples: into its slot (confirmed, or
  // waiting for the coordinator to list its attempt), or counted by the reason it was refused.
  PrefetchWindow::Outcome Accept(std::unique_ptr<ReceivedBatch> batch);
  // Something to acknowledge arrived or was released since the last heartbeat.
  bool AckPending() const;
  // A heartbeat is leaving: fills in its acks (consumed, the received set) and telemetry, and returns its number
  // (1-based), which its reply's NoteLeases names.
  uint64_t TakeAck(ClientHeartbeatRequest& heartbeat);
  // The coordinator's live leases, from the reply to heartbeat `heartbeat`: confirms or drops waiting batches.
  void NoteLeases(const std::vector<LeaseRef>& leases, uint64_t heartbeat);
  // A new coordinator session: its attempt numbers are the ones that count.
  void ForgetAttempts();
  // A batch refused before it reached the window (malformed, wrong shape or payload): counted, never delivered.
  void CountBadFrame();
  void CountWorkerReconnect();
  // A sealed batch that did not open (replayed: its counters were taken before).
  void CountSealRefused(bool replayed);
  void CountReceiveSeconds(double seconds);  // time a thread spent opening a batch (ClientStats::receive_seconds)
  // Counts a batch whose samples are not the plan's. True when it came under the attempt the coordinator lists for
  // its unit now: a live lease's batch, so the lie is its sender's, not an old plan's batch sent late.
  bool CountWrongSamples(uint64_t unit, uint64_t attempt);
  void CountWorkerError();
  // The workers this client holds connections to ("id endpoint" each), for Stats() and /state.
  void NoteWorkers(std::vector<std::string> endpoints);
  // The coordinator answered the registration and will expect a heartbeat every `interval`; then any answer.
  void StartHeartbeats(Duration interval);
  void CoordinatorAnswered();
  // Ends the stream for the application: Next() returns this error from now on.
  void Fail(const Status& status);
  TransportErrors& transport_errors() { return transport_errors_; }  // thread-safe itself
  const TransportErrors& transport_errors() const { return transport_errors_; }
  void MarkIoTurn() { io_turned_ns_.store(clock_->Now().time_since_epoch().count(), std::memory_order_relaxed); }
  // The client is closing: the I/O and staging threads end.
  void Close();
  bool closing() const;
  void Wake() const;

  // ---- the application --------------------------------------------------------------------------------------
  // The next batch in plan order, or end of epoch / end of job; DeadlineExceeded (retryable) after `timeout`;
  // ResourceExhausted (retryable) when a stager's every slot is held by the consumer.
  StatusOr<Taken> Next(std::chrono::milliseconds timeout);
  // Hands back the batch Next() returned last, unreleased: the next Next() returns it again.
  Status PutBack(std::unique_ptr<ReceivedBatch>& batch);
  void Release(uint64_t global);
  // The global index of the batch Next() returns next (what a checkpoint names).
  uint64_t position() const;
  ClientStats Stats() const;
  // Where the process's metrics endpoint serves this client, once it does.
  void NoteMetricsAddress(std::string address);

  // ---- the staging thread (with a stager only) --------------------------------------------------------------
  void StageLoop();

  // ---- health and observability (the process's admin endpoint) ----------------------------------------------
  Status Live() const;   // the I/O thread turned within the last 10 s
  Status Ready() const;  // the rank is ours and the coordinator answered within a few heartbeats
  // Per batch (thread-safe themselves): the wait in Next(), the time between consecutive batches, host-to-device
  // copies (the GPU path observes these; the host path makes none).
  const prometheus::Histogram& wait_histogram() const { return wait_histogram_; }
  const prometheus::Histogram& step_histogram() const { return step_histogram_; }
  const prometheus::Histogram& h2d_histogram() const { return h2d_histogram_; }
  uint64_t h2d_bytes() const;
  // Window, workers and figures as JSON (/state).
  std::string StateJson() const;

 private:
  bool ReadyToHandOut() const STOKER_REQUIRES(mu_);
  bool StageWanted() const STOKER_REQUIRES(mu_);
  Taken Handout(double waited) STOKER_REQUIRES(mu_);
  void CountQuarantined(const ReceivedBatch& batch, int sign) STOKER_REQUIRES(mu_);
  void AddProbedStall(TimePoint wait_start, TimePoint wait_end, double waited) STOKER_EXCLUDES(mu_);
  void NotifyArrived() STOKER_EXCLUDES(mu_);

  // Fixed at construction.
  const std::shared_ptr<const Clock> clock_;
  const std::string client_id_;
  const int doorbell_;
  // Fixed by Start.
  JobSpec spec_;
  std::optional<Plan> plan_;
  uint64_t steps_ = 0;
  uint64_t total_ = 0;  // batches of all epochs
  uint32_t window_size_ = 0;
  uint64_t start_ = 0;
  std::shared_ptr<StallProbe> stall_probe_;
  std::shared_ptr<BatchStager> stager_;
  MetricLabels labels_;

  prometheus::Histogram wait_histogram_{StepBuckets()};
  prometheus::Histogram step_histogram_{StepBuckets()};
  prometheus::Histogram h2d_histogram_{StepBuckets()};
  std::atomic<int64_t> io_turned_ns_{0};   // clock time the I/O thread last went round its loop
  TransportErrors transport_errors_;       // the I/O thread's ZeroMQ failures

  mutable Mutex mu_;
  CondVar ready_;
  CondVar stage_wanted_;  // a slot filled or was released: the staging thread may have work
  std::optional<PrefetchWindow> window_ STOKER_GUARDED_BY(mu_);
  uint64_t staged_ STOKER_GUARDED_BY(mu_) = 0;  // with a stager, every index below is staged
  uint64_t heartbeats_sent_ STOKER_GUARDED_BY(mu_) = 0;
  bool end_of_epoch_pending_ STOKER_GUARDED_BY(mu_) = false;
  uint32_t ended_epoch_ STOKER_GUARDED_BY(mu_) = 0;
  bool ack_dirty_ STOKER_GUARDED_BY(mu_) = false;
  bool closing_ STOKER_GUARDED_BY(mu_) = false;
  Status fatal_ STOKER_GUARDED_BY(mu_);
  ClientStats stats_ STOKER_GUARDED_BY(mu_);
  bool delivered_any_ STOKER_GUARDED_BY(mu_) = false;
  TimePoint last_return_ STOKER_GUARDED_BY(mu_);  // when Next() last returned a batch
  std::vector<std::string> worker_endpoints_ STOKER_GUARDED_BY(mu_);
  uint64_t h2d_bytes_ STOKER_GUARDED_BY(mu_) = 0;
  TimePoint coordinator_heard_ STOKER_GUARDED_BY(mu_);  // its last reply
  Duration heartbeat_interval_ STOKER_GUARDED_BY(mu_) = Millis(250);
  std::string metrics_address_ STOKER_GUARDED_BY(mu_);
};

// A received batch from its checked header and its payload frames. With `join_frames` (the host path, which hands
// over one contiguous buffer) several frames are copied into one; otherwise a stager copies them, in order.
std::unique_ptr<ReceivedBatch> MakeReceivedBatch(BatchHeader header, uint64_t steps_per_epoch,
                                                 std::vector<zmq::message_t> payload, bool join_frames);

}  // namespace stoker::client
