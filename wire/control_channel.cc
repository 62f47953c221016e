// ControlChannel (control_channel.h): a client's DEALER to the coordinator and the requests still awaiting replies.
#include "wire/control_channel.h"

#include "base/logging.h"
#include "wire/frames.h"

namespace stoker {

void ConfigureControlSocket(zmq::socket_t& socket) {
  SocketOptions options;
  options.max_message_bytes = 1 << 20;
  ConfigureSocket(socket, options);
}

void SendControlFrame(zmq::socket_t& socket, uint64_t request_id, const RequestBody& body, TransportErrors& errors) {
  try {
    zmq::message_t frame = EncodeRequest(request_id, body);
    socket.send(frame, zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    errors.Note("send_control", e);
  }
}

std::optional<zmq::message_t> ReceiveControlFrame(zmq::socket_t& socket, TransportErrors& errors) {
  zmq::message_t frame;
  try {
    if (!socket.recv(frame, zmq::recv_flags::dontwait)) return std::nullopt;
  } catch (const zmq::error_t& e) {
    errors.Note("recv_control", e);
    return std::nullopt;
  }
  return frame;
}

ControlChannel::ControlChannel(zmq::context_t& context, const Clock& clock, Duration timeout, TransportErrors& errors)
    : socket_(context, zmq::socket_type::dealer), tracker_(clock, timeout), errors_(errors) {
  ConfigureControlSocket(socket_);
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
  const Pending& request = tracker_.Add(std::move(body));
  SendControlFrame(socket_, request.id, request.body, errors_);
  return request.id;
}

void ControlChannel::Receive(const std::function<void(Pending&, DecodedReply&)>& handle) {
  while (auto frame = ReceiveControlFrame(socket_, errors_)) {
    auto reply = DecodeReply(std::move(*frame));
    if (!reply.ok()) {
      STOKER_LOG(kWarning) << "bad reply from the coordinator: " << reply.status().ToString();
      continue;
    }
    auto request = tracker_.Answer(reply->request_id);
    if (request) handle(*request, *reply);
  }
}

}  // namespace stoker
