#include "tools/tcp_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "tools/socket_io.h"

namespace stoker::tools {

StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(const std::string& target) {
  size_t scheme = target.find("://");
  size_t colon = target.rfind(':');
  if (scheme == std::string::npos || colon == std::string::npos || colon < scheme + 3) {
    return InvalidArgumentError("proxy target '" + target + "' is not tcp://HOST:PORT");
  }
  auto proxy = std::unique_ptr<TcpProxy>(new TcpProxy());
  proxy->target_host_ = target.substr(scheme + 3, colon - scheme - 3);
  proxy->target_port_ = static_cast<uint16_t>(std::stoi(target.substr(colon + 1)));
  proxy->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(proxy->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(proxy->listen_fd_, 64) != 0) {
    return UnavailableError(std::string("proxy cannot listen: ") + std::strerror(errno));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(proxy->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  proxy->endpoint_ = "tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  proxy->wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  proxy->thread_ = std::thread([p = proxy.get()] { p->Loop(); });
  return proxy;
}

TcpProxy::~TcpProxy() {
  stop_.store(true);
  uint64_t one = 1;
  ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  (void)n;
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void TcpProxy::Blackhole() { blackhole_.store(true); }
void TcpProxy::Heal() { blackhole_.store(false); }
void TcpProxy::ResetAll() {
  reset_requested_.store(true);
  uint64_t one = 1;
  ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  (void)n;
}

void TcpProxy::Loop() {
  struct Pair {
    int client = -1;
    int server = -1;  // -1 while black-holed at accept time
  };
  std::vector<Pair> pairs;
  auto connect_target = [this]() {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(target_port_);
    ::inet_pton(AF_INET, target_host_.c_str(), &addr.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      return -1;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
  };
  std::vector<char> buffer(1 << 16);
  while (!stop_.load()) {
    if (!blackhole_.load()) {
      // Connections accepted during a blackhole never reached the target: cut them, so their peers reconnect.
      for (Pair& p : pairs) {
        if (p.server < 0) {
          CloseAbruptly(p.client);
          p.client = -1;
        }
      }
      pairs.erase(std::remove_if(pairs.begin(), pairs.end(), [](const Pair& p) { return p.client < 0; }),
                  pairs.end());
    }
    if (reset_requested_.exchange(false)) {
      for (Pair& p : pairs) {
        CloseAbruptly(p.client);
        CloseAbruptly(p.server);
      }
      pairs.clear();
    }
    std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const short events = blackhole_.load() ? 0 : POLLIN;  // black-holed: leave the bytes where they are
    for (const Pair& p : pairs) {
      fds.push_back({p.client, events, 0});
      fds.push_back({p.server, events, 0});  // fd -1 is ignored by poll
    }
    const size_t polled = pairs.size();  // pairs accepted below are polled from the next round on
    if (::poll(fds.data(), fds.size(), 200) < 0 && errno != EINTR) return;
    if (fds[1].revents & POLLIN) {
      uint64_t ignored;
      ssize_t n = ::read(wake_fd_, &ignored, sizeof(ignored));
      (void)n;
    }
    if (fds[0].revents & POLLIN) {
      int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client >= 0) {
        int one = 1;
        ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        int server = blackhole_.load() ? -1 : connect_target();
        if (server < 0 && !blackhole_.load()) {
          CloseAbruptly(client);  // target down: refuse like it would
        } else {
          pairs.push_back({client, server});
        }
      }
    }
    std::vector<Pair> alive;
    for (size_t i = 0; i < pairs.size(); ++i) {
      Pair p = pairs[i];
      if (i >= polled) {
        alive.push_back(p);
        continue;
      }
      bool closed = false;
      for (int side = 0; side < 2 && !closed; ++side) {
        const pollfd& f = fds[2 + 2 * i + side];
        if (f.fd < 0 || !(f.revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (!(f.events & POLLIN)) continue;
        ssize_t n = ::read(f.fd, buffer.data(), buffer.size());
        if (n <= 0) {
          closed = true;
          break;
        }
        int to = side == 0 ? p.server : p.client;
        if (to < 0) continue;
        if (!WriteAll(to, buffer.data(), static_cast<size_t>(n))) closed = true;
        forwarded_.fetch_add(static_cast<uint64_t>(n));
      }
      if (closed) {
        ::close(p.client);
        if (p.server >= 0) ::close(p.server);
      } else {
        alive.push_back(p);
      }
    }
    pairs.swap(alive);
  }
  for (Pair& p : pairs) {
    ::close(p.client);
    if (p.server >= 0) ::close(p.server);
  }
}

}  // namespace stoker::tools
