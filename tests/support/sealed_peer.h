// A hand-made client of a worker's sealed data port (worker/data_port.h), for the security tests: it derives the
// ticket and seal key the coordinator would list to an identity (from the cluster's coordinator key), connects
// with the ticket, runs the seal handshake and sends sealed credits, or any part of that done wrong on purpose.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "auth/data_tickets.h"
#include "client/src/sealed_connection.h"
#include "tests/support/curve_peer.h"
#include "wire/data_codec.h"
#include "wire/frames.h"

namespace stoker::testing {

// What the coordinator lists to `identity` for the worker `worker_id`.
struct DataPortCredentials {
  std::string ticket;
  std::string seal_key;
};
inline DataPortCredentials CredentialsFor(const KeyPair& coordinator, const std::string& worker_id,
                                          const std::string& identity) {
  const std::string master = *DataTicketMasterKey(coordinator);
  const std::string worker_key = WorkerTicketKey(master, worker_id);
  return {DataTicket(worker_key, identity), DataSealKey(worker_key, identity)};
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
