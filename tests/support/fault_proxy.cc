// FaultProxy (fault_proxy.h): a thread per connection, a delay queue per direction, faults taken from budgets.
#include "tests/support/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

#include "tools/socket_io.h"

namespace stoker::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string CannedResponse(int status) {
  const std::string body = status == 503 ? "<Error><Code>SlowDown</Code><Message>Please reduce your request rate "
                                           "(injected).</Message></Error>"
                                         : "<Error><Code>InternalError</Code><Message>injected</Message></Error>";
  return "HTTP/1.1 " + std::to_string(status) + (status == 503 ? " Service Unavailable" : " Internal Server Error") +
         "\r\nContent-Type: application/xml\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

struct Chunk {
  Clock::time_point due;
  std::string data;
};

}  // namespace

StatusOr<std::unique_ptr<FaultProxy>> FaultProxy::Start(int target_port) {
  auto proxy = std::unique_ptr<FaultProxy>(new FaultProxy());
  proxy->target_port_ = target_port;
  uint16_t port = 0;
  auto fd = tools::ListenOnLoopback(128, &port);
  if (!fd.ok()) return UnavailableError("fault proxy " + std::string(fd.status().message()));
  proxy->listen_fd_ = *fd;
  proxy->port_ = port;
  proxy->acceptor_ = std::thread([p = proxy.get()] { p->Accept(); });
  return proxy;
}

FaultProxy::~FaultProxy() {
  stop_.store(true);
  ::shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  ::close(listen_fd_);
  MutexLock lock(mu_);
  for (std::thread& t : connections_threads_) t.join();
}

bool FaultProxy::TakeOne(std::atomic<int>& budget) {
  int left = budget.load();
  while (left > 0) {
    if (budget.compare_exchange_weak(left, left - 1)) return true;
  }
  return false;
}

void FaultProxy::Accept() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    int one = 1;
    ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ++connections_;
    MutexLock lock(mu_);
    connections_threads_.emplace_back([this, client] { Serve(client); });
  }
}

void FaultProxy::Serve(int client) {
  int server = tools::ConnectTcp("127.0.0.1", static_cast<uint16_t>(target_port_));
  if (server < 0) {
    tools::CloseAbruptly(client);  // the server is down: refuse like it would
    return;
  }
  int fds[2] = {client, server};         // direction d reads fds[d], writes fds[1 - d]
  std::deque<Chunk> pending[2];          // 0: requests, 1: responses
  bool open = true;
  std::vector<char> buffer(1 << 16);
  while (open && !stop_.load()) {
    const auto now = Clock::now();
    int timeout_ms = 50;
    for (auto& q : pending) {
      if (!q.empty()) {
        auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(q.front().due - now).count();
        timeout_ms = static_cast<int>(std::clamp<int64_t>(wait, 0, timeout_ms));
      }
    }
    pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
    if (::poll(p, 2, timeout_ms) < 0 && errno != EINTR) break;
    for (int d = 0; d < 2 && open; ++d) {
      if (!(p[d].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(fds[d], buffer.data(), buffer.size());
      if (n <= 0) {
        open = false;
        break;
      }
      std::string data(buffer.data(), static_cast<size_t>(n));
      if (d == 0 && TakeOne(fails_left_)) {  // answer this request here, never forwarding it
        tools::WriteAll(client, CannedResponse(fail_status_.load()).data(), CannedResponse(fail_status_.load()).size());
        ++fails_done_;
        open = false;
        break;
      }
      pending[d].push_back({Clock::now() + std::chrono::microseconds(latency_us_.load()), std::move(data)});
    }
    for (int d = 0; d < 2 && open; ++d) {
      while (!pending[d].empty() && pending[d].front().due <= Clock::now()) {
        std::string& data = pending[d].front().data;
        if (d == 1 && TakeOne(resets_left_)) {  // cut this response short
          tools::WriteAll(client, data.data(), std::max<size_t>(1, data.size() / 2));
          ++resets_done_;
          tools::CloseAbruptly(client);
          tools::CloseAbruptly(server);
          return;
        }
        if (!tools::WriteAll(fds[1 - d], data.data(), data.size())) open = false;
        pending[d].pop_front();
      }
    }
  }
  ::close(client);
  ::close(server);
}

}  // namespace stoker::testing
