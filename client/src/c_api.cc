// The C ABI over stoker::Loader (stoker/c_api.h). The one place where C++ exceptions become status codes: each
// entry point runs its body through Guard().
#include "stoker/c_api.h"

#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dataset/checkpoint.h"
#include "base/flags.h"
#include "base/json_writer.h"
#include "client/src/client_flags.h"
#include "stoker/loader.h"

struct stoker_loader {
  std::unique_ptr<stoker::Loader> loader;
  uint32_t rank = 0;  // the Loader does not say which rank it claimed; job_json does
};

struct stoker_batch {
  stoker::LoadedBatch batch;
};

namespace {

thread_local std::string last_error;

int Fail(const stoker::Status& status) {
  last_error = status.ToString();
  return static_cast<int>(status.code());
}

template <typename Body>
int Guard(Body body) {
  try {
    stoker::Status status = body();
    if (!status.ok()) return Fail(status);
    last_error.clear();
    return 0;
  } catch (const std::exception& e) {
    return Fail(stoker::InternalError(std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return Fail(stoker::InternalError("unexpected exception"));
  }
}

// stoker_batch_info as API version 1 defined it: callers built against v1 keep working when later versions append
// fields (the library fills what the caller's struct has room for).
constexpr size_t kBatchInfoV1Size = offsetof(stoker_batch_info, host_pixels) + sizeof(const uint8_t*);
static_assert(kBatchInfoV1Size == sizeof(stoker_batch_info), "v1 is the whole struct until v2 appends fields");

int CopyOut(const std::string& text, char* buf, size_t capacity, size_t* needed) {
  if (needed != nullptr) *needed = text.size() + 1;
  if (buf == nullptr || capacity < text.size() + 1) {
    return Fail(stoker::ResourceExhaustedError("buffer of " + std::to_string(capacity) + " bytes, " +
                                               std::to_string(text.size() + 1) + " needed"));
  }
  std::memcpy(buf, text.c_str(), text.size() + 1);
  return 0;
}

// An entry point that returns text: body's string, or its error, through Guard; then copied out as CopyOut says.
template <typename Body>
int GuardText(char* buf, size_t capacity, size_t* needed, Body body) {
  std::string text;
  int code = Guard([&]() -> stoker::Status {
    STOKER_ASSIGN_OR_RETURN(text, body());
    return stoker::Status::Ok();
  });
  return code != 0 ? code : CopyOut(text, buf, capacity, needed);
}

// The same flags stoker_loader_open and stoker_loader_validate take, parsed and checked.
stoker::StatusOr<stoker::LoaderOptions> ParseLoaderFlags(int argc, const char* const* argv) {
  // FlagSet reads argv from index 1 and never writes to it.
  std::vector<char*> args{const_cast<char*>("stoker_loader_open")};
  for (int i = 0; i < argc; ++i) args.push_back(const_cast<char*>(argv[i]));
  // The twins are STOKER_LOADER_<FLAG>: the library must not pick up the CLI's STOKER_<FLAG> settings by surprise.
  stoker::FlagSet flags("stoker_loader_open(flags)", "Opens a stoker Loader.", "STOKER_LOADER_");
  stoker::client::LoaderFlags loader_flags(flags);
  stoker::Status parsed = flags.Parse(static_cast<int>(args.size()), args.data());
  if (parsed.code() == stoker::StatusCode::kCancelled) return stoker::InvalidArgumentError(flags.Usage());
  STOKER_RETURN_IF_ERROR(parsed);
  return loader_flags.Finish();
}

std::string Hex16(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016" PRIx64, v);
  return text;
}

stoker::StatusOr<stoker::CheckpointToken> DecodeToken(const char* token) {
  if (token == nullptr) return stoker::InvalidArgumentError("token is NULL");
  return stoker::DecodeCheckpointToken(token);
}

}  // namespace

extern "C" {

int stoker_c_api_version(void) { return STOKER_C_API_VERSION; }
const char* stoker_last_error(void) { return last_error.c_str(); }

int stoker_loader_open(int argc, const char* const* argv, stoker_loader** out) {
  return Guard([&]() -> stoker::Status {
    if (out == nullptr) return stoker::InvalidArgumentError("out is NULL");
    *out = nullptr;
    STOKER_ASSIGN_OR_RETURN(stoker::LoaderOptions options, ParseLoaderFlags(argc, argv));
    STOKER_ASSIGN_OR_RETURN(std::unique_ptr<stoker::Loader> loader, stoker::Loader::Open(options));
    *out = new stoker_loader{std::move(loader), options.client.rank};
    return stoker::Status::Ok();
  });
}

int stoker_loader_describe(int argc, const char* const* argv, char* buf, size_t capacity, size_t* needed) {
  return GuardText(buf, capacity, needed, [&]() -> stoker::StatusOr<std::string> {
    STOKER_ASSIGN_OR_RETURN(stoker::LoaderOptions options, ParseLoaderFlags(argc, argv));
    STOKER_ASSIGN_OR_RETURN(stoker::Client::Description d, stoker::Client::Describe(options.client));
    stoker::JsonWriter j;
    j.BeginObject();
    j.Key("job").Value(d.spec.name).Key("ranks").Value(d.spec.world_size).Key("batch_size").Value(d.spec.batch_size);
    j.Key("epochs").Value(d.spec.epochs).Key("steps_per_epoch").Value(d.steps_per_epoch);
    j.Key("samples_per_epoch").Value(d.samples_per_epoch);
    j.EndObject();
    return j.str();
  });
}

int stoker_loader_validate(int argc, const char* const* argv) {
  return Guard([&]() -> stoker::Status { return ParseLoaderFlags(argc, argv).status(); });
}

int stoker_loader_next(stoker_loader* loader, void* stream, int64_t timeout_ms, int* kind, uint32_t* epoch,
                       stoker_batch** batch) {
  return Guard([&]() -> stoker::Status {
    if (loader == nullptr || kind == nullptr || batch == nullptr) {
      return stoker::InvalidArgumentError("loader, kind and batch must not be NULL");
    }
    *batch = nullptr;
    auto timeout = timeout_ms < 0 ? std::chrono::milliseconds::max() : std::chrono::milliseconds(timeout_ms);
    STOKER_ASSIGN_OR_RETURN(stoker::LoaderDelivery d, loader->loader->Next(stream, timeout));
    switch (d.kind) {
      case stoker::LoaderDelivery::Kind::kBatch: *kind = STOKER_BATCH; break;
      case stoker::LoaderDelivery::Kind::kEndOfEpoch: *kind = STOKER_END_OF_EPOCH; break;
      case stoker::LoaderDelivery::Kind::kEndOfJob: *kind = STOKER_END_OF_JOB; break;
      case stoker::LoaderDelivery::Kind::kStopped: *kind = STOKER_STOPPED; break;
    }
    if (epoch != nullptr) *epoch = d.epoch;
    if (d.kind == stoker::LoaderDelivery::Kind::kBatch) *batch = new stoker_batch{std::move(d.batch)};
    return stoker::Status::Ok();
  });
}

int stoker_batch_get_info(const stoker_batch* batch, stoker_batch_info* info) {
  return Guard([&]() -> stoker::Status {
    if (batch == nullptr || info == nullptr) return stoker::InvalidArgumentError("batch and info must not be NULL");
    if (info->struct_size < kBatchInfoV1Size) {
      return stoker::InvalidArgumentError("stoker_batch_info.struct_size is " + std::to_string(info->struct_size) +
                                          ": set it to sizeof(stoker_batch_info), at least " +
                                          std::to_string(kBatchInfoV1Size));
    }
    const size_t room = std::min<size_t>(info->struct_size, sizeof(stoker_batch_info));
    const stoker::LoadedBatch& b = batch->batch;
    const stoker::BatchView& v = b.view();
    stoker_batch_info full{};  // filled whole, then copied as far as the caller's struct reaches
    full.struct_size = static_cast<uint32_t>(room);
    full.epoch = b.epoch();
    full.index = b.index();
    full.position = b.position();
    full.count = b.size();
    full.device = v.device;
    full.dtype = static_cast<int32_t>(v.dtype);
    full.layout = v.layout == stoker::Layout::kNCHW ? STOKER_NCHW : STOKER_NHWC;
    full.data = v.data;
    for (int i = 0; i < 4; ++i) {
      full.shape[i] = v.shape[i];
      full.strides[i] = v.strides[i];
    }
    full.labels = v.labels;
    full.sample_ids = v.sample_ids;
    full.host_labels = b.labels().data();
    full.host_sample_ids = b.sample_ids().data();
    full.host_flags = b.flags().data();
    full.host_pixels = b.host_pixels();
    std::memcpy(info, &full, room);
    return stoker::Status::Ok();
  });
}

void stoker_batch_release(stoker_batch* batch) {
  try {
    delete batch;  // LoadedBatch's destructor releases
  } catch (...) {
  }
}

int stoker_loader_checkpoint(stoker_loader* loader, char* buf, size_t capacity, size_t* needed) {
  return GuardText(buf, capacity, needed, [&]() -> stoker::StatusOr<std::string> {
    if (loader == nullptr) return stoker::InvalidArgumentError("loader is NULL");
    return loader->loader->Checkpoint();
  });
}

int stoker_loader_stats_json(stoker_loader* loader, char* buf, size_t capacity, size_t* needed) {
  return GuardText(buf, capacity, needed, [&]() -> stoker::StatusOr<std::string> {
    if (loader == nullptr) return stoker::InvalidArgumentError("loader is NULL");
    const stoker::LoaderStats s = loader->loader->Stats();
    stoker::JsonWriter j;
    j.BeginObject();
    j.Key("device").Value(int64_t{s.device}).Key("depth").Value(uint64_t{s.depth});
    j.Key("pinned_bytes").Value(s.pinned_bytes).Key("device_bytes").Value(s.device_bytes);
    j.Key("slot_bytes").Value(s.slot_bytes).Key("batches").Value(s.batches);
    j.Key("wait_seconds").Value(s.wait_seconds);
    j.Key("agreement_seconds").Value(s.agreement_seconds).Key("agreements").Value(s.agreements);
    j.Key("broadcast_bytes").Value(s.broadcast_bytes);
    j.Key("input_wait_seconds").Value(s.client.wait_seconds);
    j.Key("input_stall_seconds").Value(s.client.stall_seconds);
    j.Key("startup_seconds").Value(s.client.startup_seconds);
    j.Key("step_seconds").Value(s.client.step_seconds);
    j.Key("receive_seconds").Value(s.client.receive_seconds).Key("h2d_seconds").Value(s.client.h2d_seconds);
    j.Key("samples_delivered").Value(s.client.samples_delivered);
    j.Key("samples_quarantined").Value(s.client.samples_quarantined);
    j.Key("quarantined_by_reason").BeginObject();
    for (const auto& [reason, n] : s.client.quarantined_by_reason) j.Key(reason).Value(n);
    j.EndObject();
    j.Key("batches_received").Value(s.client.batches_received);
    j.Key("batches_opened_into_pinned").Value(s.client.batches_opened_into_pinned);
    j.Key("dropped_duplicate").Value(s.client.dropped_duplicate);
    j.Key("dropped_stale_attempt").Value(s.client.dropped_stale_attempt);
    j.Key("dropped_bad_frame").Value(s.client.dropped_bad_frame);
    j.Key("connected_workers").Value(uint64_t{s.client.connected_workers});
    j.Key("metrics_address").Value(s.client.metrics_address);
    j.EndObject();
    return j.str();
  });
}

uint64_t stoker_loader_steps_per_epoch(const stoker_loader* loader) {
  return loader == nullptr ? 0 : loader->loader->steps_per_epoch();
}

int stoker_loader_job_json(stoker_loader* loader, char* buf, size_t capacity, size_t* needed) {
  return GuardText(buf, capacity, needed, [&]() -> stoker::StatusOr<std::string> {
    if (loader == nullptr) return stoker::InvalidArgumentError("loader is NULL");
    const stoker::JobSpec& spec = loader->loader->spec();
    stoker::JsonWriter j;
    j.BeginObject();
    j.Key("job").Value(spec.name).Key("rank").Value(loader->rank).Key("ranks").Value(spec.world_size);
    j.Key("batch_size").Value(spec.batch_size).Key("epochs").Value(spec.epochs).Key("seed").Value(spec.seed);
    j.Key("remainder").Value(stoker::RemainderName(spec.remainder));
    j.Key("steps_per_epoch").Value(loader->loader->steps_per_epoch());
    j.Key("origin_epoch").Value(spec.origin_epoch).Key("origin_offset").Value(spec.origin_offset);
    j.Key("spec_fingerprint").Value(Hex16(stoker::SpecFingerprint(spec)));
    j.EndObject();
    return j.str();
  });
}

int stoker_checkpoint_decode(const char* token, char* buf, size_t capacity, size_t* needed) {
  return GuardText(buf, capacity, needed, [&]() -> stoker::StatusOr<std::string> {
    STOKER_ASSIGN_OR_RETURN(stoker::CheckpointToken t, DecodeToken(token));
    stoker::JsonWriter j;
    j.BeginObject();
    j.Key("version").Value(t.version).Key("job").Value(t.job).Key("rank").Value(t.rank);
    j.Key("position").Value(t.position);
    if (t.version == 1) {
      j.Key("spec_fingerprint").Value(Hex16(t.spec_fingerprint));
    } else {
      j.Key("epoch").Value(t.point.epoch).Key("offset").Value(t.point.offset);
      j.Key("ranks").Value(t.ranks).Key("batch_size").Value(t.batch_size).Key("epochs").Value(t.epochs);
      j.Key("manifest_fingerprint").Value(Hex16(t.manifest_fingerprint)).Key("seed").Value(t.seed);
      j.Key("shuffle").Value(t.shuffle).Key("remainder").Value(stoker::RemainderName(t.remainder));
      j.Key("pipeline_fingerprint").Value(Hex16(t.pipeline_fingerprint));
    }
    j.EndObject();
    return j.str();
  });
}

int stoker_checkpoint_at(const char* token, uint32_t rank, uint64_t position, char* buf, size_t capacity,
                         size_t* needed) {
  return GuardText(buf, capacity, needed, [&]() -> stoker::StatusOr<std::string> {
    STOKER_ASSIGN_OR_RETURN(stoker::CheckpointToken t, DecodeToken(token));
    if (t.version != 1 && position != t.position) {
      return stoker::InvalidArgumentError("a version 2 token moves to another point with stoker_checkpoint_at_point");
    }
    t.rank = rank;
    t.position = position;
    return stoker::EncodeCheckpointToken(t);
  });
}

int stoker_checkpoint_at_point(const char* token, uint32_t rank, uint64_t position, uint32_t epoch, uint64_t offset,
                               char* buf, size_t capacity, size_t* needed) {
  return GuardText(buf, capacity, needed, [&]() -> stoker::StatusOr<std::string> {
    STOKER_ASSIGN_OR_RETURN(stoker::CheckpointToken t, DecodeToken(token));
    t.rank = rank;
    t.position = position;
    t.point = {epoch, offset};
    return stoker::EncodeCheckpointToken(t);
  });
}

void stoker_loader_request_stop(stoker_loader* loader) {
  if (loader != nullptr) loader->loader->RequestStop();
}

void stoker_loader_close(stoker_loader* loader) {
  try {
    delete loader;
  } catch (...) {
  }
}

int stoker_nccl_unique_id(char* buf, size_t capacity) {
  try {
    auto id = stoker::NcclUniqueIdHex();
    if (!id.ok()) return Fail(id.status());
    return CopyOut(*id, buf, capacity, nullptr);
  } catch (...) {
    return Fail(stoker::InternalError("unexpected exception"));
  }
}

}  // extern "C"
