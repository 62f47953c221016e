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

#include "base/sync.h"
#include <zmq.hpp>

#include "auth/keys.h"
#include "client/src/client_core.h"
#include "client/src/client_impl.h"
#include "client/src/rank_claim.h"
#include "client/src/sealed_connection.h"
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
  // `local_group`: ClientImpl's (the node-local workers' group in options.local_dir; empty: none).
  IoThread(const ClientOptions& options, Security security, std::shared_ptr<ClientCore> core,
           std::string local_group = "");
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
  // WatchConnections: a sealed connection silent this long while credited is offered again, whose answer shows it
  // alive; an offer unanswered for kFirstReopen, then twice as long each time up to kMaxReopen, opens it anew.
  static constexpr Duration kProbeSilence = Millis(10000);
  static constexpr Duration kFirstReopen = Millis(2000);
  static constexpr Duration kMaxReopen = Millis(32000);
  struct WorkerConnection {
    std::unique_ptr<zmq::socket_t> socket;
    std::unique_ptr<SealedConnection> seal;  // null without CURVE
    std::optional<Credit> pending_credit;    // the latest credit, until the connection's keys are there
    TimePoint last_offer;
    TimePoint last_heard;                    // when a frame last came (none yet: the clock's zero)
    uint32_t credits = 0;                    // the last credit given: 0, nothing is owed us, so silence says nothing
    Duration reopen_after = kFirstReopen;    // an offer unanswered this long opens the connection anew
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
  // A DEALER to `info`'s data port (a PLAIN client of its ticket, sealed, unless the port is insecure or
  // node-local); connect() only starts the connection.
  StatusOr<WorkerConnection> Connect(const WorkerInfo& info);
  // Sealed connections that may be dead though the list still names their worker (io_thread.cc says how one dies):
  // probed when silent, opened anew when the probe goes unanswered. Twice a second at most.
  void WatchConnections();
  void SendCredit(WorkerConnection& w, const Credit& credit);
  void SendOffer(WorkerConnection& w);
  // Handles what only the connection's sealing is about (a welcome, the worker's request to offer again, opening
  // a sealed batch); false when the message goes no further.
  bool Unseal(const std::string& worker_id, WorkerConnection& w, StatusOr<WorkerMessage>& message,
              std::span<const uint8_t> header, std::vector<zmq::message_t>& payload, const zmq::message_t* trailer);
  // A large sealed batch's frames go to the process's openers (OpenPool()), opened in place or into `into`; it
  // comes back through FinishOpens.
  void OpenOnPool(const std::string& worker_id, SealedConnection::Sealed sealed, StatusOr<WorkerMessage> message,
                  std::vector<zmq::message_t> payload, HostBufferPool::Buffer into);
  // The batches the openers finished: counters taken, handed to the Impl (or refused and counted).
  void FinishOpens();
  void DrainWorker(const std::string& id, WorkerConnection& w);
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
  TimePoint next_watch_;
  struct Opening;
  struct Opened {  // shared with the openers, which may outlive this thread's last turn
    Mutex mu;
    std::vector<std::shared_ptr<Opening>> done STOKER_GUARDED_BY(mu);
  };
  std::shared_ptr<Opened> opened_ = std::make_shared<Opened>();
  std::thread thread_;
};

}  // namespace stoker::client
