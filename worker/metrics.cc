// The worker's Prometheus families (metrics.h), built at scrape time from Worker::Stats() and its histograms.
#include "worker/metrics.h"

#include <chrono>

namespace stoker::worker {

using prometheus::MetricType;

namespace {

// Object storage read-ahead (worker/read_ahead.h): its memory, depth and queue.
void CollectReadAhead(const WorkerStats& s, MetricFamilies& out) {
  auto gauge = [&](const char* name, const char* help, uint64_t value) {
    out.push_back(FamilyBuilder(name, help, MetricType::Gauge).Add({}, static_cast<double>(value)).Build());
  };
  gauge("stoker_worker_storage_read_ahead_bytes",
        "Object storage: bytes fetched ahead (or being fetched) and not yet used by the pipeline.", s.read_ahead_bytes);
  gauge("stoker_worker_storage_read_ahead_units", "Object storage: units with samples being read ahead (the depth).",
        s.read_ahead_units);
  gauge("stoker_worker_storage_read_ahead_queued",
        "Object storage: units waiting for read-ahead memory plus ranges waiting for a fetch thread.",
        s.read_ahead_queued);
  gauge("stoker_worker_storage_read_ahead_limit_bytes", "Object storage: the read-ahead memory cap (--read-ahead-bytes).",
        s.read_ahead_limit_bytes);
}

// Errors by reason: the quarantine vocabulary, plus frames and credits refused from clients. Common reasons
// pre-created.
void CollectErrors(const WorkerStats& s, MetricFamilies& out) {
  std::map<std::string, uint64_t> errors = s.quarantine_reasons;
  for (const char* reason : {"read_error", "decode_error", "decode_limit", "truncated"}) errors.try_emplace(reason, 0);
  errors["bad_frame"] = s.bad_frames;
  errors["credit_malformed"] = s.credits_malformed;
  errors["credit_failed_job"] = s.credits_failed_job;
  errors["credit_busy"] = s.credits_busy;
  for (const auto& [reason, n] : s.seal_refusals) errors[reason] = n;
  FamilyBuilder family("stoker_worker_errors_total",
                       "Errors by reason (quarantined samples, bad frames, refused credits, seal refusals).",
                       MetricType::Counter);
  for (const auto& [reason, n] : errors) family.Add({{"reason", reason}}, static_cast<double>(n));
  out.push_back(family.Build());
}

void CollectGpuDecode(const WorkerStats& s, MetricFamilies& out) {
  FamilyBuilder cut("stoker_worker_gpu_decode_samples_total",
                    "Samples of jobs that decode on the client's GPU, by how they were sent: as their JPEG file, as "
                    "a JPEG cut to the crop, or as pixels made here (another format, CMYK, larger than the pixels).",
                    MetricType::Counter);
  cut.Add({{"sent_as", "file"}}, static_cast<double>(s.gpu_sent_file));
  cut.Add({{"sent_as", "cut"}}, static_cast<double>(s.gpu_sent_cut));
  cut.Add({{"sent_as", "pixels"}}, static_cast<double>(s.gpu_sent_pixels));
  out.push_back(cut.Build());
}

}  // namespace

Collector WorkerCollector(const Worker& worker) {
  const auto started = std::chrono::steady_clock::now();
  return [&worker, started](MetricFamilies& out) {
    const WorkerStats s = worker.Stats();
    const double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    auto counter = [&](const char* name, const char* help, double value) {
      out.push_back(FamilyBuilder(name, help, MetricType::Counter).Add({}, value).Build());
    };
    auto gauge = [&](const char* name, const char* help, double value) {
      out.push_back(FamilyBuilder(name, help, MetricType::Gauge).Add({}, value).Build());
    };
    counter("stoker_worker_samples_total", "Samples read, decoded and augmented (quarantined ones included).",
            static_cast<double>(s.samples));
    counter("stoker_worker_batches_total", "Batches sent to clients.", static_cast<double>(s.batches_sent));
    counter("stoker_worker_read_bytes_total", "Encoded bytes read from the dataset.", static_cast<double>(s.bytes_read));
    counter("stoker_worker_sent_bytes_total",
            "Payload bytes sent to clients: pixels, and cut JPEGs for jobs that decode on the GPU (per image: divide "
            "by stoker_worker_samples_total).",
            static_cast<double>(s.bytes_sent));
    CollectGpuDecode(s, out);
    counter("stoker_worker_busy_seconds_total", "Pipeline-thread seconds spent making samples.", s.busy_seconds);
    counter("stoker_worker_backpressure_seconds_total",
            "Pipeline-thread seconds idle while serving clients that take batches slower than this worker makes "
            "them: more workers than the GPUs need.",
            s.backpressure_seconds);
    counter("stoker_worker_thread_seconds_total",
            "Pipeline-thread seconds available (threads x seconds up): the denominator of the busy and "
            "backpressure ratios, immune to rate()'s young-series bias.",
            s.threads * uptime);
    gauge("stoker_worker_threads", "Pipeline threads.", s.threads);
    gauge("stoker_worker_leases", "Units leased to this worker and not finished.", static_cast<double>(s.leases_held));
    gauge("stoker_worker_streams", "Client streams (job, rank, client) this worker holds credit from.",
          static_cast<double>(s.streams));
    gauge("stoker_worker_draining", "1 once SIGTERM started a drain.", s.draining ? 1 : 0);
    counter("stoker_worker_quarantined_samples_total", "Samples that could not be read or decoded.",
            static_cast<double>(s.quarantined));
    counter("stoker_worker_quarantined_remembered_total",
            "Quarantined samples known from an earlier epoch (decode_limit, unsupported_format): neither read nor "
            "decoded again.",
            static_cast<double>(s.quarantined_remembered));

    CollectErrors(s, out);

    FamilyBuilder units("stoker_worker_units_total", "Units this worker finished with, by outcome.",
                        MetricType::Counter);
    units.Add({{"outcome", "sent"}}, static_cast<double>(s.units_done))
        .Add({{"outcome", "revoked"}}, static_cast<double>(s.units_revoked))
        .Add({{"outcome", "fenced"}}, static_cast<double>(s.units_fenced))
        .Add({{"outcome", "abandoned"}}, static_cast<double>(s.units_abandoned))
        .Add({{"outcome", "undeliverable"}}, static_cast<double>(s.units_undeliverable));
    out.push_back(units.Build());

    CollectTransportErrors("worker", s.transport_errors, {}, out);
    if (s.handshakes_admitted > 0 || !s.handshakes_refused.empty()) {
      FamilyBuilder handshakes("stoker_worker_handshakes_total",
                               "Data port handshakes (data tickets): admitted clients, or refused by reason.",
                               MetricType::Counter);
      handshakes.Add({{"result", "admitted"}, {"reason", ""}}, static_cast<double>(s.handshakes_admitted));
      for (const auto& [reason, n] : s.handshakes_refused) {
        handshakes.Add({{"result", "refused"}, {"reason", reason}}, static_cast<double>(n));
      }
      out.push_back(handshakes.Build());
    }

    storage::CollectStorageStats("worker", worker.storage_stats(), out);
    CollectReadAhead(s, out);

    FamilyBuilder stages("stoker_worker_stage_seconds",
                         "Per batch: thread seconds its samples spent reading, decoding and augmenting; seconds "
                         "building its header (collate); seconds until ZeroMQ had written it out (send).",
                         MetricType::Histogram);
    for (const auto& [stage, histogram] : worker.histograms().stage_seconds) stages.Add({{"stage", stage}}, *histogram);
    out.push_back(stages.Build());
  };
}

}  // namespace stoker::worker
