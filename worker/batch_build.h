// The pipeline threads' side of the worker: what a job needs on this worker (JobContext), one batch being built
// (BatchBuild), and the per-sample work that reads, decodes and augments one sample into its slot of the batch
// buffer (BuildSample). The worker's I/O thread creates BatchBuilds from leases and sends them when their last
// sample is done; everything here runs on the TaskPool's threads.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "wire/control_messages.h"
#include "wire/data_messages.h"
#include "base/env.h"
#include "dataset/manifest.h"
#include "dataset/plan.h"
#include "worker/batch_buffer.h"
#include "worker/image_pipeline.h"
#include "worker/known_bad.h"
#include "worker/read_ahead.h"
#include "worker/remote_reader.h"
#include "worker/sample_reader.h"
#include "base/sync.h"

namespace stoker::worker {

using UnitKey = std::tuple<std::string, uint32_t, uint64_t>;  // (job, rank, global unit)

// What a job needs on this worker: its spec, plan and where its samples are. Immutable once loaded and shared
// with the pipeline threads (the reader is thread-safe).
struct JobContext {
  JobSpec spec;
  uint64_t spec_fingerprint = 0;
  Plan plan;
  std::shared_ptr<const Manifest> manifest;
  std::unique_ptr<SampleSource> reader;  // files (SampleReader) or object storage (RemoteSampleReader)
  std::shared_ptr<KnownBadSamples> known_bad = std::make_shared<KnownBadSamples>();  // not decoded again
};

// Opens the job's manifest (checking it is the one the job was created with) and makes its plan. Slow for big
// manifests (a full pass over them): the worker runs it off its I/O thread. `storage` reads remote datasets.
StatusOr<std::shared_ptr<const JobContext>> LoadJobContext(Env& env, const JobSpec& spec,
                                                           const std::string& manifest_root, size_t max_open_shards,
                                                           const std::string& worker_id, WorkerStorage* storage);

// One batch being built by the pipeline threads, one task per sample.
struct BatchBuild {
  std::shared_ptr<const JobContext> job;
  std::shared_ptr<BatchBufferPool> pool;
  UnitKey unit;
  uint64_t attempt = 0;
  uint32_t epoch = 0;
  uint64_t index = 0;
  std::vector<PlannedSample> samples;
  std::vector<int64_t> labels;
  std::vector<uint8_t> flags;
  std::vector<QuarantineReport> quarantine;  // per slot; reason empty = fine (each slot written by one task)
  BatchBufferPool::Buffer buffer;
  // A gpu_decode job's samples as they leave (one per slot; empty for other jobs), and the payload's length:
  // the batch's bytes, or once Compact has run the crops' bytes one after another.
  std::vector<EncodedCrop> crops;
  uint64_t payload_bytes = 0;
  bool buffer_owned = true;                  // false once ZeroMQ has it (it returns it to the pool)
  std::shared_ptr<std::atomic<bool>> cancelled;
  std::atomic<uint32_t> remaining{0};
  // Thread time this batch's samples spent per stage (the worker's stage histograms, per batch; sealing it), and
  // in all (sealing included: what its unit's report tells the coordinator the batch cost).
  std::atomic<int64_t> read_ns{0}, decode_ns{0}, augment_ns{0}, seal_ns{0}, busy_ns{0};
  // The four stages in UnitDoneRequest::kStages' order.
  std::array<int64_t, 4> StageNanos() const {
    return {read_ns.load(std::memory_order_relaxed), decode_ns.load(std::memory_order_relaxed),
            augment_ns.load(std::memory_order_relaxed), seal_ns.load(std::memory_order_relaxed)};
  }
  std::shared_ptr<ReadAhead> read_ahead;  // the unit's samples fetched ahead (object storage), shared by its batches
  // How it goes on the wire (worker/batch_sender.h): set by Prepare on the I/O thread, and by Seal on a pipeline
  // thread for a sealed connection, before Send reads them.
  std::string wire_header;                     // the encoded header (a sealed batch's associated data)
  uint64_t frame_bytes = 0;                    // payload bytes per frame (the last may be shorter)
  uint32_t frames = 0;                         // payload frames
  std::vector<uint8_t> seal_trailer;           // a sealed batch's trailer (auth/seal.h); empty: not sealed
  std::shared_ptr<const void> sealed_with;     // the SealSession it was sealed with

  // A read storage could not serve (not the sample's fault): the batch is not sent and its unit is handed back.
  void FailStorage(const std::string& detail);
  std::string storage_failure() const;

  ~BatchBuild() {
    if (buffer_owned && buffer.data != nullptr) pool->Release(buffer);
  }

 private:
  mutable Mutex failure_mu_;
  std::string storage_failure_ STOKER_GUARDED_BY(failure_mu_);
};

// A gpu_decode batch, once its last sample is done: moves each slot's bytes down to follow the previous slot's, so
// the payload is the samples' bytes one after another, and sets payload_bytes to their sum.
void Compact(BatchBuild& build);

// Starts reading ahead the samples of each unit among `builds` (consecutive builds of one unit share one read-ahead).
void StartReadAhead(const std::vector<std::shared_ptr<BatchBuild>>& builds);

// Per pipeline thread: its decoders and scratch, built lazily per job.
struct ThreadContext {
  JpegLimits limits;  // what one image may cost (the worker's flags)
  std::map<std::string, std::unique_ptr<ImagePipeline>> pipelines;
  std::vector<uint8_t> encoded;
  ImagePipeline& PipelineFor(const JobContext& job);
};

// Thread-safe counters of the work done (the worker's stats and metrics read them).
struct BuildCounters {
  std::atomic<uint64_t> samples{0}, quarantined{0}, bytes_read{0};
  std::atomic<uint64_t> sent_file{0}, sent_cut{0}, sent_pixels{0};  // gpu_decode samples, by how they were sent
  std::atomic<uint64_t> remembered{0};  // quarantined from KnownBadSamples, without reading or decoding
  std::atomic<int64_t> busy_ns{0}, read_ns{0}, decode_ns{0}, augment_ns{0};
  std::atomic<int> active{0};  // pipeline threads working on a sample right now

  void CountQuarantine(const std::string& reason);
  std::map<std::string, uint64_t> QuarantineReasons() const;

 private:
  mutable Mutex reasons_mu_;
  std::map<std::string, uint64_t> reasons_ STOKER_GUARDED_BY(reasons_mu_);
};

// Fills slot `slot` of `build`: reads the sample, decodes and augments it into the batch buffer, or quarantines
// it (zero pixels, label -1, flagged, reported). With skip_decode only the sample id is written (diagnostics).
void BuildSample(BatchBuild& build, uint32_t slot, ThreadContext& context, bool skip_decode, BuildCounters& counters);

}  // namespace stoker::worker
