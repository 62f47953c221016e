#include "client/src/client_metrics.h"

#include "client/cuda/gpu_probe.h"
#include "client/src/nvml.h"
#include "common/json_writer.h"
#include "common/logging.h"

namespace stoker::internal {

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
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = next_id_++;
  members_[id] = std::move(member);
  collectors_[id] = collector;
  return id;
}

void ClientProcess::Leave(uint64_t id) {
  uint64_t collector = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = collectors_.find(id);
    if (it == collectors_.end()) return;
    collector = it->second;
    collectors_.erase(it);
    members_.erase(id);
  }
  hub_.Remove(collector);  // waits for a scrape in progress: the member's objects may go once this returns
}

StatusOr<std::string> ClientProcess::Serve(const std::string& listen) {
  std::lock_guard<std::mutex> lock(mu_);
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
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, m] : members_) {
    if (m.live) STOKER_RETURN_IF_ERROR(m.live());
  }
  return Status::Ok();
}

Status ClientProcess::Ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (members_.empty()) return UnavailableError("no client connected in this process");
  for (const auto& [id, m] : members_) {
    if (m.ready) STOKER_RETURN_IF_ERROR(m.ready());
  }
  return Status::Ok();
}

std::string ClientProcess::State() const {
  std::lock_guard<std::mutex> lock(mu_);
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
    std::lock_guard<std::mutex> lock(mu_);
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

}  // namespace stoker::internal
