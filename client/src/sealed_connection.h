// SealedConnection: a client's side of one sealed data connection (auth/seal.h), socket-free. The client offers
// first (Offer), the worker answers (Welcome), and from then on every credit carries a tag (SealCredit) and every
// batch is opened in place before anything else looks at its pixels (Open). An offer made again (the worker lost
// the session) keeps the old keys until the new ones come, so batches already on their way still open.
//
// Thread safety: the client's I/O thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "auth/seal.h"
#include "wire/data_messages.h"

namespace stoker::client {

class SealedConnection {
 public:
  // `client_identity`: what this client authenticates as; `seal_key`: the pair's key the coordinator listed.
  SealedConnection(std::string client_identity, std::string worker_id, std::string seal_key);
  ~SealedConnection();  // the seal key is wiped
  SealedConnection(const SealedConnection&) = delete;
  SealedConnection& operator=(const SealedConnection&) = delete;

  // A fresh offer to send (the first message on the connection, and again whenever the worker asks).
  SealHello Offer();
  // The worker's answer to the last offer: the session's keys. FailedPrecondition without an offer outstanding,
  // InvalidArgument for an answer that gives no keys.
  Status Welcome(const SealWelcome& welcome);
  bool ready() const { return keys_ != nullptr; }
  // An offer is out and no welcome has answered it yet.
  bool offering() const { return offer_.has_value(); }

  // The trailer to send after a credit frame holding `credit` (ready() only).
  std::vector<uint8_t> SealCredit(std::span<const uint8_t> credit);

  // Opens a sealed batch's payload frames in place, or with `into` one after another into that buffer (room for
  // every frame's bytes; the frames are left as they came): `header` is its header frame's bytes, `trailer` the
  // frame after its payload. DataLoss if any frame fails (what was opened is then zeroed), AlreadyExists if its
  // counters were taken before (a replay), InvalidArgument for a trailer that does not fit the frames. The three
  // steps below, on this thread.
  Status Open(std::span<const uint8_t> header, std::vector<zmq::message_t>& frames, std::span<const uint8_t> trailer,
              uint8_t* into = nullptr);

  // Opening in steps, so that the frames of large batches can be opened on other threads: Prepare (this thread)
  // takes what opening needs, OpenFrame (any thread, each frame once) opens one frame in place or into `out` (of
  // the frame's size), Accept (this thread, once every frame opened) takes the batch's counters, refusing a replay.
  // A session's keys and the counters it has taken (a batch opened under a session is judged by its window, even
  // if the connection has a newer session by the time it is accepted).
  struct Keys {
    std::shared_ptr<SealSession> session;
    ReplayWindow replay;
  };
  struct Sealed {
    std::shared_ptr<Keys> keys;
    SealTrailer trailer;
    std::string header;
  };
  StatusOr<Sealed> Prepare(std::span<const uint8_t> header, size_t frames, std::span<const uint8_t> trailer) const;
  static Status OpenFrame(const Sealed& sealed, size_t frame, zmq::message_t& bytes, uint8_t* out = nullptr);
  Status Accept(const Sealed& sealed);

 private:
  const std::string client_identity_;
  const std::string worker_id_;
  std::string seal_key_;  // not const: wiped by the destructor
  std::optional<SealOffer> offer_;  // the outstanding offer
  std::shared_ptr<Keys> keys_;
};

}  // namespace stoker::client
