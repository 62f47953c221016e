// The small HTTP server the admin port runs on (http_server.h): request lines, connections and their limits.
#include "base/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "base/logging.h"

namespace stoker {
namespace {

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

// Closes with a reset: what the socket still holds for a peer that is not reading is dropped at once. A plain
// close() leaves it queued in the kernel, probing the peer's closed window for minutes, up to a send buffer (4 MB)
// per connection: a flood of /state readers that never read, each evicted, would pile up gigabytes of it. Only for
// connections whose response was never all handed over (Connection::Unsent).
void CloseAbortively(int fd) {
  linger abort_now{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_now, sizeof(abort_now));
  ::close(fd);
}

}  // namespace

StatusOr<std::pair<std::string, uint16_t>> ParseHostPort(const std::string& text) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgumentError("'" + text + "' is not host:port (e.g. 0.0.0.0:9400, :9400, 127.0.0.1:0)");
  }
  std::string host = text.substr(0, colon);
  std::string port_text = text.substr(colon + 1);
  if (host.find(':') != std::string::npos || host.find('[') != std::string::npos) {
    return InvalidArgumentError("'" + text + "': IPv6 addresses are not supported; use an IPv4 address or a name");
  }
  char* end = nullptr;
  errno = 0;
  unsigned long port = std::strtoul(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || errno != 0 || port > 65535) {
    return InvalidArgumentError("'" + text + "': port '" + port_text + "' is not a number from 0 to 65535");
  }
  if (host.empty() || host == "*") host = "0.0.0.0";
  return std::make_pair(host, static_cast<uint16_t>(port));
}

struct HttpServer::Connection {
  int fd = -1;
  std::string in;
  std::string out;                          // the response's head, and its body unless that is shared
  std::shared_ptr<const std::string> body;  // a shared body (HttpResponse::shared_body), written after `out`
  size_t sent = 0;                          // bytes of out, then body, written
  size_t total() const { return out.size() + (body ? body->size() : 0); }
  // Answered, with part of the response not yet handed to the kernel: a reader that does not read. Such a
  // connection is reset when it goes (CloseAbortively); one whose response is all in the kernel closes politely, so
  // a slow but honest reader still gets the rest.
  bool Unsent() const { return responding && !draining && sent < total(); }
  void Close() const {
    if (fd >= 0 && Unsent()) {
      CloseAbortively(fd);
    } else if (fd >= 0) {
      ::close(fd);
    }
  }
  bool responding = false;
  bool draining = false;  // response sent and write side shut: reading until the peer closes (or the deadline)
  TimePoint deadline;
  uint64_t accepted = 0;  // order of acceptance: the oldest silent, else answering, connection is evicted when full
};

HttpServer::HttpServer(HttpServerOptions options, std::map<std::string, HttpHandler> routes)
    : options_(std::move(options)), routes_(std::move(routes)) {}

namespace {

// A listening socket bound to one "host:port" (`text`, for errors: the whole flag), and where it is bound.
struct Bound {
  int fd = -1;
  uint16_t port = 0;
  std::string address;  // "ip:port"
};
StatusOr<Bound> Listen(const std::string& one, const std::string& text) {
  STOKER_ASSIGN_OR_RETURN(auto host_port, ParseHostPort(one));
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::string port_text = std::to_string(host_port.second);
  int rc = ::getaddrinfo(host_port.first.c_str(), port_text.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return InvalidArgumentError("cannot resolve '" + host_port.first + "' (from " + text + "): " + ::gai_strerror(rc));
  }
  sockaddr_in addr;
  std::memcpy(&addr, found->ai_addr, sizeof(addr));
  ::freeaddrinfo(found);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
  int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  socklen_t len = sizeof(addr);
  // The kernel's largest queue: a full one drops a probe's SYN, and its retry comes a second later (then 3, 7, ...
  // seconds), past a kubelet probe's timeout. Queued connections cost the kernel little; Accept() takes them all.
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, SOMAXCONN) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    ::close(fd);
    return UnavailableError("cannot listen on " + one + ": " + std::strerror(err));
  }
  char ip[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
  const uint16_t port = ntohs(addr.sin_port);
  return Bound{fd, port, std::string(ip) + ":" + std::to_string(port)};
}

}  // namespace

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                        std::map<std::string, HttpHandler> routes) {
  auto server = std::unique_ptr<HttpServer>(new HttpServer(options, std::move(routes)));
  std::vector<std::string> addresses;
  for (size_t at = 0; at <= options.listen.size();) {
    const size_t comma = std::min(options.listen.find(',', at), options.listen.size());
    addresses.push_back(options.listen.substr(at, comma - at));
    at = comma + 1;
  }
  if (addresses.size() > kMaxListenAddresses) {
    return InvalidArgumentError("'" + options.listen + "': at most " + std::to_string(kMaxListenAddresses) +
                                " addresses");
  }
  for (const std::string& one : addresses) {
    StatusOr<Bound> bound = Listen(one, options.listen);
    if (!bound.ok()) return bound.status();  // the destructor closes those bound already
    if (server->listen_fds_.empty()) server->port_ = bound->port;
    server->listen_fds_.push_back(bound->fd);
    server->addresses_.push_back(bound->address);
  }
  server->stop_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (server->stop_fd_ < 0) return InternalError("eventfd failed");
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

HttpServer::~HttpServer() {
  if (stop_fd_ >= 0) {
    uint64_t one = 1;
    ssize_t n = ::write(stop_fd_, &one, sizeof(one));
    (void)n;
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : listen_fds_) ::close(fd);
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

HttpServerStats HttpServer::Stats() const {
  return {accepted_.load(), responses_.load(), rejected_.load(), evicted_answering_.load()};
}

void HttpServer::Serve() {
  std::map<int, Connection> connections;
  while (true) {
    std::vector<pollfd> fds;
    fds.push_back({stop_fd_, POLLIN, 0});
    for (int fd : listen_fds_) fds.push_back({fd, POLLIN, 0});
    const size_t first_connection = 1 + listen_fds_.size();
    TimePoint now = std::chrono::steady_clock::now();
    TimePoint soonest = now + Millis(1000);
    for (auto& [fd, c] : connections) {
      fds.push_back({fd, static_cast<short>(c.responding && !c.draining ? POLLOUT : POLLIN), 0});
      soonest = std::min(soonest, c.deadline);
    }
    if (now < accept_paused_until_) {
      // Out of descriptors: poll() ignores negative fds, so the listeners do not spin.
      for (size_t i = 1; i < first_connection; ++i) fds[i].fd = -1;
      soonest = std::min(soonest, accept_paused_until_);
    }
    int timeout_ms = static_cast<int>(std::max<int64_t>(0, ToMillis(soonest - now)) + 1);
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      STOKER_LOG(kError) << "HTTP server poll failed: " << std::strerror(errno) << "; no longer serving";
      break;
    }
    if (fds[0].revents & POLLIN) break;
    // What poll() reported belongs to the connections polled: one accepted below may have been given the
    // descriptor number of one it evicted, and must not be read or written on that one's readiness.
    const uint64_t polled_through = accepted_.load();
    for (size_t i = 1; i < first_connection; ++i) {
      if (fds[i].revents & POLLIN) Accept(fds[i].fd, connections);
    }
    for (size_t i = first_connection; i < fds.size(); ++i) {
      auto it = connections.find(fds[i].fd);
      if (it == connections.end() || fds[i].revents == 0 || it->second.accepted > polled_through) continue;
      Connection& c = it->second;
      if (c.draining) {
        char sink[4096];
        ssize_t n;
        while ((n = ::recv(c.fd, sink, sizeof(sink), 0)) > 0) {
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          ::close(c.fd);
          c.fd = -1;
        }
        continue;
      }
      ReadAndWrite(c);
    }
    now = std::chrono::steady_clock::now();
    for (auto it = connections.begin(); it != connections.end();) {
      Connection& c = it->second;
      if (c.fd >= 0 && c.responding && !c.draining && c.sent >= c.total()) {
        // Sent. Closing now with unread request bytes would send a reset that can destroy the response in
        // flight (a 431's oversized head, pipelined requests): shut the write side and read until the peer closes.
        ::shutdown(c.fd, SHUT_WR);
        c.draining = true;
        c.deadline = std::min(c.deadline, now + Millis(1000));
      }
      bool closed = c.fd < 0;
      bool late = now >= c.deadline;
      if (late && !c.draining) rejected_.fetch_add(1);
      if (closed || late) {
        c.Close();
        it = connections.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& [fd, c] : connections) {
    if (c.fd >= 0) ::close(c.fd);
  }
}

void HttpServer::Accept(int listen_fd, std::map<int, Connection>& connections) {
  for (int i = 0; i < 1024; ++i) {  // what is queued, up to a bound that keeps the others served in a flood
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        accept_paused_until_ = std::chrono::steady_clock::now() + Millis(100);
      }
      return;  // EAGAIN, or a connection that vanished before we took it
    }
    if (connections.size() >= options_.max_connections) EvictOldest(connections);
    // A fresh entry: one closed earlier in this round (a peer that sent half a request and left) may still be in
    // the map under this descriptor number, with its bytes.
    Connection& c = connections[fd];
    c = Connection{};
    c.fd = fd;
    c.deadline = std::chrono::steady_clock::now() + options_.io_timeout;
    c.accepted = accepted_.fetch_add(1) + 1;
    ReadAndWrite(c);  // a request already here (a probe's) is answered before the next accept can evict it
  }
}

// Reads the request if it is not whole yet; once answered, writes what the socket takes now.
void HttpServer::ReadAndWrite(Connection& c) {
  if (!c.responding) Read(c);
  if (c.fd < 0 || !c.responding || c.sent >= c.total()) return;
  const bool in_head = c.sent < c.out.size();
  const char* from = in_head ? c.out.data() + c.sent : c.body->data() + (c.sent - c.out.size());
  const size_t left = in_head ? c.out.size() - c.sent : c.total() - c.sent;
  ssize_t n = ::send(c.fd, from, left, MSG_NOSIGNAL | (in_head && c.body ? MSG_MORE : 0));
  if (n > 0) {
    c.sent += static_cast<size_t>(n);
  } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
    c.sent = c.total();  // the peer went away: nothing more to do for it
  }
}

// Full: the newest connection is the likeliest to be a probe or a scrape that sends its request at once, so room is
// made by the oldest connection that has not sent a whole request yet, else the oldest one answered and not closing,
// else the oldest one still being answered (a reader that does not take its response). Connections held open,
// silent or not reading, therefore cannot lock the kubelet's probes out, however many of them an attacker opens; a
// probe's request is answered (its small response written whole) as soon as it is read.
void HttpServer::EvictOldest(std::map<int, Connection>& connections) {
  auto rank = [](const Connection& c) { return !c.responding ? 0 : c.Unsent() ? 2 : 1; };
  auto oldest = connections.end();
  for (auto it = connections.begin(); it != connections.end(); ++it) {
    const bool better = oldest == connections.end() || rank(it->second) < rank(oldest->second) ||
                        (rank(it->second) == rank(oldest->second) && it->second.accepted < oldest->second.accepted);
    if (better) oldest = it;
  }
  if (oldest == connections.end()) return;
  if (oldest->second.Unsent()) evicted_answering_.fetch_add(1);
  oldest->second.Close();
  connections.erase(oldest);
  rejected_.fetch_add(1);
}

void HttpServer::Read(Connection& c) {
  char buf[4096];
  while (true) {
    ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      if (c.in.find("\r\n\r\n") != std::string::npos || c.in.find("\n\n") != std::string::npos) {
        return Answer(c);
      }
      if (c.in.size() > options_.max_request_bytes) {
        rejected_.fetch_add(1);
        return Respond(c, {431, "text/plain; charset=utf-8",
                           "request head over " + std::to_string(options_.max_request_bytes) + " bytes\n"},
                       false);
      }
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) {  // closed before a whole request
      ::close(c.fd);
      c.fd = -1;
    }
    return;
  }
}

StatusOr<HttpRequestLine> ParseRequestLine(std::string_view head) {
  std::string_view line = head.substr(0, head.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? std::string_view::npos : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.substr(sp2 + 1, 5) != "HTTP/") {
    return InvalidArgumentError("malformed request line");
  }
  HttpRequestLine r;
  r.method = std::string(line.substr(0, sp1));
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  r.path = std::string(target.substr(0, target.find('?')));
  return r;
}

void HttpServer::Answer(Connection& c) {
  auto request = ParseRequestLine(c.in);
  if (!request.ok()) {
    rejected_.fetch_add(1);
    return Respond(c, {400, "text/plain; charset=utf-8", "malformed request line\n"}, false);
  }
  const std::string& method = request->method;
  const std::string& path = request->path;
  bool head = method == "HEAD";
  if (method != "GET" && !head) {
    rejected_.fetch_add(1);
    return Respond(c, {405, "text/plain; charset=utf-8", "only GET and HEAD\n"}, false);
  }
  auto route = routes_.find(path);
  if (route == routes_.end()) {
    rejected_.fetch_add(1);
    std::string known;
    for (const auto& [p, h] : routes_) known += " " + p;
    return Respond(c, {404, "text/plain; charset=utf-8", "no such path; try:" + known + "\n"}, head);
  }
  HttpResponse response;
  try {
    response = route->second();
  } catch (const std::exception& e) {
    response = {500, "text/plain; charset=utf-8", std::string("handler failed: ") + e.what() + "\n"};
  }
  Respond(c, response, head);
}

void HttpServer::Respond(Connection& c, const HttpResponse& response, bool head) {
  const size_t length = response.shared_body ? response.shared_body->size() : response.body.size();
  c.out = "HTTP/1.1 " + std::to_string(response.status) + " " + Reason(response.status) + "\r\n";
  c.out += "Content-Type: " + response.content_type + "\r\n";
  c.out += "Content-Length: " + std::to_string(length) + "\r\n";
  if (response.status == 405) c.out += "Allow: GET, HEAD\r\n";
  c.out += "Cache-Control: no-store\r\nConnection: close\r\n\r\n";
  if (!head && response.shared_body) {
    c.body = response.shared_body;
  } else if (!head) {
    c.out += response.body;
  }
  c.responding = true;
  c.sent = 0;
  responses_.fetch_add(1);
}

}  // namespace stoker
