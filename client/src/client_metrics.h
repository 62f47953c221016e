// The training process's side of observability. ClientProcess: every Client in the process shares one MetricsHub
// and at most one admin HTTP server (/metrics, /healthz, /readyz, /state): a trainer with several ranks in one
// process exposes one endpoint, as a PodMonitor expects. Each Client joins with a Member (MemberFor): its collector
// of stoker_client_* families, its liveness (the I/O thread turns), readiness (connected) and /state JSON; GPU
// readings from NVML are taken once per distinct GPU the members feed.
//
// The instance lives as long as the process (it is never destroyed: its server thread must not outlive statics).
// Thread safety: all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "base/admin_server.h"
#include "base/metrics.h"
#include "stoker/status.h"
#include "base/sync.h"

namespace stoker::client {

class ClientProcess {
 public:
  static ClientProcess& Get();

  struct Member {
    Collector collect;
    std::function<Status()> live;        // OK while its I/O thread turns
    std::function<Status()> ready;       // OK when connected
    std::function<std::string()> state;  // JSON
    int gpu = -1;                        // CUDA ordinal fed, -1: none
    std::string gpu_uuid;
  };
  uint64_t Join(Member member);
  void Leave(uint64_t id);

  // Starts the admin server on `listen` unless one serves already. Returns the address served, which differs
  // from `listen` when an earlier Client started it elsewhere.
  StatusOr<std::string> Serve(const std::string& listen);

 private:
  ClientProcess();
  void CollectGpus(MetricFamilies& out) const;
  Status Live() const;
  Status Ready() const;
  std::string State() const;

  MetricsHub hub_{"client"};
  mutable Mutex mu_;
  uint64_t next_id_ STOKER_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Member> members_ STOKER_GUARDED_BY(mu_);
  std::map<uint64_t, uint64_t> collectors_ STOKER_GUARDED_BY(mu_);  // member id -> hub collector id
  std::unique_ptr<AdminServer> admin_ STOKER_GUARDED_BY(mu_);
};

class ClientCore;

// A client's membership of the process's endpoint. Holds the core weakly: a scrape after the client is gone
// finds nothing rather than a dangling core.
ClientProcess::Member MemberFor(const std::shared_ptr<ClientCore>& core, int gpu, const std::string& gpu_uuid);

// The stoker_client_* families of one client (docs/observability.md).
void CollectClient(const ClientCore& core, MetricFamilies& out);

// The UUID of the GPU a CUDA ordinal names (from CUDA when built with it, else NVML), or "" if unknown.
std::string GpuUuidForOrdinal(int ordinal);

}  // namespace stoker::client
