// CoordinatorService: the coordinator's transport adapter. One thread owns the ROUTER socket: it receives
// [routing id][Request] messages, decodes each fully into common/control_messages.h values (malformed frames are
// answered with INVALID_ARGUMENT and counted, never passed on), calls the Impl, and queues the Reply. After each
// batch of requests it syncs the journal once (group commit) and only then sends the replies: a peer never hears
// of a change the coordinator could forget. It also drives the Impl's Tick.
//
// When the journal cannot be written (its volume is full, an I/O error), the service neither exits nor answers
// early: the replies of the batch that failed are held, new requests are answered UNAVAILABLE (peers retry), time
// stands still for leases and liveness, and the sync is retried with backoff; once it succeeds the held replies go
// out and the Impl excuses the silence the outage caused. Failures are counted and the state is a metric.
//
// Retries are answered from a small per-sender cache of recent replies (reply_cache.h), so a request the
// coordinator already applied (its reply was lost) is not applied twice. Only granted leases are cached, keyed by
// the sender's authenticated identity and id, and the cache holds at most max_cached_senders senders and
// max_cached_reply_bytes bytes.
//
// With CURVE (the process's ZapHandler admits the keys), each request's Caller is the identity libzmq authenticated
// for its connection; a key of one role cannot make another role's requests (PERMISSION_DENIED, counted).
//
// Thread safety: Run() is called from one thread; Stats() from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <prometheus/histogram.h>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>
#include <zmq.hpp>

#include "base/admin_server.h"
#include "wire/control_codec.h"
#include "auth/curve.h"
#include "stoker/status.h"
#include "base/sync.h"
#include "wire/transport_errors.h"
#include "coordinator/impl.h"
#include "coordinator/journal.h"
#include "coordinator/reply_cache.h"

namespace stoker::coordinator {

// Fault injection for the crash tests: the `count`-th time the service reaches `point`, it kills itself (SIGKILL).
//   synced  — the journal is synced, the replies are not sent yet (a change the peers never heard of)
//   replied — the replies are sent, the next batch's journal records are not written (a change not yet durable)
//   torn    — half of the next batch's journal bytes are written, then death (a torn tail)
struct CrashPoint {
  std::string point;
  uint64_t count = 0;
  // Parses "point:count"; an empty string means none.
  static StatusOr<CrashPoint> Parse(const std::string& text);
};

struct ServiceOptions {
  std::string listen = "tcp://*:7400";
  int64_t max_message_bytes = 1 << 20;  // control messages are small; larger ones drop the connection
  Duration tick = Millis(50);
  size_t replies_cached_per_sender = 8;
  size_t max_cached_senders = 4096;  // registered workers' reply caches held at once (least recently used go)
  size_t max_cached_reply_bytes = size_t{64} << 20;  // all cached replies together (least recently used go)
  CrashPoint crash;
  // CURVE: the coordinator's key pair (empty: CURVE off, --insecure). The process's ZapHandler must be running.
  std::string curve_public_key;
  std::string curve_secret_key;
};

struct ServiceStats {
  uint64_t requests = 0;
  uint64_t bad_frames = 0;                         // unparseable, wrong frame count, wrong protocol version
  uint64_t retries_answered_from_cache = 0;
  uint64_t reply_cache_bytes = 0;       // held now
  uint64_t reply_cache_evictions = 0;   // senders dropped to stay under the cache's caps
  uint64_t journal_syncs = 0;
  uint64_t journal_write_failures = 0;             // syncs that failed (each retry of an outage counts)
  bool journal_writable = true;                    // false during an outage
  std::string journal_failure;                     // the last failure, while it lasts
  std::map<std::string, uint64_t> by_method_code;  // "lease_request/OK" -> count
  std::map<std::string, uint64_t> transport_errors;  // ZeroMQ failures survived, by site
};

// Latencies, observed as they happen (prometheus::Histogram is thread-safe to read while observed).
struct ServiceHistograms {
  // Per method, indexed as MethodNames(): from receipt to the reply leaving, journal sync included. Parked lease
  // requests wait by design and are not observed.
  std::vector<std::unique_ptr<prometheus::Histogram>> request_seconds;
  std::unique_ptr<prometheus::Histogram> journal_sync_seconds;  // one group commit: write + fdatasync
};

class CoordinatorService {
 public:
  // `journal` may be null (nothing durable). It must be the one the Impl appends to. `clock`: the Impl's (every
  // time the service reads, for its cache, its journal outages, its ticks and its latencies, comes from it).
  CoordinatorService(CoordinatorImpl& impl, Journal* journal, zmq::context_t& context, const ServiceOptions& options,
                     const Clock& clock);

  // Binds the ROUTER socket; returns the endpoint bound (with the real port for ":0").
  StatusOr<std::string> Bind();
  // Serves until `stop` becomes true. Returns an error if the socket or the journal fails.
  Status Run(const std::atomic<bool>& stop);

  ServiceStats Stats() const;
  const ServiceHistograms& histograms() const { return histograms_; }
  // Beaten every turn of Run(): the liveness probe.
  const LoopWatch& watch() const { return watch_; }

 private:
  // Who asked, for a request the Impl answers later (it knows the request only by its handle).
  struct Asker {
    std::string peer;
    std::string cache_key;  // "<identity>/<sender id>"
    uint64_t request_id = 0;
  };
  struct Outgoing {
    std::string peer;
    std::string sender;
    uint64_t request_id = 0;
    std::string frame;  // the encoded reply
    prometheus::Histogram* latency = nullptr;  // observed when sent
    TimePoint received;
  };
  // While the journal cannot be written: since when, and when the sync is tried again.
  struct JournalOutage {
    TimePoint since;
    TimePoint next_retry;
    Duration backoff;
  };
  void HandleMessage(const std::string& peer, zmq::message_t& frame);
  void Send(const Outgoing& out);
  void NoteJournalFailure(const Status& status, TimePoint now);
  void EndJournalOutage(TimePoint now);
  void Queue(const std::string& peer, const std::string& sender, uint64_t request_id, zmq::message_t reply,
             prometheus::Histogram* latency = nullptr, TimePoint received = {});
  void QueueDeferred();
  Status Flush();  // sync the journal, then send every queued reply
  // One request off the socket: [routing id][frame]. False when none is waiting; an error if the socket failed.
  StatusOr<bool> ReceiveOne();
  StatusOr<ReplyBody> Dispatch(const std::string& peer, const std::string& cache_key, const Caller& caller,
                               const DecodedRequest& request, bool* parked);
  void MaybeCrash(const char* point);
  void Count(const char* method, StatusCode code);

  CoordinatorImpl& impl_;
  Journal* const journal_;
  ServiceOptions options_;
  zmq::socket_t socket_;
  std::vector<Outgoing> outbox_;
  // Recent lease replies per sender (the one request whose retry must not be applied twice).
  void Remember(const std::string& sender, uint64_t request_id, const zmq::message_t& reply);
  ReplyCache reply_cache_;
  std::set<std::pair<std::string, uint64_t>> parked_;  // (sender, request id) of parked lease requests
  std::unordered_map<RequestHandle, Asker> askers_;    // parked lease requests by the handle the Impl knows
  RequestHandle next_handle_ = 1;
  uint64_t crash_seen_ = 0;
  std::optional<JournalOutage> outage_;
  TransportErrors transport_errors_;
  mutable Mutex stats_mu_;
  ServiceStats stats_ STOKER_GUARDED_BY(stats_mu_);
  ServiceHistograms histograms_;
  const Clock& clock_;
  LoopWatch watch_{clock_};
};

}  // namespace stoker::coordinator
