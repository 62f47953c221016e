// Frames and sockets (frames.h): serialising, parsing under limits, binding, polling, peer ids and statuses.
#include "wire/frames.h"

#include <cerrno>
#include <cstring>
#include <random>

namespace stoker {

zmq::message_t ToFrame(capnp::MessageBuilder& message) {
  size_t words = capnp::computeSerializedSizeInWords(message);
  zmq::message_t frame(words * sizeof(capnp::word));
  kj::ArrayOutputStream out(kj::arrayPtr(static_cast<kj::byte*>(frame.data()), frame.size()));
  capnp::writeMessage(out, message);
  return frame;
}

capnp::ReaderOptions ControlReaderOptions() {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = 64 * 1024;
  options.nestingLimit = 16;
  return options;
}

capnp::ReaderOptions BatchHeaderReaderOptions(uint32_t batch_size) {
  capnp::ReaderOptions options;
  // labels (1 word each) + ids (1 word) + flags (1/8 word) + a quarantine reason (a pointer and at most 7 words of
  // text) + an encoded crop (3 words) + texts and the struct: 16 words per sample is ample.
  options.traversalLimitInWords = 4096 + uint64_t{16} * batch_size;
  options.nestingLimit = 16;
  return options;
}

StatusOr<std::unique_ptr<ParsedFrame>> ParsedFrame::Parse(zmq::message_t frame, const capnp::ReaderOptions& options) {
  if (frame.size() == 0 || frame.size() % sizeof(capnp::word) != 0) {
    return InvalidArgumentError("frame of " + std::to_string(frame.size()) +
                                " bytes is not a whole number of 8-byte words");
  }
  if (frame.size() / sizeof(capnp::word) > options.traversalLimitInWords * 2 + 1024) {
    return InvalidArgumentError("frame of " + std::to_string(frame.size()) + " bytes is larger than its limit");
  }
  auto parsed = std::unique_ptr<ParsedFrame>(new ParsedFrame());
  const capnp::word* words;
  size_t count = frame.size() / sizeof(capnp::word);
  if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(capnp::word) == 0) {
    parsed->frame_ = std::move(frame);
    words = static_cast<const capnp::word*>(parsed->frame_.data());
  } else {
    // ZeroMQ keeps small messages inside the message object, which need not be 8-byte aligned.
    parsed->copy_ = kj::heapArray<capnp::word>(count);
    std::memcpy(parsed->copy_.begin(), frame.data(), frame.size());
    words = parsed->copy_.begin();
  }
  Status status = CatchWireErrors("frame", [&]() {
    parsed->reader_ = std::make_unique<capnp::FlatArrayMessageReader>(kj::ArrayPtr<const capnp::word>(words, count),
                                                                      options);
    return Status::Ok();
  });
  if (!status.ok()) return status;
  return parsed;
}

void ConfigureSocket(zmq::socket_t& socket, const SocketOptions& o) {
  socket.set(zmq::sockopt::linger, o.linger_ms);
  socket.set(zmq::sockopt::sndhwm, o.send_hwm);
  socket.set(zmq::sockopt::rcvhwm, o.receive_hwm);
  if (o.max_message_bytes > 0) socket.set(zmq::sockopt::maxmsgsize, o.max_message_bytes);
  socket.set(zmq::sockopt::reconnect_ivl, o.reconnect_ivl_ms);
  socket.set(zmq::sockopt::reconnect_ivl_max, o.reconnect_ivl_max_ms);
  socket.set(zmq::sockopt::handshake_ivl, o.handshake_ivl_ms);
  socket.set(zmq::sockopt::heartbeat_ivl, o.heartbeat_ivl_ms);
  socket.set(zmq::sockopt::heartbeat_timeout, o.heartbeat_timeout_ms);
  if (o.router_mandatory) socket.set(zmq::sockopt::router_mandatory, 1);
  if (o.router_handover) socket.set(zmq::sockopt::router_handover, 1);
}

StatusOr<std::string> BindSocket(zmq::socket_t& socket, const std::string& endpoint) {
  std::string target = endpoint;
  if (target.size() > 2 && target.compare(target.size() - 2, 2, ":0") == 0) {
    target = target.substr(0, target.size() - 1) + "*";
  }
  try {
    socket.bind(target);
    return socket.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    std::string message = "cannot bind " + endpoint + ": " + e.what();
    if (e.num() == EINVAL || e.num() == EPROTONOSUPPORT) return InvalidArgumentError(message);
    return UnavailableError(message);
  }
}

Status PollOnce(std::span<zmq::pollitem_t> items, std::chrono::milliseconds timeout) {
  try {
    zmq::poll(items.data(), items.size(), timeout);
    return Status::Ok();
  } catch (const zmq::error_t& e) {
    for (zmq::pollitem_t& item : items) item.revents = 0;
    if (e.num() == EINTR) return Status::Ok();
    return UnavailableError(std::string("poll failed: ") + e.what());
  }
}

std::string AdvertisedEndpoint(const std::string& bound, const std::string& advertise_host) {
  // bound is "tcp://HOST:PORT" as ZeroMQ reports it; a wildcard bind reports 0.0.0.0 or [::].
  size_t scheme = bound.find("://");
  size_t colon = bound.rfind(':');
  if (scheme == std::string::npos || colon == std::string::npos || colon <= scheme + 3) return bound;
  std::string host = bound.substr(scheme + 3, colon - scheme - 3);
  if (host != "0.0.0.0" && host != "*" && host != "[::]" && host != "::") return bound;
  std::string replacement = advertise_host.empty() ? "127.0.0.1" : advertise_host;
  return bound.substr(0, scheme + 3) + replacement + bound.substr(colon);
}

std::string NewPeerId(const std::string& prefix) {
  std::random_device device;
  uint64_t value = (static_cast<uint64_t>(device()) << 32) ^ device();
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(value));
  return prefix + "-" + hex;
}

}  // namespace stoker

namespace stoker {

void ToWire(const Status& status, wire::Status::Builder out) {
  out.setCode(static_cast<wire::StatusCode>(static_cast<uint16_t>(status.code())));
  out.setMessage(status.message());
}

Status FromWire(wire::Status::Reader in) {
  auto code = static_cast<int>(in.getCode());
  if (code < 0 || code > static_cast<int>(StatusCode::kDataLoss)) code = static_cast<int>(StatusCode::kUnknown);
  if (code == 0) return Status::Ok();
  return Status(static_cast<StatusCode>(code), in.getMessage().cStr());
}

}  // namespace stoker
