// The process's metrics endpoint shared by its clients (ClientProcess), each client's families and its /state.
#include "client/src/client_metrics.h"

#include "client/cuda/gpu_probe.h"
#include "client/src/client_core.h"
#include "client/src/nvml.h"
#include "base/logging.h"

namespace stoker::client {

ClientProcess& ClientProcess::Get() {
  static ClientProcess* process = new ClientProcess();  // never destroyed, see the header
  return *process;
}

ClientProcess::ClientProcess() {
  hub_.Add([this](MetricFamilies& out) { CollectGpus(out); });
}

uint64_t ClientProcess::Join(Member member) {
  // The hub first, outside mu_: a scrape holds the hub's lock while CollectGpus takes mu_.
  uint64_t collector = hub_.Add(member.collect);
  MutexLock lock(mu_);
  uint64_t id = next_id_++;
  members_[id] = std::move(member);
  collectors_[id] = collector;
  return id;
}

void ClientProcess::Leave(uint64_t id) {
  uint64_t collector = 0;
  {
    MutexLock lock(mu_);
    auto it = collectors_.find(id);
    if (it == collectors_.end()) return;
    collector = it->second;
    collectors_.erase(it);
    members_.erase(id);
  }
  hub_.Remove(collector);  // waits for a scrape in progress: the member's objects may go once this returns
}

StatusOr<std::string> ClientProcess::Serve(const std::string& listen) {
  MutexLock lock(mu_);
  if (admin_) return admin_->address();
  AdminHandlers handlers;
  handlers.live = [this] { return Live(); };
  handlers.ready = [this] { return Ready(); };
  handlers.state = [this] { return State(); };
  STOKER_ASSIGN_OR_RETURN(admin_, AdminServer::Start(listen, hub_, std::move(handlers)));
  STOKER_LOG(kInfo) << "client metrics on http://" << admin_->address() << "/metrics";
  return admin_->address();
}

Status ClientProcess::Live() const {
  MutexLock lock(mu_);
  for (const auto& [id, m] : members_) {
    if (m.live) STOKER_RETURN_IF_ERROR(m.live());
  }
  return Status::Ok();
}

Status ClientProcess::Ready() const {
  MutexLock lock(mu_);
  if (members_.empty()) return UnavailableError("no client connected in this process");
  for (const auto& [id, m] : members_) {
    if (m.ready) STOKER_RETURN_IF_ERROR(m.ready());
  }
  return Status::Ok();
}

std::string ClientProcess::State() const {
  MutexLock lock(mu_);
  std::string out = "{\"component\": \"client\", \"clients\": [";
  bool first = true;
  for (const auto& [id, m] : members_) {
    if (!first) out += ", ";
    first = false;
    out += m.state ? m.state() : "{}";
  }
  return out + "]}";
}

void ClientProcess::CollectGpus(MetricFamilies& out) const {
  std::map<std::string, int> gpus;  // uuid -> ordinal
  {
    MutexLock lock(mu_);
    for (const auto& [id, m] : members_) {
      if (m.gpu >= 0 && !m.gpu_uuid.empty()) gpus.emplace(m.gpu_uuid, m.gpu);
    }
  }
  if (gpus.empty()) return;
  Nvml* nvml = Nvml::Shared();
  if (nvml == nullptr) return;
  FamilyBuilder utilization("stoker_gpu_utilization_ratio",
                            "NVML: fraction of the last sample period a kernel ran on the GPU (context only: says "
                            "nothing of input starvation).",
                            prometheus::MetricType::Gauge);
  FamilyBuilder used("stoker_gpu_memory_used_bytes", "NVML: GPU memory in use (all processes).",
                     prometheus::MetricType::Gauge);
  FamilyBuilder total("stoker_gpu_memory_total_bytes", "NVML: GPU memory.", prometheus::MetricType::Gauge);
  for (const auto& [uuid, ordinal] : gpus) {
    auto reading = nvml->ReadUuid(uuid);
    if (!reading.ok()) continue;
    MetricLabels labels = {{"gpu", std::to_string(ordinal)}, {"gpu_uuid", uuid}};
    utilization.Add(labels, reading->utilization);
    used.Add(labels, static_cast<double>(reading->memory_used));
    total.Add(labels, static_cast<double>(reading->memory_total));
  }
  out.push_back(utilization.Build());
  out.push_back(used.Build());
  out.push_back(total.Build());
}

std::string GpuUuidForOrdinal(int ordinal) {
  if (ordinal < 0) return "";
  for (const GpuDevice& d : ListGpus()) {
    if (d.ordinal == ordinal && !d.uuid.empty()) return d.uuid;
  }
  if (Nvml* nvml = Nvml::Shared()) {
    auto uuid = nvml->UuidForCudaOrdinal(ordinal);
    if (uuid.ok()) return *uuid;
    STOKER_LOG(kWarning) << "GPU " << ordinal << ": " << uuid.status().message();
  }
  return "";
}

ClientProcess::Member MemberFor(const std::shared_ptr<ClientCore>& core, int gpu, const std::string& gpu_uuid) {
  std::weak_ptr<ClientCore> weak = core;
  ClientProcess::Member member;
  member.collect = [weak](MetricFamilies& out) {
    if (auto c = weak.lock()) CollectClient(*c, out);
  };
  member.live = [weak]() -> Status {
    auto c = weak.lock();
    return c ? c->Live() : Status::Ok();
  };
  member.ready = [weak]() -> Status {
    auto c = weak.lock();
    return c ? c->Ready() : UnavailableError("closed");
  };
  member.state = [weak]() -> std::string {
    auto c = weak.lock();
    return c ? c->StateJson() : std::string("{}");
  };
  member.gpu = gpu;
  member.gpu_uuid = gpu_uuid;
  return member;
}

namespace {

// A family of one series, labelled `l`.
void One(MetricFamilies& out, const MetricLabels& l, const char* name, const char* help,
         prometheus::MetricType type, double value) {
  out.push_back(FamilyBuilder(name, help, type).Add(l, value).Build());
}

// What the client refused or had to redo: batches dropped by reason, quarantined samples by reason, workers' errors
// and connections opened anew.
void CollectWhatWentWrong(const ClientStats& s, const MetricLabels& l, MetricFamilies& out) {
  using prometheus::MetricType;
  FamilyBuilder dropped("stoker_client_dropped_batches_total", "Batches received and not delivered, by reason.",
                        MetricType::Counter);
  const std::pair<const char*, uint64_t> reasons[] = {{"duplicate", s.dropped_duplicate},
                                                      {"stale_attempt", s.dropped_stale_attempt},
                                                      {"bad_frame", s.dropped_bad_frame},
                                                      {"out_of_window", s.dropped_out_of_window},
                                                      {"unlisted", s.dropped_unlisted},
                                                      {"wrong_samples", s.dropped_wrong_samples},
                                                      {"seal_failed", s.dropped_seal_failed},
                                                      {"replayed", s.dropped_replayed}};
  for (const auto& [reason, n] : reasons) {
    MetricLabels with = l;
    with.emplace_back("reason", reason);
    dropped.Add(with, static_cast<double>(n));
  }
  out.push_back(dropped.Build());
  FamilyBuilder quarantined("stoker_client_quarantined_samples_total",
                            "Samples next() delivered flagged quarantined (zero pixels, label -1), by the reason their "
                            "worker gave.", MetricType::Counter);
  for (const auto& [reason, n] : s.quarantined_by_reason) {
    MetricLabels with = l;
    with.emplace_back("reason", reason);
    quarantined.Add(with, static_cast<double>(n));
  }
  out.push_back(quarantined.Build());
  One(out, l, "stoker_client_worker_errors_total", "Error messages received from workers.", MetricType::Counter,
      static_cast<double>(s.worker_errors));
  One(out, l, "stoker_client_worker_reconnects_total",
      "Sealed data connections opened anew because their worker answered nothing to an offer.", MetricType::Counter,
      static_cast<double>(s.worker_reconnects));
}

}  // namespace

// Runs on the scraping thread.
void CollectClient(const ClientCore& c, MetricFamilies& out) {
  using prometheus::MetricType;
  ClientStats s = c.Stats();
  const uint64_t h2d_bytes = c.h2d_bytes();
  const MetricLabels& l = c.labels();
  auto one = [&](const char* name, const char* help, MetricType type, double value) {
    One(out, l, name, help, type, value);
  };
  auto histogram = [&](const char* name, const char* help, const prometheus::Histogram& h) {
    out.push_back(FamilyBuilder(name, help, MetricType::Histogram).Add(l, h).Build());
  };
  one("stoker_client_info",
      "1 per client: its pipeline, rank and GPU (join dcgm-exporter's UUID on gpu_uuid, or anything on pod).",
      MetricType::Gauge, 1);
  one("stoker_client_batches_total", "Batches next() delivered.", MetricType::Counter,
      static_cast<double>(s.batches_delivered));
  one("stoker_client_samples_total", "Samples next() delivered (padding included).", MetricType::Counter,
      static_cast<double>(s.samples_delivered));
  histogram("stoker_client_input_wait_seconds", "Per batch after the first: host seconds next() blocked waiting for it.",
            c.wait_histogram());
  histogram("stoker_client_step_seconds",
            "Seconds between consecutive batches next() returned: the training step as the input side sees it (the "
            "denominator of the stall ratio).",
            c.step_histogram());
  one("stoker_client_input_stall_seconds_total",
      "Of the waits in next() after the first batch, the seconds during which the consumer had nothing left to run: "
      "the GPU idle for lack of input. The primary starvation signal.",
      MetricType::Counter, s.stall_seconds);
  one("stoker_client_startup_wait_seconds_total", "Seconds next() waited for this client's first batch.",
      MetricType::Counter, s.startup_seconds);
  one("stoker_client_receive_seconds_total", "Seconds this client's threads spent opening batches and copying them "
      "into pinned memory (stage receive).", MetricType::Counter, s.receive_seconds);
  one("stoker_client_h2d_bytes_total", "Bytes copied host to device (0 on the host path).", MetricType::Counter,
      static_cast<double>(h2d_bytes));
  histogram("stoker_client_h2d_seconds",
            "Per batch: seconds its host-to-device copy took, from CUDA events (none on the host path).",
            c.h2d_histogram());
  one("stoker_client_prefetch_batches", "Batches received and ready, not yet handed out by next().",
      MetricType::Gauge, s.prefetched);
  one("stoker_client_prefetch_capacity_batches", "Configured prefetch depth.", MetricType::Gauge, c.window_size());
  one("stoker_client_last_batch_timestamp_seconds",
      "Unix time next() last returned a batch (connect time before the first).", MetricType::Gauge,
      s.last_batch_unix_seconds);
  one("stoker_client_end_of_job", "1 once every batch of every epoch was delivered.", MetricType::Gauge,
      s.end_of_job ? 1 : 0);
  one("stoker_client_received_bytes_total", "Pixel bytes received from workers.", MetricType::Counter,
      static_cast<double>(s.bytes_received));
  one("stoker_client_connected_workers", "Workers this client holds a data connection to.", MetricType::Gauge,
      s.connected_workers);
  one("stoker_client_position_batches", "Global index of the next batch next() returns.", MetricType::Gauge,
      static_cast<double>(s.position));
  CollectWhatWentWrong(s, l, out);
  CollectTransportErrors("client", c.transport_errors().Counts(), l, out);
}

}  // namespace stoker::client
