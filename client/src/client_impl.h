// ClientImpl: every decision a client makes about the coordinator and the workers, with no sockets and no threads,
// on the client's Clock — claiming its rank (the registration, sent again while the coordinator does not answer,
// and asked for again while a live session holds the rank), heartbeats that carry the acks (promptly when something
// changed, coalesced to one per 2 ms, and every heartbeat interval regardless), the session's loss and re-claiming
// it, which workers to hold a connection to (the coordinator's list in its order, at most ClientOptions::max_workers
// and 64 new ones a second; when the list is longer, connections that delivered nothing for 10 s make room for the
// rest in turn), their credits (refreshed every second, withdrawn on leaving), and what arrives from workers: a
// batch must carry its plan's sample ids and padding flags (a worker that sends one that does not is disconnected
// for good and reported in every heartbeat), and workers that keep saying they cannot serve the job end it after
// a grace.
//
// Its adapter (client/src/io_thread.cc) owns the sockets. It decodes what arrives (replies, worker frames against
// expectation()), hands it over, calls Tick() as time passes, and after each call carries out what the Impl wants
// done from TakeOutbox(), as the worker's adapter drains WorkerImpl's. The Impl works over ClientCore, the state the
// application shares: batches that pass go into its window, acks are read from it, and a fatal state (the rank lost
// to another client, no worker able to serve) goes there too, where Next() returns it. client_impl_test.cc drives it
// on a FakeClock.
//
// Thread safety: none; before Start it belongs to the thread that connects, after to the client's I/O thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "client/src/client_core.h"
#include "stoker/client_types.h"
#include "stoker/clock.h"
#include "wire/control_codec.h"
#include "wire/data_codec.h"
#include "wire/request_tracker.h"

namespace stoker::client {

class ClientImpl {
 public:
  // What the Impl asks its adapter to do. Carried out after every call that hands the Impl something, in this
  // order: requests, then opens, then credits (a new connection's first credit follows its open), then closes (a
  // connection given up on gets its withdrawal first).
  struct Outbox {
    std::vector<RequestTracker::Pending> requests;        // to the coordinator
    std::vector<WorkerInfo> opens;                        // connections to open (or reopen at a new endpoint)
    std::vector<std::pair<std::string, Credit>> credits;  // to the connection of a worker id
    std::vector<std::string> closes;                      // worker ids whose connection goes
  };

  // `curve`: this client speaks CURVE, so a listed worker must name a key or a ticket for its data port.
  // `local_group`: the group of the node-local workers in options.local_dir (base/local_group.h), sent with the
  // registration and heartbeats; their ipc:// sockets there are then accepted, unsealed. Empty: none.
  ClientImpl(const ClientOptions& options, ClientCore& core, bool curve, std::string local_group = "");

  // ---- claiming the rank (before Start) -----------------------------------------------------------------------
  // Sends the registration. Unanswered, it goes again every 2 s (at once after UNAVAILABLE) until the connect
  // timeout; a rank a live session holds is asked for again every 250 ms until the claim timeout.
  // probe: only describe the job (Client::Describe); the claim's answer is then all there is.
  void Register(const std::optional<ResumePoint>& resume, bool probe = false);
  // Empty while the claim is undecided; then the coordinator's answer, or DeadlineExceeded.
  const std::optional<StatusOr<RegisterClientResponse>>& claim() const { return claim_result_; }

  // Whether `info` is one of this client's node-local workers: an ipc:// socket in its local directory, this
  // client having a local group. Connected to unsealed.
  bool IsNodeLocal(const WorkerInfo& info) const;
  // The latest list's entry for `worker_id`, or null: what a connection opened anew dials with.
  const WorkerInfo* Listed(const std::string& worker_id) const;

  // ---- the session (the core is started) ----------------------------------------------------------------------
  // The rank is ours: connect to the listed workers, credit them, and from now on heartbeat.
  void Start(const RegisterClientResponse& registered);
  // A reply from the coordinator (any request of ours; replies to requests given up on are dropped).
  void HandleReply(const DecodedReply& reply);
  // A worker's message as the adapter decoded it against expectation() (an error: the frames were refused), with
  // the payload frames that came after its header; or, for a sealed batch opened into a stager's spare buffer,
  // no frames and that buffer.
  // `worker_id`: whose connection it came on. A batch that is not the plan's rejects that worker for good.
  void HandleWorkerMessage(const std::string& worker_id, StatusOr<WorkerMessage> message,
                           std::vector<zmq::message_t> payload, HostBufferPool::Buffer opened = HostBufferPool::Buffer());
  // The adapter could not open the connection Outbox::opens asked for (out of descriptors, a bad address).
  void OpenFailed(const std::string& worker_id, const Status& why);
  // Heartbeats and acks, credit refreshes, requests past their deadline; before Start, the claim's retries.
  void Tick();
  // Leaving (or giving back an unused claim): withdraws every credit and deregisters. Returns the request's id.
  uint64_t Leave();

  Outbox TakeOutbox();

  // ---- what it looks like -------------------------------------------------------------------------------------
  bool IsPending(uint64_t request_id) const { return tracker_.IsPending(request_id); }
  // What every batch must agree with (set by Start), and the most payload frames one may come in.
  const BatchExpectation& expectation() const { return expected_; }
  // The same for an unsealed connection (a node-local worker's, IsNodeLocal).
  const BatchExpectation& unsealed_expectation() const { return expected_unsealed_; }
  size_t max_payload_frames() const { return max_payload_frames_; }
  bool session_lost() const { return session_lost_; }
  size_t connections() const { return connections_.size(); }

 private:
  struct Connection {
    std::string endpoint;
    std::string ticket;  // its data ticket: a new one (the worker id registered by a new process) opens it again
    TimePoint credited;
    TimePoint opened;
    bool local = false;  // a node-local worker's: never passed over
  };

  uint64_t Send(RequestBody body);
  void StartClaim();
  void SendClaim();
  void ClaimReplied(uint64_t request_id, const DecodedReply& reply);
  void TickClaim(TimePoint now);
  void SendHeartbeat();
  void RegisterReplied(const DecodedReply& reply);
  void HeartbeatReplied(const RequestTracker::Pending& request, const DecodedReply& reply);
  void LoseSession(const Status& why);
  void UpdateWorkers(const std::vector<WorkerInfo>& list);
  void OpenListed();
  void Open(const WorkerInfo& info);
  void RotateWorkers(TimePoint now);
  void RejectWorker(const std::string& worker_id);
  bool IsRejected(const std::string& worker_id) const;
  void NoteWorkers();
  void GiveCredit(const std::string& worker_id, uint32_t credits);
  bool PlannedSamples(const BatchHeader& header);
  void WorkerCannotServe(const Status& error);

  static constexpr Duration kClaimAttempt = Millis(2000);
  static constexpr Duration kClaimPause = Millis(250);
  static constexpr Duration kRequestTimeout = Millis(5000);
  static constexpr Duration kAckCoalescing = Millis(2);
  static constexpr Duration kCreditRefresh = Millis(1000);
  static constexpr Duration kWorkerErrorGrace = Millis(15000);
  static constexpr uint32_t kMaxOpensPerRound = 64;     // new worker connections per list update or round
  static constexpr Duration kRotationRound = Millis(1000);
  static constexpr Duration kRotation = Millis(10000);  // a connection with nothing delivered may then make room
  static constexpr size_t kMaxRejected = 4096;          // workers remembered as liars (more are still disconnected)

  const ClientOptions options_;
  ClientCore& core_;
  const Clock& clock_;  // the core's
  const bool curve_;
  const std::string local_group_;
  const std::string session_;  // this process's secret for its rank's session (auth/data_tickets.h)
  const std::string session_check_;  // its SessionCheck: what credits carry, so workers send only to this process
  RequestTracker tracker_;
  Outbox outbox_;

  // The claim: the registration as first sent, the attempt in flight and when it is given up on.
  RegisterClientRequest claim_request_;
  uint64_t claim_id_ = 0;
  TimePoint claim_deadline_;    // a held rank is asked for again until then
  TimePoint connect_deadline_;  // an unanswered registration is sent again until then
  TimePoint claim_resend_;      // when the attempt in flight is sent again
  std::optional<TimePoint> claim_pause_;  // asked again once this passes (the rank was held)
  std::optional<StatusOr<RegisterClientResponse>> claim_result_;

  bool started_ = false;
  BatchExpectation expected_;
  BatchExpectation expected_unsealed_;
  // The most payload frames one batch may come in: 1, or with payload_frame_bytes one per 4 KiB of a batch (a
  // worker may cut finer than asked).
  size_t max_payload_frames_ = 1;
  Duration heartbeat_interval_ = Millis(250);
  uint32_t credits_ = 1;
  uint64_t membership_version_ = 0;
  TimePoint next_heartbeat_;
  TimePoint last_ack_;
  bool registering_ = false;    // a re-registration is in flight
  bool session_lost_ = false;   // the coordinator gave the rank to another client: no more credits, no more acks
  std::optional<TimePoint> first_worker_error_;     // since the last accepted batch
  std::map<uint64_t, uint64_t> heartbeat_numbers_;  // heartbeat request id -> its number (ClientCore::TakeAck)
  std::map<std::string, Connection> connections_;   // by worker id
  std::vector<WorkerInfo> listed_;  // the coordinator's latest list: the usable entries, in its order
  std::set<std::string> passed_over_;  // closed for delivering nothing: opened again after the other listed ones
  std::set<std::string> rejected_;     // sent batches that were not the plan's: never connected again
  std::vector<std::string> reported_;  // the latest kMaxRejectedWorkers of those, in every heartbeat
  TimePoint next_rotation_;
  TimePoint next_turns_;     // passed-over workers get their turn again no sooner than this
  TimePoint last_delivery_;  // when a batch of the plan last came from any worker (or the session started)
  std::vector<PlannedSample> planned_;              // scratch: the plan's samples of the batch being checked
};

}  // namespace stoker::client
