// IoThread: a client's I/O thread, which owns every socket of the client — a DEALER to the coordinator (register,
// heartbeat + ack, deregister) and one DEALER per worker the coordinator lists (credits out, batches in). It keeps
// the worker connections in step with the coordinator's membership, refreshes credits, acks what arrived and what
// the application released, checks every frame through the data codec (common/data_codec.h) and hands the batches
// that pass to ClientCore's window.
//
// Every client of a process shares one ZeroMQ context (ProcessContext()), as the zguide advises.
//
// Thread safety: Register and Start from the thread that constructs it; the rest runs on its own thread, which the
// destructor joins after withdrawing credits and deregistering.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "client/src/client_core.h"
#include "wire/control_channel.h"
#include "wire/data_codec.h"
#include "auth/keys.h"
#include "stoker/client_types.h"

namespace stoker::client {

// The process's ZeroMQ context for clients: created on first use, never destroyed (a client's sockets may close
// during static destruction). Its I/O threads: $STOKER_CLIENT_IO_THREADS, else one per four cores (1 to 8), so a
// process feeding several GPUs spreads its receiving over as many threads.
zmq::context_t& ProcessContext();

class IoThread {
 public:
  // `security`: the client's CURVE key and the coordinator's public key (insecure: no CURVE).
  IoThread(const ClientOptions& options, Security security, std::shared_ptr<ClientCore> core);
  ~IoThread();
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  // Registers the rank synchronously (Connect's caller waits), retrying while the coordinator is unreachable.
  // A rank held by a live session is asked for again until ClientOptions::claim_timeout.
  StatusOr<RegisterClientResponse> Register(const std::optional<ResumePoint>& resume);
  // Starts the thread: connects to the workers the registration listed and gives them credit.
  void Start(const RegisterClientResponse& registered);

 private:
  struct WorkerConnection {
    std::string endpoint;
    std::unique_ptr<zmq::socket_t> socket;
    TimePoint credited;
  };

  StatusOr<RegisterClientResponse> RegisterOnce(const std::optional<ResumePoint>& resume);
  void Run();
  void Turn(TimePoint& next_heartbeat, TimePoint& last_ack);
  void Leave();
  void SendHeartbeat();
  void SendCredit(WorkerConnection& w, uint32_t credits);
  void UpdateWorkers(const std::vector<WorkerInfo>& list);
  void DrainControl();
  void HandleRegisterReply(const DecodedReply& reply);
  void HandleHeartbeatReply(const ControlChannel::Pending& request, const DecodedReply& reply);
  Status ConnectWorker(const WorkerInfo& info);
  bool PlannedSamples(const BatchHeader& header);
  void DrainWorker(WorkerConnection& w);
  std::vector<zmq::message_t> ReceivePayload(WorkerConnection& w, bool more);
  void Accept(zmq::message_t header, std::vector<zmq::message_t> payload);
  void WorkerCannotServe(const Status& error);
  void LoseSession(const Status& why);

  static constexpr std::chrono::milliseconds kCreditRefresh{1000};
  static constexpr std::chrono::milliseconds kWorkerErrorGrace{15000};

  const ClientOptions options_;
  const Security security_;
  std::shared_ptr<ClientCore> core_;
  const Clock& clock_;
  ControlChannel channel_;
  BatchExpectation expected_;  // set by Start: every batch is checked against it
  std::map<std::string, WorkerConnection> workers_;
  uint64_t membership_version_ = 0;
  Duration heartbeat_interval_ = Millis(250);
  uint32_t credits_ = 1;
  bool registering_ = false;
  bool session_lost_ = false;  // the coordinator gave the rank to another client: no more credits, no more acks
  std::optional<TimePoint> first_worker_error_;  // since the last accepted batch
  std::map<uint64_t, uint64_t> heartbeat_numbers_;  // heartbeat request id -> its number (ClientCore::HeartbeatSent)
  std::vector<PlannedSample> planned_;              // scratch: the plan's samples of the batch being checked
  // The most payload frames one batch may come in: 1, or with payload_frame_bytes one per 4 KiB of a batch (a
  // worker may cut finer than asked; set once the job's shape is known).
  size_t max_payload_frames_ = 1;
  std::thread thread_;
};

}  // namespace stoker::client
