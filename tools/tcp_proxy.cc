// TcpProxy (tcp_proxy.h): one poll loop over every connection, forwarding both ways until told to fail.
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
namespace {

// One proxied connection.
struct Pair {
  int client = -1;
  int server = -1;  // -1 while black-holed at accept time
};

void CloseBoth(const Pair& p) {
  ::close(p.client);
  if (p.server >= 0) ::close(p.server);
}

// Connections accepted during a blackhole never reached the target: cut them, so their peers reconnect.
void CutUnconnected(std::vector<Pair>& pairs) {
  for (Pair& p : pairs) {
    if (p.server < 0) {
      CloseAbruptly(p.client);
      p.client = -1;
    }
  }
  pairs.erase(std::remove_if(pairs.begin(), pairs.end(), [](const Pair& p) { return p.client < 0; }), pairs.end());
}

// What the proxy does to the bytes it moves: counts them, and flips a bit in chunks from the target while asked to.
struct Tamper {
  std::atomic<uint64_t>& forwarded;
  std::atomic<int>& corrupt_left;
  std::atomic<uint64_t>& corrupted;

  void FromTarget(char* data, size_t n) {
    if (n < 4096) return;
    int left = corrupt_left.load();
    while (left > 0 && !corrupt_left.compare_exchange_weak(left, left - 1)) {
    }
    if (left <= 0) return;
    data[n / 2] = static_cast<char>(data[n / 2] ^ 0x10);
    corrupted.fetch_add(1);
  }
};

// Moves what one side of `p` has to the other; false when the pair is done (a side closed or cannot take more).
bool Forward(const Pair& p, const pollfd* sides, std::vector<char>& buffer, Tamper& tamper) {
  for (int side = 0; side < 2; ++side) {
    const pollfd& f = sides[side];
    if (f.fd < 0 || !(f.revents & (POLLIN | POLLHUP | POLLERR))) continue;
    if (!(f.events & POLLIN)) continue;
    ssize_t n = ::read(f.fd, buffer.data(), buffer.size());
    if (n <= 0) return false;
    int to = side == 0 ? p.server : p.client;
    if (to < 0) continue;
    if (side == 1) tamper.FromTarget(buffer.data(), static_cast<size_t>(n));
    const bool written = WriteAll(to, buffer.data(), static_cast<size_t>(n));
    tamper.forwarded.fetch_add(static_cast<uint64_t>(n));
    if (!written) return false;
  }
  return true;
}

// Takes a new connection and connects it to the target; while black-holed it goes nowhere (and is cut on Heal).
void Accept(int listen_fd, const std::atomic<bool>& blackhole, const std::string& host, uint16_t port,
            std::vector<Pair>& pairs) {
  int client = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (client < 0) return;
  int one = 1;
  ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int server = blackhole.load() ? -1 : ConnectTcp(host, port);
  if (server < 0 && !blackhole.load()) {
    CloseAbruptly(client);  // target down: refuse like it would
  } else {
    pairs.push_back({client, server});
  }
}

}  // namespace

StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(const std::string& target) {
  size_t scheme = target.find("://");
  size_t colon = target.rfind(':');
  if (scheme == std::string::npos || colon == std::string::npos || colon < scheme + 3) {
    return InvalidArgumentError("proxy target '" + target + "' is not tcp://HOST:PORT");
  }
  auto proxy = std::unique_ptr<TcpProxy>(new TcpProxy());
  proxy->target_host_ = target.substr(scheme + 3, colon - scheme - 3);
  proxy->target_port_ = static_cast<uint16_t>(std::stoi(target.substr(colon + 1)));
  uint16_t port = 0;
  auto fd = ListenOnLoopback(64, &port);
  if (!fd.ok()) return UnavailableError("proxy " + std::string(fd.status().message()));
  proxy->listen_fd_ = *fd;
  proxy->endpoint_ = "tcp://127.0.0.1:" + std::to_string(port);
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
  if (listen_fd_ >= 0) ::close(listen_fd_);
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
  std::vector<Pair> pairs;
  std::vector<char> buffer(1 << 16);
  Tamper tamper{forwarded_, corrupt_left_, corrupted_};
  while (!stop_.load()) {
    if (!blackhole_.load()) CutUnconnected(pairs);
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
    if (fds[0].revents & POLLIN) Accept(listen_fd_, blackhole_, target_host_, target_port_, pairs);
    std::vector<Pair> alive;
    for (size_t i = 0; i < pairs.size(); ++i) {
      if (i >= polled || Forward(pairs[i], &fds[2 + 2 * i], buffer, tamper)) {
        alive.push_back(pairs[i]);
      } else {
        CloseBoth(pairs[i]);
      }
    }
    pairs.swap(alive);
  }
  for (const Pair& p : pairs) CloseBoth(p);
}

}  // namespace stoker::tools
