// The admin HTTP server (admin_server.h): /metrics, /healthz, /readyz and /state of one process.
#include "base/admin_server.h"

#include <algorithm>

#include "base/env.h"
#include "base/logging.h"

namespace stoker {

Status LoopWatch::Check(Duration max_silence) const {
  Duration silent = clock_.Now().time_since_epoch() - Duration(last_ns_.load());
  if (silent <= max_silence) return Status::Ok();
  return UnavailableError("main loop silent for " + std::to_string(ToMillis(silent)) + " ms");
}

StatusOr<std::unique_ptr<AdminServer>> AdminServer::Start(const std::string& listen, const MetricsHub& hub,
                                                          AdminHandlers handlers) {
  auto probe = [](const std::function<Status()>& check, const char* good) {
    return [check, good] {
      Status s = check ? check() : Status::Ok();
      if (s.ok()) return HttpResponse{200, "text/plain; charset=utf-8", std::string(good) + "\n"};
      return HttpResponse{503, "text/plain; charset=utf-8", s.message() + "\n"};
    };
  };
  std::map<std::string, HttpHandler> routes;
  routes["/metrics"] = [&hub] {
    return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", hub.Exposition()};
  };
  routes["/healthz"] = probe(handlers.live, "ok");
  routes["/readyz"] = probe(handlers.ready, "ready");
  // One document a second at most, shared by every reader: a flood of /state requests neither rebuilds it (the
  // handler takes the component's lock) nor holds a copy per slow reader. A document that takes long to build is
  // reused for nine times as long as it took, so building never takes more than a tenth of the server's thread,
  // however large the state grows or however slow the machine: probes are answered in between.
  routes["/state"] = [state = handlers.state, document = std::shared_ptr<const std::string>(),
                      fresh_until = TimePoint()]() mutable {
    const TimePoint start = std::chrono::steady_clock::now();
    if (!document || start >= fresh_until) {
      std::string text = state ? state() : std::string("{}");
      text += '\n';
      document = std::make_shared<const std::string>(std::move(text));
      const TimePoint end = std::chrono::steady_clock::now();
      fresh_until = std::max(start + AdminServer::kStateReuse, end + 9 * (end - start));
    }
    HttpResponse response{200, "application/json", ""};
    response.shared_body = document;
    return response;
  };
  HttpServerOptions options;
  options.listen = listen;
  STOKER_ASSIGN_OR_RETURN(auto http, HttpServer::Start(options, std::move(routes)));
  return std::unique_ptr<AdminServer>(new AdminServer(std::move(http)));
}

StatusOr<std::unique_ptr<AdminServer>> AdminServer::StartForFlags(const std::string& listen,
                                                                 const std::string& address_file,
                                                                 const MetricsHub& hub, AdminHandlers handlers) {
  auto started = Start(listen, hub, std::move(handlers));
  if (!started.ok()) return started.status().WithContext("--metrics-listen " + listen);
  const std::string& address = (*started)->address();
  STOKER_LOG(kInfo) << "metrics on http://" << address << "/metrics";
  if (!address_file.empty()) {
    PosixEnv env;
    Status written = env.WriteFileAtomically(address_file, address.data(), address.size());
    if (!written.ok()) return written.WithContext("--metrics-address-file");
  }
  return started;
}

}  // namespace stoker
