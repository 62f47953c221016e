// ClientCore: what a Client's threads share — the prefetch window (client/src/window.h), the positions, the
// counters, and the consumer's side of handing batches out (Next, PutBack, Release). The I/O thread
// (client/src/io_thread.h) inserts what arrives; the application thread takes batches in plan order; with a
// BatchStager (the GPU path) a staging thread stages each batch, in plan order, before Next() may hand it out.
// Every time it reads goes through its Clock, so client_core_test.cc drives it on a FakeClock without sockets.
//
// The core outlives the Client while batches are out (a Batch holds it to release its slot), so it owns the
// doorbell eventfd that wakes the I/O thread.
//
// Thread safety: every method may be called from any thread; fields marked GUARDED_BY are read under `mu`.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <prometheus/histogram.h>
#include <string>
#include <vector>

#include "client/src/received_batch.h"
#include "client/src/window.h"
#include "stoker/clock.h"
#include "wire/data_messages.h"
#include "stoker/job_spec.h"
#include "base/metrics.h"
#include "dataset/plan.h"
#include "base/sync.h"
#include "wire/transport_errors.h"
#include "stoker/client_types.h"

namespace stoker::client {

struct ClientCore {
  // What Next() hands the Client: a batch, or the end of an epoch or of the job.
  struct Taken {
    DeliveryKind kind = DeliveryKind::kBatch;
    uint32_t epoch = 0;
    std::unique_ptr<ReceivedBatch> batch;  // kBatch only
  };

  // `clock` and the job's shape are fixed for the core's life; Start() sets the window once registered.
  ClientCore(std::shared_ptr<const Clock> clock, std::string client_id);
  ~ClientCore();

  // Once, after registration: the job as the coordinator described it, the window and where this session starts.
  void Start(const JobSpec& job_spec, const Plan& job_plan, uint64_t steps_per_epoch, uint32_t window_size,
             uint64_t start_batch);

  // ---- the I/O thread ---------------------------------------------------------------------------------------
  // A batch that passed every check of the codec and carries the plan's samples: into its slot (confirmed, or
  // waiting for the coordinator to list its attempt), or counted by the reason it was refused.
  PrefetchWindow::Outcome Accept(std::unique_ptr<ReceivedBatch> batch);
  // A heartbeat is leaving: returns its number (1-based), which its reply's NoteLeases names.
  uint64_t HeartbeatSent();
  // The coordinator's live leases, from the reply to heartbeat `heartbeat`: confirms or drops waiting batches.
  void NoteLeases(const std::vector<LeaseRef>& leases, uint64_t heartbeat);
  // A batch refused before it reached the window (malformed, wrong shape or payload): counted, never delivered.
  void CountBadFrame();
  // A batch whose sample ids or padding are not the plan's: counted, never delivered.
  void CountWrongSamples();
  void CountWorkerError();
  // Ends the stream for the application: Next() returns this error from now on.
  void Fail(const Status& status);
  void Wake() const;

  // ---- the application --------------------------------------------------------------------------------------
  // The next batch in plan order, or end of epoch / end of job; DeadlineExceeded (retryable) after `timeout`;
  // ResourceExhausted (retryable) when a stager's every slot is held by the consumer.
  StatusOr<Taken> Next(std::chrono::milliseconds timeout);
  // Hands back the batch Next() returned last, unreleased: the next Next() returns it again.
  Status PutBack(std::unique_ptr<ReceivedBatch>& batch);
  void Release(uint64_t global);
  ClientStats Stats() const;

  // ---- the staging thread (with a stager only) --------------------------------------------------------------
  void StageLoop();

  // ---- health (the process's admin endpoint) ----------------------------------------------------------------
  void MarkIoTurn() { io_turned_ns.store(clock->Now().time_since_epoch().count(), std::memory_order_relaxed); }
  Status Live() const;   // the I/O thread turned within the last 10 s
  Status Ready() const;  // the rank is ours and the coordinator answered within a few heartbeats

  // Constant after Start.
  const std::shared_ptr<const Clock> clock;
  const std::string client_id;
  JobSpec spec;
  uint64_t steps = 0;
  uint64_t total = 0;  // batches of all epochs
  uint32_t window_size = 0;
  uint64_t start = 0;
  std::optional<Plan> plan;
  int doorbell = -1;  // wakes the I/O thread (a slot was released, or closing)
  std::shared_ptr<StallProbe> stall_probe;
  std::shared_ptr<BatchStager> stager;  // null: the host path
  MetricLabels labels;                  // pipeline, rank, gpu, gpu_uuid
  // Per batch (thread-safe themselves): the wait in Next(), the time between consecutive batches, host-to-device
  // copies (the GPU path observes these; the host path makes none).
  prometheus::Histogram wait_histogram{StepBuckets()};
  prometheus::Histogram step_histogram{StepBuckets()};
  prometheus::Histogram h2d_histogram{StepBuckets()};
  std::atomic<int64_t> io_turned_ns{0};  // clock time the I/O thread last went round its loop
  TransportErrors transport_errors;      // the I/O thread's ZeroMQ failures (thread-safe itself)

  mutable Mutex mu;
  CondVar ready;
  CondVar stage_wanted;  // a slot filled or was released: the staging thread may have work
  std::optional<PrefetchWindow> window STOKER_GUARDED_BY(mu);
  uint64_t staged STOKER_GUARDED_BY(mu) = 0;  // with a stager, every index below is staged
  uint64_t heartbeats_sent STOKER_GUARDED_BY(mu) = 0;
  bool end_of_epoch_pending STOKER_GUARDED_BY(mu) = false;
  uint32_t ended_epoch STOKER_GUARDED_BY(mu) = 0;
  bool ack_dirty STOKER_GUARDED_BY(mu) = false;
  bool closing STOKER_GUARDED_BY(mu) = false;
  Status fatal STOKER_GUARDED_BY(mu);
  ClientStats stats STOKER_GUARDED_BY(mu);
  bool delivered_any STOKER_GUARDED_BY(mu) = false;
  TimePoint last_return STOKER_GUARDED_BY(mu);  // when Next() last returned a batch
  std::vector<std::string> worker_endpoints STOKER_GUARDED_BY(mu);
  uint64_t h2d_bytes STOKER_GUARDED_BY(mu) = 0;
  TimePoint coordinator_heard STOKER_GUARDED_BY(mu);  // its last reply
  Duration heartbeat_interval STOKER_GUARDED_BY(mu) = Millis(250);
  std::string metrics_address STOKER_GUARDED_BY(mu);

 private:
  bool ReadyToHandOut() const STOKER_REQUIRES(mu);
  bool StageWanted() const STOKER_REQUIRES(mu);
  Taken Handout(double waited) STOKER_REQUIRES(mu);
  void CountQuarantined(const ReceivedBatch& batch, int sign) STOKER_REQUIRES(mu);
  void AddProbedStall(TimePoint wait_start, TimePoint wait_end, double waited) STOKER_EXCLUDES(mu);
};

// A received batch from its checked header and its payload frames. With `join_frames` (the host path, which hands
// over one contiguous buffer) several frames are copied into one; otherwise a stager copies them, in order.
std::unique_ptr<ReceivedBatch> MakeReceivedBatch(BatchHeader header, uint64_t steps_per_epoch,
                                                 std::vector<zmq::message_t> payload, bool join_frames);

}  // namespace stoker::client
