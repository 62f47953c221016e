#include "common/control_channel.h"

#include "common/logging.h"
#include "common/wire.h"

namespace stoker {

ControlChannel::ControlChannel(zmq::context_t& context, const Clock& clock, Duration timeout)
    : clock_(clock), timeout_(timeout), socket_(context, zmq::socket_type::dealer) {
  SocketOptions options;
  options.max_message_bytes = 1 << 20;
  ConfigureSocket(socket_, options);
}

Status ControlChannel::Connect(const std::string& endpoint) {
  try {
    socket_.connect(endpoint);
  } catch (const zmq::error_t& e) {
    return InvalidArgumentError("cannot connect to coordinator '" + endpoint + "': " + e.what());
  }
  return Status::Ok();
}

uint64_t ControlChannel::Send(RequestBody body) {
  uint64_t id = next_id_++;
  try {
    zmq::message_t frame = EncodeRequest(id, body);
    socket_.send(frame, zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    STOKER_LOG(kDebug) << "control send failed: " << e.what();  // its deadline brings it back to the caller
  }
  TimePoint now = clock_.Now();
  pending_[id] = {id, std::move(body), now, now + timeout_};
  return id;
}

void ControlChannel::Receive(const std::function<void(Pending&, DecodedReply&)>& handle) {
  while (true) {
    zmq::message_t frame;
    try {
      if (!socket_.recv(frame, zmq::recv_flags::dontwait)) return;
    } catch (const zmq::error_t&) {
      return;
    }
    auto reply = DecodeReply(std::move(frame));
    if (!reply.ok()) {
      STOKER_LOG(kWarning) << "bad reply from the coordinator: " << reply.status().ToString();
      continue;
    }
    auto it = pending_.find(reply->request_id);
    if (it == pending_.end()) continue;
    Pending request = std::move(it->second);
    pending_.erase(it);
    handle(request, *reply);
  }
}

std::vector<ControlChannel::Pending> ControlChannel::TakeExpired() {
  std::vector<Pending> expired;
  TimePoint now = clock_.Now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now >= it->second.deadline) {
      expired.push_back(std::move(it->second));
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  return expired;
}

}  // namespace stoker
