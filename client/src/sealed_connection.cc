// SealedConnection (sealed_connection.h): the client's half of the handshake, credit tags and opening batches.
#include "client/src/sealed_connection.h"

#include <sodium.h>

#include <cstring>

namespace stoker::client {

SealedConnection::SealedConnection(std::string client_identity, std::string worker_id, std::string seal_key)
    : client_identity_(std::move(client_identity)), worker_id_(std::move(worker_id)), seal_key_(std::move(seal_key)) {}

SealedConnection::~SealedConnection() { sodium_memzero(seal_key_.data(), seal_key_.size()); }

SealHello SealedConnection::Offer() {
  offer_ = SealOffer::Make();
  return SealHello{offer_->random(), offer_->public_key()};
}

Status SealedConnection::Welcome(const SealWelcome& welcome) {
  if (!offer_) return FailedPreconditionError("a seal welcome without an offer");
  SealTranscript t{client_identity_, worker_id_, offer_->random(), offer_->public_key(), welcome.random,
                   welcome.public_key};
  auto session = SealSession::Derive(seal_key_, t, *offer_, SealDirection::kClientToWorker);
  if (!session.ok()) return session.status();
  offer_.reset();  // its secret half is wiped: this answer was the only one it could take
  keys_ = std::make_shared<Keys>(Keys{std::move(*session), ReplayWindow()});
  return Status::Ok();
}

std::vector<uint8_t> SealedConnection::SealCredit(std::span<const uint8_t> credit) {
  SealTrailer trailer;
  trailer.first_counter = keys_->session->Reserve(1);
  trailer.tags.resize(1);
  const std::span<const uint8_t> associated[] = {credit};
  keys_->session->Seal(trailer.first_counter, associated, {}, trailer.tags[0]);
  return EncodeSealTrailer(trailer);
}

Status SealedConnection::Open(std::span<const uint8_t> header, std::vector<zmq::message_t>& frames,
                              std::span<const uint8_t> trailer, uint8_t* into) {
  STOKER_ASSIGN_OR_RETURN(Sealed sealed, Prepare(header, frames.size(), trailer));
  size_t at = 0;
  for (size_t f = 0; f < frames.size(); ++f) {
    if (Status opened = OpenFrame(sealed, f, frames[f], into == nullptr ? nullptr : into + at); !opened.ok()) {
      // The batch is one message: a frame that opened belongs to a batch that did not, so none of it stays
      // readable.
      if (into != nullptr) {
        std::memset(into, 0, at);
      } else {
        for (zmq::message_t& frame : frames) std::memset(frame.data(), 0, frame.size());
      }
      return opened;
    }
    at += frames[f].size();
  }
  return Accept(sealed);
}

StatusOr<SealedConnection::Sealed> SealedConnection::Prepare(std::span<const uint8_t> header, size_t frames,
                                                             std::span<const uint8_t> trailer) const {
  if (keys_ == nullptr) return DataLossError("a sealed batch before the connection's keys");
  STOKER_ASSIGN_OR_RETURN(SealTrailer t, DecodeSealTrailer(trailer, frames));
  return Sealed{keys_, std::move(t), std::string(reinterpret_cast<const char*>(header.data()), header.size())};
}

Status SealedConnection::OpenFrame(const Sealed& sealed, size_t frame, zmq::message_t& bytes, uint8_t* out) {
  const std::array<uint8_t, 4> index_bytes = SealFrameIndex(static_cast<uint32_t>(frame));
  const std::span<const uint8_t> header(reinterpret_cast<const uint8_t*>(sealed.header.data()), sealed.header.size());
  const std::span<const uint8_t> associated[] = {header, index_bytes};
  std::span<uint8_t> data(static_cast<uint8_t*>(bytes.data()), bytes.size());
  std::span<uint8_t> opened = out == nullptr ? data : std::span<uint8_t>(out, bytes.size());
  return sealed.keys->session->Open(sealed.trailer.first_counter + frame, associated, data, opened,
                                    sealed.trailer.tags[frame]);
}

Status SealedConnection::Accept(const Sealed& sealed) {
  // Only authenticated counters enter the window: a forger cannot push the window past real batches. Each session
  // has its own, so a batch of an earlier session is judged by the counters that session took.
  for (size_t f = 0; f < sealed.trailer.tags.size(); ++f) {
    if (!sealed.keys->replay.Accept(sealed.trailer.first_counter + f)) {
      return AlreadyExistsError("a sealed batch's counters were taken before");
    }
  }
  return Status::Ok();
}

}  // namespace stoker::client
