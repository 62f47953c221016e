// TcpProxy: forwards TCP connections from an ephemeral port on 127.0.0.1 to a target, on a background thread,
// and fails the link the ways networks do, for the fault tests and `stoker soak`:
//   Blackhole() — connections stay open but nothing moves, both ways: the proxy stops reading, so bytes wait in
//                 the kernel and senders' buffers fill, and new connections are accepted but go nowhere (a
//                 partition: nothing is refused, nothing arrives; only heartbeats can tell). TCP streams are never
//                 corrupted: on Heal() the held bytes flow on, late, as after a real partition;
//   ResetAll()  — every connection is closed abruptly (RST), as by a restarted middlebox;
//   Heal()      — forward again (new and existing connections);
//   CorruptNext(n) — the next n reads of at least 4 KiB from the target have one bit of their middle byte flipped
//                 on the way to the client (a man in the middle changing batches: sealed ones must be refused).
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "stoker/status.h"

namespace stoker::tools {

class TcpProxy {
 public:
  // `target` is "tcp://HOST:PORT" (a numeric IPv4 host).
  static StatusOr<std::unique_ptr<TcpProxy>> Start(const std::string& target);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  // Where to connect instead of the target: "tcp://127.0.0.1:PORT".
  const std::string& endpoint() const { return endpoint_; }

  void Blackhole();
  void Heal();
  void ResetAll();
  void CorruptNext(int chunks) { corrupt_left_.store(chunks); }
  uint64_t bytes_forwarded() const { return forwarded_.load(); }
  uint64_t chunks_corrupted() const { return corrupted_.load(); }

 private:
  TcpProxy() = default;
  void Loop();

  std::string endpoint_;
  std::string target_host_;
  uint16_t target_port_ = 0;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<bool> blackhole_{false};
  std::atomic<bool> reset_requested_{false};
  std::atomic<uint64_t> forwarded_{0};
  std::atomic<int> corrupt_left_{0};
  std::atomic<uint64_t> corrupted_{0};
  std::thread thread_;
};

}  // namespace stoker::tools
