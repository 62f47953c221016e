// The pipeline threads' work (batch_build.h): loading a job's context, and reading, decoding and augmenting one
// sample into its slot of a batch, or quarantining it with the reason.
#include "worker/batch_build.h"

#include <algorithm>
#include <cstring>

#include "dataset/checkpoint.h"
#include "wire/data_messages.h"
#include "worker/crop_geometry.h"
#include "base/sync.h"

namespace stoker::worker {
namespace {

int64_t Nanos(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

// Reads and decodes one sample into `out` (for a gpu_decode job, `cut` set: cuts it, or decodes what cannot be
// cut); on failure zeroes `out` and says why (for quarantine). A read storage could not serve marks the batch
// failed instead (its unit is handed back) and reports nothing.
std::optional<QuarantineReport> ReadAndDecode(BatchBuild& build, uint64_t sample_id, const SampleInfo& info,
                                              ThreadContext& context, uint8_t* out, BuildCounters& counters,
                                              std::chrono::steady_clock::time_point* read_done, CutSample* cut) {
  const JobContext& job = *build.job;
  const uint32_t epoch = build.epoch;
  if (std::optional<QuarantineReport> known = job.known_bad->Find(sample_id)) {
    std::memset(out, 0, job.spec.SampleBytes());
    counters.remembered.fetch_add(1, std::memory_order_relaxed);
    known->detail += " (found in an earlier epoch; not read or decoded again)";
    return known;
  }
  ReadFailure failure;
  bool read = job.reader->Read(sample_id, build.read_ahead.get(), &context.encoded, &failure);
  *read_done = std::chrono::steady_clock::now();
  std::string where(info.key);
  if (!read) {
    std::memset(out, 0, job.spec.SampleBytes());
    if (failure.hand_back) {
      build.FailStorage("sample " + std::to_string(sample_id) + " (" + where + "): " + failure.detail);
      return std::nullopt;
    }
    return QuarantineReport{sample_id, failure.reason, where + ": " + failure.detail};
  }
  counters.bytes_read.fetch_add(context.encoded.size(), std::memory_order_relaxed);
  ImagePipeline& pipeline = context.PipelineFor(job);
  const uint64_t seed = SampleSeed(job.spec.seed, epoch, sample_id);
  SampleOutcome outcome =
      cut != nullptr ? pipeline.RunCut(context.encoded, seed, out, cut) : pipeline.Run(context.encoded, seed, out);
  if (!outcome.ok) {
    QuarantineReport report{sample_id, outcome.reason, where + ": " + outcome.detail};
    job.known_bad->Remember(report);
    return report;
  }
  return std::nullopt;
}

}  // namespace

StatusOr<std::shared_ptr<const JobContext>> LoadJobContext(Env& env, const JobSpec& spec,
                                                           const std::string& manifest_root, size_t max_open_shards,
                                                           const std::string& worker_id, WorkerStorage* storage) {
  auto manifest = Manifest::Open(env, spec.manifest_path, manifest_root);
  if (!manifest.ok()) return manifest.status().WithContext("worker " + worker_id + " cannot open the job's manifest");
  if ((*manifest)->fingerprint() != spec.manifest_fingerprint) {
    return FailedPreconditionError("worker " + worker_id + ": manifest " + spec.manifest_path +
                                   " differs from the one job '" + spec.name + "' was created with");
  }
  STOKER_ASSIGN_OR_RETURN(Plan plan, Plan::Make(spec, (*manifest)->num_samples()));
  auto job = std::make_shared<JobContext>(JobContext{spec, SpecFingerprint(spec), plan, *manifest, nullptr});
  if ((*manifest)->remote()) {
    if (storage == nullptr) return FailedPreconditionError("worker " + worker_id + " cannot read object storage");
    job->reader = std::make_unique<RemoteSampleReader>(*storage->store, storage->fetcher->queue(), *manifest,
                                                       storage->reader);
  } else {
    job->reader = std::make_unique<SampleReader>(env, *manifest, max_open_shards);
  }
  return std::shared_ptr<const JobContext>(std::move(job));
}

void Compact(BatchBuild& build) {
  const uint64_t slot_bytes = build.job->spec.SampleBytes();
  uint64_t at = 0;
  for (size_t slot = 0; slot < build.crops.size(); ++slot) {
    const uint32_t bytes = build.crops[slot].bytes;
    if (at != slot * slot_bytes) std::memmove(build.buffer.data + at, build.buffer.data + slot * slot_bytes, bytes);
    at += bytes;
  }
  build.payload_bytes = at;
}

void BatchBuild::FailStorage(const std::string& detail) {
  MutexLock lock(failure_mu_);
  if (storage_failure_.empty()) storage_failure_ = detail;
}

std::string BatchBuild::storage_failure() const {
  MutexLock lock(failure_mu_);
  return storage_failure_;
}

void StartReadAhead(const std::vector<std::shared_ptr<BatchBuild>>& builds) {
  for (size_t first = 0; first < builds.size();) {
    size_t end = first + 1;
    while (end < builds.size() && builds[end]->unit == builds[first]->unit && builds[end]->job == builds[first]->job) {
      ++end;
    }
    std::vector<uint64_t> ids;
    for (size_t i = first; i < end; ++i) {
      for (const PlannedSample& s : builds[i]->samples) ids.push_back(s.sample_id);
    }
    std::shared_ptr<ReadAhead> ahead = builds[first]->job->reader->Prefetch(ids);
    for (size_t i = first; i < end; ++i) builds[i]->read_ahead = ahead;
    first = end;
  }
}

void BuildCounters::CountQuarantine(const std::string& reason) {
  MutexLock lock(reasons_mu_);
  ++reasons_[reason];
}

std::map<std::string, uint64_t> BuildCounters::QuarantineReasons() const {
  MutexLock lock(reasons_mu_);
  return reasons_;
}

ImagePipeline& ThreadContext::PipelineFor(const JobContext& job) {
  auto& p = pipelines[std::to_string(job.spec_fingerprint)];
  if (!p) p = std::make_unique<ImagePipeline>(job.spec.pipeline, limits);
  return *p;
}

void BuildSample(BatchBuild& build, uint32_t slot, ThreadContext& context, bool skip_decode,
                 BuildCounters& counters) {
  if (build.cancelled->load(std::memory_order_relaxed)) return;  // revoked: skip the work, not the accounting
  auto start = std::chrono::steady_clock::now();
  const JobContext& job = *build.job;
  const PlannedSample& planned = build.samples[slot];
  SampleInfo info = job.manifest->sample(planned.sample_id);
  uint8_t* out = build.buffer.data + slot * job.spec.SampleBytes();
  auto read_done = start;
  std::optional<QuarantineReport> problem;
  StageSeconds stages_before, stages_after;
  const bool gpu_decode = job.spec.pipeline.DecodesOnGpu();
  CutSample cut{.bytes = job.spec.SampleBytes()};
  if (skip_decode) {
    // Only the sample id is written: the point is to measure moving the bytes, not making them.
    std::memcpy(out, &planned.sample_id, std::min<size_t>(sizeof(planned.sample_id), job.spec.SampleBytes()));
  } else {
    stages_before = context.PipelineFor(job).stage_seconds();
    problem = ReadAndDecode(build, planned.sample_id, info, context, out, counters, &read_done,
                            gpu_decode ? &cut : nullptr);
    stages_after = context.PipelineFor(job).stage_seconds();
  }
  bool ok = !problem.has_value();
  if (gpu_decode) {
    build.crops[slot] = ok ? EncodedCrop{static_cast<uint32_t>(cut.bytes), cut.encoded, cut.flip, cut.x, cut.y,
                                         static_cast<uint32_t>(cut.width), static_cast<uint32_t>(cut.height)}
                           : EncodedCrop{};
    if (ok) {
      (!cut.encoded ? counters.sent_pixels : cut.whole ? counters.sent_file : counters.sent_cut)
          .fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (!ok) build.quarantine[slot] = std::move(*problem);
  build.labels[slot] = ok ? info.label : -1;
  build.flags[slot] = static_cast<uint8_t>((planned.padding ? kSampleFlagPadding : 0) |
                                           (ok ? 0 : kSampleFlagQuarantined));
  auto end = std::chrono::steady_clock::now();
  // Read: until the bytes are in memory. Augment: what the pipeline says it spent resizing and flipping. Decode:
  // the rest of the pipeline's time (header, crop geometry, the decode itself).
  const int64_t read_ns = Nanos(read_done - start);
  const int64_t augment_ns = static_cast<int64_t>((stages_after.augment - stages_before.augment) * 1e9);
  const int64_t decode_ns = std::max<int64_t>(0, Nanos(end - read_done) - augment_ns);
  build.read_ns.fetch_add(read_ns, std::memory_order_relaxed);
  build.decode_ns.fetch_add(decode_ns, std::memory_order_relaxed);
  build.augment_ns.fetch_add(augment_ns, std::memory_order_relaxed);
  counters.read_ns.fetch_add(read_ns, std::memory_order_relaxed);
  counters.decode_ns.fetch_add(decode_ns, std::memory_order_relaxed);
  counters.augment_ns.fetch_add(augment_ns, std::memory_order_relaxed);
  build.busy_ns.fetch_add(Nanos(end - start), std::memory_order_relaxed);
  counters.busy_ns.fetch_add(Nanos(end - start), std::memory_order_relaxed);
  counters.samples.fetch_add(1, std::memory_order_relaxed);
  if (!ok) {
    counters.quarantined.fetch_add(1, std::memory_order_relaxed);
    counters.CountQuarantine(build.quarantine[slot].reason);
  }
}

}  // namespace stoker::worker
