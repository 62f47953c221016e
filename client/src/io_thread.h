// IoThread: a client's transport adapter, which owns every socket of the client — a DEALER to the coordinator and
// one DEALER per worker connection (credits out, batches in) — and its I/O thread. It polls, reads frames, decodes
// them (replies with the control codec, batch frames with the data codec against the Impl's expectation) and hands
// them to ClientImpl (client/src/client_impl.h), which decides everything: when to register, heartbeat and ack,
// which workers to connect to and credit, what a batch must be. After each hand-over it carries out the Impl's
// Outbox: requests to send, connections to open and close, credits to send.
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

#include "auth/keys.h"
#include "client/src/client_core.h"
#include "client/src/client_impl.h"
#include "client/src/rank_claim.h"
#include "stoker/client_types.h"

namespace stoker::client {

// The process's ZeroMQ context for clients: created on first use, never destroyed (a client's sockets may close
// during static destruction). Its I/O threads: $STOKER_CLIENT_IO_THREADS, else one per four cores (1 to 8), so a
// process feeding several GPUs spreads its receiving over as many threads.
zmq::context_t& ProcessContext();

class IoThread {
 public:
  // `security`: the client's CURVE key and the coordinator's public key (insecure: no CURVE). Throws
  // zmq::error_t if the coordinator's socket cannot be made (out of descriptors).
  IoThread(const ClientOptions& options, Security security, std::shared_ptr<ClientCore> core);
  ~IoThread();
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  // Claims the rank synchronously (Connect's caller waits), retrying while the coordinator is unreachable; a rank
  // held by a live session is asked for again until ClientOptions::claim_timeout. The claim gives the rank back if
  // it is dropped before Start.
  StatusOr<RankClaim> Register(const std::optional<ResumePoint>& resume);
  // The job as this client's shape would have it, claiming nothing (RegisterClient.probe).
  StatusOr<RegisterClientResponse> Describe();

 private:
  StatusOr<RegisterClientResponse> Ask(const std::optional<ResumePoint>& resume, bool probe);

 public:
  // Starts the thread, which takes the rank over: connects to the workers the registration listed and credits them.
  // The core must be started.
  void Start(RankClaim claim);

 private:
  struct WorkerConnection {
    std::string endpoint;
    std::unique_ptr<zmq::socket_t> socket;
  };

  void Run();
  void Turn();
  // Withdraws every credit and deregisters, waiting a moment for the coordinator's answer.
  void Leave();
  void CarryOut();
  // Waits up to `timeout` for the coordinator's socket; true if a reply is there.
  StatusOr<bool> PollControl(std::chrono::milliseconds timeout);
  void DrainControl();
  Status OpenWorker(const WorkerInfo& info);
  void SendCredit(WorkerConnection& w, const Credit& credit);
  void DrainWorker(WorkerConnection& w);
  std::vector<zmq::message_t> ReceivePayload(WorkerConnection& w, bool more);
  // A frame waiting on w's socket into `frame`; false when none is (or the receive failed: counted as recv_batch).
  bool ReceiveFrame(WorkerConnection& w, zmq::message_t& frame);

  const ClientOptions options_;
  const Security security_;
  std::shared_ptr<ClientCore> core_;
  const Clock& clock_;  // the core's
  ClientImpl impl_;
  zmq::socket_t control_;
  std::map<std::string, WorkerConnection> workers_;  // by worker id
  std::thread thread_;
};

}  // namespace stoker::client
