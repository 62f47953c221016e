// FaultProxy: a TCP proxy between stoker and a storage server (HTTP) that adds the faults object storage has, for
// the object-storage tests and benchmarks:
//   SetLatency(d)        — every chunk waits d before it is forwarded, in each direction (adds 2d of round trip;
//                          bytes keep flowing meanwhile, so it is latency, not a bandwidth cap);
//   ResetMidBody(n)      — the next n responses are cut after part of their first chunk: both sides get a RST;
//   FailRequests(s, n)   — the next n requests are answered by the proxy itself with HTTP status s (500, 503:
//                          S3's SlowDown body) and the connection closed, never reaching the server.
// One thread per connection; all of them stop with the proxy. Loopback only.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "stoker/status.h"
#include "base/sync.h"

namespace stoker::testing {

class FaultProxy {
 public:
  // Forwards 127.0.0.1:EPHEMERAL to 127.0.0.1:target_port.
  static StatusOr<std::unique_ptr<FaultProxy>> Start(int target_port);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  void SetLatency(std::chrono::microseconds one_way) { latency_us_.store(one_way.count()); }
  void ResetMidBody(int responses) { resets_left_.store(responses); }
  void FailRequests(int status, int requests) {
    fail_status_.store(status);
    fails_left_.store(requests);
  }
  uint64_t resets_done() const { return resets_done_.load(); }
  uint64_t fails_done() const { return fails_done_.load(); }
  uint64_t connections() const { return connections_.load(); }

 private:
  FaultProxy() = default;
  void Accept();
  void Serve(int client);
  bool TakeOne(std::atomic<int>& budget);

  int port_ = 0;
  int target_port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> latency_us_{0};
  std::atomic<int> resets_left_{0}, fails_left_{0}, fail_status_{503};
  std::atomic<uint64_t> resets_done_{0}, fails_done_{0}, connections_{0};
  std::thread acceptor_;
  Mutex mu_;
  std::vector<std::thread> connections_threads_ STOKER_GUARDED_BY(mu_);
};

}  // namespace stoker::testing
