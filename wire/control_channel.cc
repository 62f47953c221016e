// The control plane socket helpers (control_channel.h).
#include "wire/control_channel.h"

#include "wire/control_codec.h"
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

}  // namespace stoker
