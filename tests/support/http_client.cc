// A minimal HTTP client for tests (http_client.h): GET a path of an admin port.
#include "tests/support/http_client.h"

#include <chrono>
#include <cstdlib>
#include <thread>

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "base/http_server.h"

namespace stoker {

StatusOr<HttpReply> HttpExchange(const std::string& address, const std::string& request, Duration timeout) {
  STOKER_ASSIGN_OR_RETURN(auto host_port, ParseHostPort(address));
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::string host = host_port.first == "0.0.0.0" ? "127.0.0.1" : host_port.first;
  if (::getaddrinfo(host.c_str(), std::to_string(host_port.second).c_str(), &hints, &found) != 0 || !found) {
    return UnavailableError("cannot resolve " + address);
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int rc = fd < 0 ? -1 : ::connect(fd, found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  if (fd < 0 || (rc != 0 && errno != EINPROGRESS)) {
    if (fd >= 0) ::close(fd);
    return UnavailableError("cannot connect to " + address + ": " + std::strerror(errno));
  }
  TimePoint deadline = std::chrono::steady_clock::now() + timeout;
  auto wait = [&](short events) -> Status {
    while (true) {
      int left = static_cast<int>(std::max<int64_t>(0, ToMillis(deadline - std::chrono::steady_clock::now())));
      pollfd p{fd, events, 0};
      int n = ::poll(&p, 1, left);
      if (n > 0) return Status::Ok();
      if (n == 0) return DeadlineExceededError("no answer from " + address + " in time");
      if (errno != EINTR) return UnavailableError(std::string("poll: ") + std::strerror(errno));
    }
  };
  std::string reply;
  Status status = Status::Ok();
  size_t sent = 0;
  while (status.ok() && sent < request.size()) {
    status = wait(POLLOUT);
    if (!status.ok()) break;
    ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (errno != EAGAIN && errno != EINTR) {
      status = UnavailableError("cannot send to " + address + ": " + std::strerror(errno));
    }
  }
  while (status.ok()) {
    status = wait(POLLIN);
    if (!status.ok()) break;
    char buf[16384];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      reply.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EAGAIN && errno != EINTR) {
      if (reply.empty()) status = UnavailableError("connection to " + address + " failed: " + std::strerror(errno));
      break;
    }
  }
  ::close(fd);
  STOKER_RETURN_IF_ERROR(status);
  HttpReply out;
  size_t head_end = reply.find("\r\n\r\n");
  if (reply.compare(0, 5, "HTTP/") != 0 || head_end == std::string::npos) {
    return InvalidArgumentError("not an HTTP reply from " + address);
  }
  size_t sp = reply.find(' ');
  out.status = std::atoi(reply.c_str() + sp + 1);
  size_t line = reply.find("\r\n") + 2;
  while (line < head_end) {
    size_t eol = reply.find("\r\n", line);
    std::string header = reply.substr(line, eol - line);
    size_t colon = header.find(':');
    if (colon != std::string::npos) {
      std::string name = header.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      size_t value = header.find_first_not_of(' ', colon + 1);
      out.headers[name] = value == std::string::npos ? "" : header.substr(value);
    }
    line = eol + 2;
  }
  out.body = reply.substr(head_end + 4);
  return out;
}

StatusOr<HttpReply> HttpGet(const std::string& address, const std::string& path, Duration timeout) {
  return HttpExchange(address, "GET " + path + " HTTP/1.1\r\nHost: " + address + "\r\nConnection: close\r\n\r\n",
                      timeout);
}

StatusOr<double> ScrapeMetric(const std::string& address, const std::string& series) {
  STOKER_ASSIGN_OR_RETURN(HttpReply reply, HttpGet(address, "/metrics"));
  size_t at = 0;
  while ((at = reply.body.find(series, at)) != std::string::npos) {
    const bool line_start = at == 0 || reply.body[at - 1] == '\n';
    const size_t end = at + series.size();
    if (line_start && end < reply.body.size() && (reply.body[end] == ' ' || reply.body[end] == '{')) {
      const size_t space = reply.body.find(' ', end);
      if (space == std::string::npos) break;
      return std::strtod(reply.body.c_str() + space + 1, nullptr);
    }
    at = end;
  }
  return NotFoundError(series + " is not in " + address + "'s /metrics");
}

Status WaitForMetric(const std::string& address, const std::string& series, double at_least, Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last = "never scraped";
  while (std::chrono::steady_clock::now() < deadline) {
    auto value = ScrapeMetric(address, series);
    if (value.ok() && *value >= at_least) return Status::Ok();
    last = value.ok() ? std::to_string(*value) : value.status().message();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling another process, with a deadline
  }
  return DeadlineExceededError(series + " did not reach " + std::to_string(at_least) + " (last: " + last + ")");
}

Status WaitForReady(const std::string& address, Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last = "never answered";
  while (std::chrono::steady_clock::now() < deadline) {
    auto ready = HttpGet(address, "/readyz", Millis(2000));
    if (ready.ok() && ready->status == 200) return Status::Ok();
    last = ready.ok() ? std::to_string(ready->status) + " " + ready->body : ready.status().message();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling another process, with a deadline
  }
  return DeadlineExceededError(address + " did not become ready (last: " + last + ")");
}

int OpenIdleConnection(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace stoker
