// DataPort (data_port.h): the data socket's security, what clients send, and the steps a batch takes out.
#include "worker/data_port.h"

#include "wire/data_codec.h"
#include "wire/frames.h"
#include "worker/impl.h"

namespace stoker::worker {

namespace {

// Sessions a worker keeps: one per client connection, as many as it keeps streams.
constexpr size_t kMaxSealSessions = WorkerImpl::kMaxStreams;

}  // namespace

DataPort::DataPort(zmq::context_t& context, std::shared_ptr<BatchBufferPool> pool, const std::string& worker_id,
                   std::shared_ptr<prometheus::Histogram> collate_seconds,
                   std::shared_ptr<prometheus::Histogram> send_seconds, TransportErrors& errors)
    : socket_(context, zmq::socket_type::router),
      sender_(socket_, std::move(pool), worker_id, std::move(collate_seconds), std::move(send_seconds), errors),
      sessions_(worker_id, kMaxSealSessions),
      errors_(errors) {
  SocketOptions o;
  o.max_message_bytes = 64 << 10;  // only credits and seal offers come in
  o.router_mandatory = true;       // a batch for a vanished client must fail, not vanish
  o.router_handover = true;
  o.send_hwm = 0;                  // credits bound what is queued, not a message count
  ConfigureSocket(socket_, o);
}

Status DataPort::Secure(zmq::context_t& context, const Security& security) {
  if (security.insecure) return Status::Ok();
  STOKER_ASSIGN_OR_RETURN(zap_, ZapHandler::Start(context, {}, /*plain=*/true));
  MakePlainServer(socket_);
  sealed_ = true;
  return Status::Ok();
}

StatusOr<std::string> DataPort::Bind(const std::string& listen) { return BindSocket(socket_, listen); }

void DataPort::SetTicketKey(const std::string& key) {
  if (zap_) zap_->SetTicketKey(key);
  sessions_.SetTicketKey(key);
}

void DataPort::Drain(const OnCredit& on_credit) {
  for (int i = 0; i < 1000; ++i) {
    zmq::message_t routing_id, frame, trailer;
    bool has_trailer = false;
    try {
      if (!socket_.recv(routing_id, zmq::recv_flags::dontwait)) return;
      if (!routing_id.more() || !socket_.recv(frame, zmq::recv_flags::dontwait)) {
        ++bad_frames_;
        continue;
      }
      if (frame.more()) {
        has_trailer = socket_.recv(trailer, zmq::recv_flags::dontwait).has_value();
        if (!has_trailer || trailer.more()) {  // at most a message and its trailer
          ++bad_frames_;
          while (trailer.more() && socket_.recv(trailer, zmq::recv_flags::dontwait)) {
          }
          continue;
        }
      }
    } catch (const zmq::error_t& e) {
      errors_.Note("recv_credit", e);
      return;
    }
    Handle(routing_id.to_string(), std::move(frame), has_trailer ? &trailer : nullptr, on_credit);
  }
}

void DataPort::Handle(const std::string& peer, zmq::message_t frame, const zmq::message_t* trailer,
                      const OnCredit& on_credit) {
  const std::string identity = PeerIdentityOf(frame);  // libzmq's word for the connection, not the sender's
  // A sealed credit's tag covers the frame's bytes exactly as they came.
  std::string bytes;
  if (trailer != nullptr) bytes.assign(static_cast<const char*>(frame.data()), frame.size());
  auto message = DecodeClientMessage(std::move(frame));
  if (!message.ok()) {
    ++bad_frames_;
    if (message.status().code() == StatusCode::kUnimplemented) SendError(peer, DataError{"", 0, message.status()});
    return;
  }
  if (auto* hello = std::get_if<SealHello>(&*message)) {
    if (!sealed_ || trailer != nullptr) {
      ++bad_frames_;
      return;
    }
    auto welcome = sessions_.Offer(peer, identity, *hello);
    if (!welcome.ok()) {
      SendError(peer, DataError{"", 0, welcome.status()});
      return;
    }
    zmq::message_t answer = EncodeSealWelcome(*welcome);
    zmq::message_t id(peer.data(), peer.size());
    try {
      if (socket_.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        socket_.send(answer, zmq::send_flags::dontwait);
      }
    } catch (const zmq::error_t& e) {
      errors_.Note("send_welcome", e);
    }
    return;
  }
  const Credit& credit = std::get<Credit>(*message);
  if (sealed_) {
    if (trailer == nullptr) {
      sessions_.CountRefusal("seal_unsealed_credit");
      return;
    }
    const std::span<const uint8_t> credit_bytes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    const std::span<const uint8_t> trailer_bytes(static_cast<const uint8_t*>(trailer->data()), trailer->size());
    std::string reason;
    if (Status ok = sessions_.CheckCredit(peer, identity, credit_bytes, trailer_bytes, &reason); !ok.ok()) {
      // A credit without a session, or whose tag does not hold (the worker made a new session for the connection
      // since: a replayed offer), is answered so that its client offers again; a replay is only dropped.
      if (reason == "seal_no_session" || reason == "seal_bad_tag") {
        SendError(peer, DataError{"", 0, FailedPreconditionError(kNoSealSession)});
      }
      return;
    }
  } else if (trailer != nullptr) {
    ++bad_frames_;
    return;
  }
  on_credit(peer, identity, credit);
}

void DataPort::SendError(const std::string& peer, const DataError& error) {
  zmq::message_t frame = EncodeDataError(error);
  try {
    zmq::message_t id(peer.data(), peer.size());
    if (socket_.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      socket_.send(frame, zmq::send_flags::dontwait);
    }
  } catch (const zmq::error_t& e) {
    errors_.Note("send_data_error", e);
  }
}

DataPort::Step DataPort::Next(BatchBuild& build, const std::string& peer, const std::string& identity,
                              uint64_t max_frame_bytes, std::shared_ptr<SealSession>* seal_with) {
  if (!sealed_) {
    sender_.Prepare(build, max_frame_bytes, false);
    return Step::kSend;
  }
  std::shared_ptr<SealSession> session = sessions_.Find(peer, identity);
  if (session == nullptr) return Step::kUndeliverable;
  if (build.sealed_with != nullptr) {
    // Sealed for this connection's session, or for one it no longer has (its client offered again meanwhile).
    return build.sealed_with == session ? Step::kSend : Step::kUndeliverable;
  }
  sender_.Prepare(build, max_frame_bytes, true);
  *seal_with = std::move(session);
  return Step::kSeal;
}

bool DataPort::Send(const std::string& peer, BatchBuild& build) {
  const bool sent = sender_.Send(peer, build);
  if (!sent) sessions_.Forget(peer);
  return sent;
}

}  // namespace stoker::worker
