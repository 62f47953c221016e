// HttpServer: the small HTTP/1.1 server each stoker process runs for its operators — /metrics, /healthz,
// /readyz and /state (common/admin_server.h wires those). prometheus-cpp's own Exposer serves /metrics only, so
// stoker carries this instead: GET and HEAD, fixed routes, one response per connection.
//
// One thread serves every connection with poll(): a slow or idle client is cut off at its deadline and cannot
// hold up a Prometheus scrape. Limits are firm: a request head over max_request_bytes gets 431; more than
// max_connections at once evict the oldest connection that has not sent a whole request, else the oldest one
// answered and not closing, else the oldest one still being answered (so connections held open, silent or not
// reading their responses, cannot lock the kubelet's probes out, whose requests are answered as soon as they are
// read); anything but GET/HEAD gets 405, a path without a route 404, a request line that is not HTTP 400. Handlers
// run on the server thread, so they must be quick and thread-safe with respect to the rest of the process.
//
//   auto server = HttpServer::Start({.listen = "0.0.0.0:9400"}, {{"/healthz", [] { return HttpResponse{}; }}});
//   (*server)->port();   // the port bound (useful with port 0)
//
// Thread safety: the object's methods may be called from any thread; destruction stops and joins the thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "stoker/clock.h"
#include "stoker/status.h"

namespace stoker {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // When set, the body instead of `body`: one copy shared by every connection it is being written to, however slowly
  // each reads (AdminServer's /state).
  std::shared_ptr<const std::string> shared_body;
};

using HttpHandler = std::function<HttpResponse()>;

struct HttpServerOptions {
  // "host:port", ":port" or "*:port" (all interfaces), port 0 picking one; or several, comma-separated (at most
  // kMaxListenAddresses), each bound: "10.1.2.3:9400,127.0.0.1:9400" serves a pod's IP and kubectl port-forward.
  std::string listen = "0.0.0.0:9400";
  Duration io_timeout = Millis(5000);   // a connection must send its request and take the response within this
  size_t max_request_bytes = 8192;      // request line + headers
  size_t max_connections = 64;
};

struct HttpServerStats {
  uint64_t accepted = 0;   // connections taken from the listener
  uint64_t responses = 0;  // by any status
  uint64_t rejected = 0;   // 4xx answers, connections evicted or refused over the limit, timed out
  uint64_t evicted_answering = 0;  // of those, connections evicted while their response was still being written
};

class HttpServer {
 public:
  static constexpr size_t kMaxListenAddresses = 4;
  // Binds and starts serving. Errors: InvalidArgument (unparseable address), Unavailable (cannot bind).
  static StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                     std::map<std::string, HttpHandler> routes);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The first address's port, and "host:port" as bound (the wildcard host as 0.0.0.0).
  uint16_t port() const { return port_; }
  const std::string& address() const { return addresses_.front(); }
  const std::vector<std::string>& addresses() const { return addresses_; }  // every one, in the order given
  HttpServerStats Stats() const;

 private:
  HttpServer(HttpServerOptions options, std::map<std::string, HttpHandler> routes);
  struct Connection;
  void Serve();
  void Accept(int listen_fd, std::map<int, Connection>& connections);
  void EvictOldest(std::map<int, Connection>& connections);
  void Read(Connection& c);
  void ReadAndWrite(Connection& c);
  void Respond(Connection& c, const HttpResponse& response, bool head);
  void Answer(Connection& c);

  const HttpServerOptions options_;
  const std::map<std::string, HttpHandler> routes_;
  std::vector<int> listen_fds_;
  int stop_fd_ = -1;
  TimePoint accept_paused_until_;  // serving thread only
  uint16_t port_ = 0;
  std::vector<std::string> addresses_;
  std::atomic<uint64_t> accepted_{0};  // written by the serving thread only
  std::atomic<uint64_t> responses_{0};
  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> evicted_answering_{0};
  std::thread thread_;
};

// The request line of a request head (what a client sent up to its blank line): the method and the path without
// its query. InvalidArgument unless it reads "METHOD TARGET HTTP/...". The only parser of untrusted bytes in the
// server; pure, so a fuzz target drives it.
struct HttpRequestLine {
  std::string method;
  std::string path;
};
StatusOr<HttpRequestLine> ParseRequestLine(std::string_view head);

// Splits "host:port" (host may be empty or "*": all interfaces). Errors name the text.
StatusOr<std::pair<std::string, uint16_t>> ParseHostPort(const std::string& text);

}  // namespace stoker
