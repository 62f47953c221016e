// AdminServer: the operator's port of a stoker process (one per process, --metrics-listen, default :9400 for the
// coordinator, :9401 for a worker). Four paths:
//   /metrics  Prometheus text exposition from the process's MetricsHub
//   /healthz  200 "ok" while the process's main loop keeps turning (LoopWatch); 503 and how long it has been
//             stuck otherwise — for a Kubernetes liveness probe
//   /readyz   200 "ready" once the component can do its job (coordinator: journal replayed; worker: registered;
//             client: connected), 503 with the reason before — for a readiness probe
//   /state    a JSON dump of the component's current state, for people debugging: built at most once per
//             kStateReuse (a second), or per nine times as long as its last build took if that is longer, and
//             shared by the readers of that time, so it is a second old or more
//
// Thread safety: handlers run on the server's thread; what they read must be safe to read from there.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "stoker/clock.h"
#include "base/http_server.h"
#include "base/metrics.h"
#include "stoker/status.h"

namespace stoker {

// Proof of life from a loop: the loop calls Beat() every turn; Check() fails once it has been silent too long.
class LoopWatch {
 public:
  explicit LoopWatch(const Clock& clock) : clock_(clock), last_ns_(clock.Now().time_since_epoch().count()) {}
  void Beat() { last_ns_.store(clock_.Now().time_since_epoch().count()); }
  Status Check(Duration max_silence) const;

 private:
  const Clock& clock_;
  std::atomic<int64_t> last_ns_;
};

struct AdminHandlers {
  std::function<Status()> live;         // empty: always live
  std::function<Status()> ready;        // empty: always ready
  std::function<std::string()> state;   // a JSON document; empty: {}
};

class AdminServer {
 public:
  // `hub` must outlive the server.
  static StatusOr<std::unique_ptr<AdminServer>> Start(const std::string& listen, const MetricsHub& hub,
                                                      AdminHandlers handlers);
  // Start, then log the URL and, unless `address_file` is empty, write the bound address there (atomically): what
  // the servers' --metrics-listen and --metrics-address-file do. Errors name the flag at fault.
  static StatusOr<std::unique_ptr<AdminServer>> StartForFlags(const std::string& listen,
                                                              const std::string& address_file, const MetricsHub& hub,
                                                              AdminHandlers handlers);
  static constexpr Duration kStateReuse = Millis(1000);

  uint16_t port() const { return http_->port(); }
  HttpServerStats Stats() const { return http_->Stats(); }
  const std::string& address() const { return http_->address(); }

 private:
  explicit AdminServer(std::unique_ptr<HttpServer> http) : http_(std::move(http)) {}
  std::unique_ptr<HttpServer> http_;
};

}  // namespace stoker
