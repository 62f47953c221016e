#include "coordinator/service.h"

#include <cerrno>
#include <variant>

#include "common/control_codec.h"
#include "common/logging.h"
#include "common/wire.h"

namespace stoker::coordinator {

CoordinatorService::CoordinatorService(CoordinatorImpl& impl, zmq::context_t& context, const ServiceOptions& options)
    : impl_(impl), options_(options), socket_(context, zmq::socket_type::router) {
  SocketOptions socket_options;
  socket_options.max_message_bytes = options.max_message_bytes;
  socket_options.router_mandatory = true;   // a reply to a vanished peer fails loudly instead of vanishing
  socket_options.send_hwm = 100000;         // one reply per request: the queue is bounded by the peers' requests
  socket_options.receive_hwm = 100000;
  ConfigureSocket(socket_, socket_options);
}

StatusOr<std::string> CoordinatorService::Bind() { return BindSocket(socket_, options_.listen); }

void CoordinatorService::Count(const char* method, StatusCode code) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++stats_.requests;
  ++stats_.by_method_code[std::string(method) + "/" + std::string(StatusCodeName(code))];
}

ServiceStats CoordinatorService::Stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void CoordinatorService::SendReply(const std::string& routing_id, zmq::message_t reply) {
  try {
    zmq::message_t id(routing_id.data(), routing_id.size());
    if (!socket_.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return;
    socket_.send(reply, zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    // EHOSTUNREACH: the peer disconnected; it re-sends its request when it reconnects.
    STOKER_LOG(kDebug) << "reply not sent: " << e.what();
  }
}

void CoordinatorService::SendDeferred() {
  for (DeferredLeaseReply& d : impl_.TakeDeferredReplies()) {
    SendReply(d.peer, EncodeReply(d.request_id, Status::Ok(), std::move(d.response)));
  }
}

void CoordinatorService::HandleMessage(zmq::message_t& routing_id, zmq::message_t& frame) {
  std::string peer(static_cast<const char*>(routing_id.data()), routing_id.size());
  uint64_t request_id = 0;
  auto decoded = DecodeRequest(std::move(frame), &request_id);
  if (!decoded.ok()) {
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.bad_frames;
    }
    STOKER_LOG(kWarning) << "rejected a request: " << decoded.status().ToString();
    SendReply(peer, EncodeReply(request_id, decoded.status(), std::monostate{}));
    return;
  }
  const char* method = MethodName(decoded->body);
  Status status;
  ReplyBody body = std::monostate{};
  bool parked = false;
  std::visit(
      [&](auto& request) {
        using T = std::decay_t<decltype(request)>;
        auto take = [&](auto result) {
          if (result.ok()) {
            body = std::move(*result);
          } else {
            status = result.status();
          }
        };
        if constexpr (std::is_same_v<T, RegisterWorkerRequest>) {
          take(impl_.RegisterWorker(request));
        } else if constexpr (std::is_same_v<T, WorkerHeartbeatRequest>) {
          take(impl_.WorkerHeartbeat(request));
        } else if constexpr (std::is_same_v<T, LeaseRequest>) {
          auto result = impl_.RequestLease(peer, decoded->request_id, request);
          if (!result.ok()) {
            status = result.status();
          } else if (result->has_value()) {
            body = std::move(**result);
          } else {
            parked = true;
          }
        } else if constexpr (std::is_same_v<T, UnitDoneRequest>) {
          status = impl_.UnitDone(request);
        } else if constexpr (std::is_same_v<T, RegisterClientRequest>) {
          take(impl_.RegisterClient(request));
        } else if constexpr (std::is_same_v<T, ClientHeartbeatRequest>) {
          take(impl_.ClientHeartbeat(request));
        } else if constexpr (std::is_same_v<T, GetJobRequest>) {
          take(impl_.GetJob(request.job));
        } else if constexpr (std::is_same_v<T, DeregisterRequest>) {
          status = impl_.Deregister(request);
        }
      },
      decoded->body);
  Count(method, status.code());
  if (parked) return;
  if (!status.ok()) body = std::monostate{};
  SendReply(peer, EncodeReply(decoded->request_id, status, body));
}

Status CoordinatorService::Run(const std::atomic<bool>& stop) {
  TimePoint next_tick = std::chrono::steady_clock::now();
  while (!stop.load()) {
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 1, std::chrono::duration_cast<std::chrono::milliseconds>(options_.tick));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      return UnavailableError(std::string("coordinator socket poll failed: ") + e.what());
    }
    // Drain what is queued, a bounded batch at a time so ticks are not starved.
    for (int i = 0; i < 1000 && (items[0].revents & ZMQ_POLLIN); ++i) {
      zmq::message_t routing_id, frame;
      try {
        if (!socket_.recv(routing_id, zmq::recv_flags::dontwait)) break;
        if (!routing_id.more()) continue;
        if (!socket_.recv(frame, zmq::recv_flags::dontwait)) continue;
        bool extra = false;
        while (frame.more()) {  // a request is exactly one frame: discard the rest
          zmq::message_t discard;
          if (!socket_.recv(discard, zmq::recv_flags::dontwait)) break;
          extra = true;
          if (!discard.more()) break;
        }
        if (extra) {
          std::lock_guard<std::mutex> lock(stats_mu_);
          ++stats_.bad_frames;
          continue;
        }
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        return UnavailableError(std::string("coordinator socket receive failed: ") + e.what());
      }
      HandleMessage(routing_id, frame);
      SendDeferred();
    }
    if (std::chrono::steady_clock::now() >= next_tick) {
      impl_.Tick();
      SendDeferred();
      next_tick = std::chrono::steady_clock::now() + options_.tick;
    }
  }
  return Status::Ok();
}

}  // namespace stoker::coordinator
