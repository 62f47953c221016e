// CoordinatorService: the coordinator's transport adapter. One thread owns the ROUTER socket: it receives
// [routing id][Request] messages, decodes each fully into coordinator/messages.h values (malformed frames are
// rejected and counted, never passed on), calls the Impl, encodes the Reply, and sends parked lease answers when
// the Impl releases them. It also drives the Impl's Tick.
//
// Thread safety: Run() is called from one thread; Stats() from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <zmq.hpp>

#include "common/status.h"
#include "coordinator/impl.h"

namespace stoker::coordinator {

struct ServiceOptions {
  std::string listen = "tcp://*:7400";
  int64_t max_message_bytes = 1 << 20;  // control messages are small; larger ones drop the connection
  Duration tick = Millis(50);
};

struct ServiceStats {
  uint64_t requests = 0;
  uint64_t bad_frames = 0;        // unparseable, wrong frame count, wrong protocol version
  std::map<std::string, uint64_t> by_method_code;  // "lease_request/OK" -> count
};

class CoordinatorService {
 public:
  CoordinatorService(CoordinatorImpl& impl, zmq::context_t& context, const ServiceOptions& options);

  // Binds the ROUTER socket; returns the endpoint bound (with the real port for ":0").
  StatusOr<std::string> Bind();
  // Serves until `stop` becomes true. Returns an error only if the socket fails.
  Status Run(const std::atomic<bool>& stop);

  ServiceStats Stats() const;

 private:
  void HandleMessage(zmq::message_t& routing_id, zmq::message_t& frame);
  void SendReply(const std::string& routing_id, zmq::message_t reply);
  void SendDeferred();
  void Count(const char* method, StatusCode code);

  CoordinatorImpl& impl_;
  ServiceOptions options_;
  zmq::socket_t socket_;
  mutable std::mutex stats_mu_;
  ServiceStats stats_;  // guarded by stats_mu_
};

}  // namespace stoker::coordinator
