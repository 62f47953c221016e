// CURVE sockets and the ZAP handler (curve.h).
#include "auth/curve.h"

#include <zmq.h>

#include "auth/data_tickets.h"
#include "base/logging.h"
#include "wire/frames.h"

namespace stoker {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

std::string Z85Of(const zmq::message_t& binary_key) {
  if (binary_key.size() != 32) return "";
  char z85[41];
  zmq_z85_encode(z85, static_cast<const uint8_t*>(binary_key.data()), 32);
  return z85;
}

}  // namespace

void MakeCurveServer(zmq::socket_t& socket, const std::string& public_z85, const std::string& secret_z85) {
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_publickey, public_z85);
  socket.set(zmq::sockopt::curve_secretkey, secret_z85);
  // With a domain set, libzmq asks the ZAP handler for every handshake; the domain itself means nothing to us.
  socket.set(zmq::sockopt::zap_domain, "stoker");
}

void MakePlainServer(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::plain_server, 1);
  socket.set(zmq::sockopt::zap_domain, "stoker");
}

void MakePlainClient(zmq::socket_t& socket, const std::string& identity, const std::string& ticket) {
  socket.set(zmq::sockopt::plain_username, identity);
  socket.set(zmq::sockopt::plain_password, ticket);
}

void MakeCurveClient(zmq::socket_t& socket, const KeyPair& own, const std::string& server_public_z85) {
  socket.set(zmq::sockopt::curve_serverkey, server_public_z85);
  socket.set(zmq::sockopt::curve_publickey, own.public_z85);
  socket.set(zmq::sockopt::curve_secretkey, own.secret_z85);
}

std::string PeerIdentityOf(zmq::message_t& message) {
  const char* user_id = zmq_msg_gets(message.handle(), "User-Id");
  return user_id != nullptr ? user_id : "";
}

ZapHandler::ZapHandler(zmq::context_t& context, std::vector<TrustedKey> admitted, bool plain)
    : socket_(context, zmq::socket_type::rep), plain_(plain) {
  for (TrustedKey& k : admitted) by_key_[k.public_z85] = std::move(k);
}

StatusOr<std::unique_ptr<ZapHandler>> ZapHandler::Start(zmq::context_t& context, std::vector<TrustedKey> admitted,
                                                        bool plain) {
  if (!zmq_has("curve")) return UnimplementedError("this libzmq was built without CURVE (libsodium)");
  auto handler = std::unique_ptr<ZapHandler>(new ZapHandler(context, std::move(admitted), plain));
  handler->socket_.set(zmq::sockopt::linger, 0);
  try {
    handler->socket_.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    return InternalError(std::string("cannot bind the ZAP handler: ") + e.what());
  }
  handler->thread_ = std::thread([h = handler.get()] { h->Serve(); });
  return handler;
}

static_assert(ZapHandler::kWaitForTicketKey < Millis(SocketOptions{}.handshake_ivl_ms),
              "a handshake held for the ticket key would be dropped by the handshake limit first");

ZapHandler::~ZapHandler() {
  {
    MutexLock lock(mu_);
    stop_.store(true);
    key_set_.NotifyAll();  // a handshake waiting for the ticket key
  }
  if (thread_.joinable()) thread_.join();
}

void ZapHandler::Serve() {
  while (!stop_.load()) {
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}};
    if (!PollOnce(items, std::chrono::milliseconds(100)).ok()) return;  // the context is closing
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    std::vector<zmq::message_t> request;
    try {
      do {
        request.emplace_back();
        if (!socket_.recv(request.back(), zmq::recv_flags::dontwait)) break;
      } while (request.back().more());
    } catch (const zmq::error_t& e) {
      errors_.Note("zap_recv", e);
      continue;
    }
    Answer(request);
  }
}

// ZAP request: version, request id, domain, address, routing id, mechanism, credentials (CURVE: the client's
// 32-byte public key). Reply: version, request id, status code, status text, user id, metadata.
void ZapHandler::SetTicketKey(std::string key) {
  MutexLock lock(mu_);
  ticket_key_ = std::move(key);
  key_set_.NotifyAll();
}

// PLAIN credentials: the user name is the client's identity, the password its ticket for this worker.
std::string ZapHandler::CheckTicket(const std::vector<zmq::message_t>& request, std::string* reason) const {
  if (request.size() < 8) {
    *reason = "malformed";
    return "";
  }
  const std::string identity = request[6].to_string();
  std::optional<PeerIdentity> who = ParseIdentity(identity);
  std::string key;
  {
    MutexLock lock(mu_);
    if (ticket_key_.empty()) {
      waiting_.fetch_add(1);
      key_set_.WaitUntil(mu_, wait_for_key_until_, [&] {
        mu_.AssertHeld();
        return !ticket_key_.empty() || stop_.load();
      });
      waiting_.fetch_sub(1);
    }
    key = ticket_key_;
  }
  if (key.empty()) {
    *reason = "no_ticket_key";  // not registered with the coordinator yet
  } else if (!who || who->role != Role::kClient || !VerifyDataTicket(key, identity, request[7].to_string())) {
    *reason = "bad_ticket";
  } else {
    return identity;
  }
  return "";
}

void ZapHandler::Answer(std::vector<zmq::message_t>& request) {
  std::string code = "400", text = "unknown key", user_id;
  std::string reason = "unknown_key";
  if (request.size() < 6 || request[0].to_string() != "1.0") {
    code = "500";
    text = "malformed ZAP request";
    reason = "malformed";
  } else if (request[5].to_string() == "PLAIN" && plain_) {
    user_id = CheckTicket(request, &reason);
    if (!user_id.empty()) {
      code = "200";
      text = "OK";
    } else {
      text = "no valid data ticket";
    }
  } else if (request[5].to_string() != "CURVE" || request.size() < 7) {
    text = plain_ ? "only PLAIN with a data ticket is accepted" : "only CURVE is accepted";
    reason = "mechanism";
  } else {
    auto it = by_key_.find(Z85Of(request[6]));
    if (it != by_key_.end()) {
      code = "200";
      text = "OK";
      user_id = it->second.identity();
    }
  }
  if (code == "200") {
    admitted_.fetch_add(1);
  } else {
    MutexLock lock(mu_);
    if (++refused_[reason] == 1 || refused_[reason] % 1000 == 0) {
      STOKER_LOG(kWarning) << "refused a connection from " << (request.size() > 3 ? request[3].to_string() : "?")
                           << ": " << text << " (" << refused_[reason] << " so far)";
    }
  }
  const std::string request_id = request.size() > 1 ? request[1].to_string() : "";
  const std::string frames[] = {"1.0", request_id, code, text, user_id, ""};
  try {
    for (size_t i = 0; i < 6; ++i) {
      zmq::message_t m(frames[i].data(), frames[i].size());
      socket_.send(m, i + 1 < 6 ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  } catch (const zmq::error_t& e) {
    errors_.Note("zap_reply", e);
  }
}

void CollectHandshakes(const std::string& component, const ZapHandler* zap, MetricFamilies& out) {
  if (zap == nullptr) return;
  FamilyBuilder family("stoker_" + component + "_handshakes_total",
                       "Handshakes decided by this process's ZAP handler: admitted, or refused by reason "
                       "(unknown_key: not in the trust file for a role this process serves; bad_ticket: a plain "
                       "data port's ticket that is not the presented identity's).",
                       prometheus::MetricType::Counter);
  family.Add({{"result", "admitted"}, {"reason", ""}}, static_cast<double>(zap->admitted()));
  std::map<std::string, uint64_t> refused = zap->Refused();
  refused.try_emplace("unknown_key", 0);
  for (const auto& [reason, n] : refused) family.Add({{"result", "refused"}, {"reason", reason}}, static_cast<double>(n));
  for (const auto& [site, n] : zap->Errors()) {
    family.Add({{"result", "error"}, {"reason", site}}, static_cast<double>(n));
  }
  out.push_back(family.Build());
}

std::map<std::string, uint64_t> ZapHandler::Refused() const {
  MutexLock lock(mu_);
  return refused_;
}

}  // namespace stoker
