// A hand-made client of a worker's sealed data port (worker/data_port.h), for the security tests: it derives the
// ticket and seal key the coordinator would list to an identity (from the cluster's coordinator key), connects
// with the ticket, runs the seal handshake and sends sealed credits, or any part of that done wrong on purpose.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "auth/data_tickets.h"
#include "client/src/sealed_connection.h"
#include "tests/support/curve_peer.h"
#include "wire/control_codec.h"
#include "wire/data_codec.h"
#include "wire/frames.h"

namespace stoker::testing {

// What the coordinator lists to an identity for one worker.
struct DataPortCredentials {
  std::string ticket;
  std::string seal_key;
};

// The credentials `client`'s identity gets for `worker_id`, learnt as any holder of a client key learns them: from
// the worker list in the reply to a registration of rank 0 of `spec` (a job of its own), released again at once.
// A worker's ticket key is its session's, which no test knows, so there is no other way to them.
inline StatusOr<DataPortCredentials> ListedCredentials(zmq::context_t& context, const std::string& endpoint,
                                                       const KeyPair& coordinator, const KeyPair& client,
                                                       const JobSpec& spec, const std::string& worker_id) {
  zmq::socket_t s = Dealer(context, endpoint, client, coordinator.public_z85);
  auto ask = [&s](uint64_t id, const RequestBody& body) -> StatusOr<DecodedReply> {
    zmq::message_t frame = EncodeRequest(id, body);
    if (!s.send(frame, zmq::send_flags::none)) return DeadlineExceededError("the registration was not sent");
    zmq::pollitem_t items[] = {{s.handle(), 0, ZMQ_POLLIN, 0}};
    if (!PollOnce(items, std::chrono::milliseconds(10000)).ok() || !(items[0].revents & ZMQ_POLLIN)) {
      return DeadlineExceededError("no reply from the coordinator within 10 s");
    }
    zmq::message_t answer;
    if (!s.recv(answer, zmq::recv_flags::dontwait)) return DeadlineExceededError("no reply");
    return DecodeReply(std::move(answer));
  };
  RegisterClientRequest claim{"c-listed", spec.name, 0, spec, std::max<uint32_t>(4, 2 * spec.batches_per_unit)};
  claim.session = NewSessionSecret();
  STOKER_ASSIGN_OR_RETURN(DecodedReply reply, ask(1, claim));
  STOKER_RETURN_IF_ERROR(reply.status);
  const auto* registered = std::get_if<RegisterClientResponse>(&reply.body);
  if (registered == nullptr) return InternalError("a registration answered without its worker list");
  std::optional<DataPortCredentials> found;
  for (const WorkerInfo& w : registered->workers) {
    if (w.worker_id == worker_id) found = DataPortCredentials{w.data_ticket, w.data_seal_key};
  }
  STOKER_ASSIGN_OR_RETURN(DecodedReply left, ask(2, DeregisterRequest{"c-listed", spec.name, 0, claim.session}));
  STOKER_RETURN_IF_ERROR(left.status);
  if (!found) return NotFoundError("worker " + worker_id + " is not in the list");
  return *found;
}

class SealedPeer {
 public:
  // Connects as `identity` with `credentials.ticket`; seals with `credentials.seal_key` once Handshake is done.
  SealedPeer(zmq::context_t& context, const std::string& endpoint, const std::string& identity,
             const std::string& worker_id, const DataPortCredentials& credentials)
      : socket_(PlainDealer(context, endpoint, identity, credentials.ticket)),
        seal_(identity, worker_id, credentials.seal_key) {}

  // Offers and waits up to `timeout` for the welcome; false if none came or it gave no keys.
  bool Handshake(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
    zmq::message_t hello = EncodeSealHello(seal_.Offer());
    if (!socket_.send(hello, zmq::send_flags::none)) return false;
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}};
    if (!PollOnce(items, timeout).ok() || !(items[0].revents & ZMQ_POLLIN)) return false;
    zmq::message_t answer;
    if (!socket_.recv(answer, zmq::recv_flags::dontwait)) return false;
    auto decoded = DecodeDataMessage(std::move(answer), ControlReaderOptions());
    if (!decoded.ok() || !std::holds_alternative<SealWelcome>(*decoded)) return false;
    return seal_.Welcome(std::get<SealWelcome>(*decoded)).ok();
  }

  // A credit with its tag (after Handshake); false if a send timed out.
  bool SendCredit(const Credit& credit) {
    zmq::message_t frame = EncodeCredit(credit);
    std::vector<uint8_t> tag = seal_.SealCredit({static_cast<const uint8_t*>(frame.data()), frame.size()});
    zmq::message_t trailer(tag.data(), tag.size());
    return socket_.send(frame, zmq::send_flags::sndmore).has_value() &&
           socket_.send(trailer, zmq::send_flags::none).has_value();
  }

  zmq::socket_t& socket() { return socket_; }
  client::SealedConnection& seal() { return seal_; }

 private:
  zmq::socket_t socket_;
  client::SealedConnection seal_;
};

}  // namespace stoker::testing
