// The Client's public face: Connect (validate the options, claim the rank, start the core, the I/O thread and, on
// the GPU path, the staging thread), Next (batches in plan order from ClientCore), Batch (a handed-out batch that
// frees its slot when released), checkpoints. The shared state is ClientCore (client/src/client_core.h), the
// protocol's decisions ClientImpl's (client/src/client_impl.h), the sockets the I/O thread's
// (client/src/io_thread.h), metrics and /state are in client/src/client_metrics.cc.
#include "stoker/client.h"

#include <sys/eventfd.h>

#include <algorithm>
#include <functional>

#include "client/src/client_core.h"
#include "client/src/client_metrics.h"
#include "client/src/io_thread.h"
#include "client/src/received_batch.h"
#include "dataset/checkpoint.h"
#include "auth/keys.h"
#include "base/local_group.h"
#include "base/logging.h"
#include "client/src/local_manifest.h"
#include "client/src/local_servers.h"
#include "wire/frames.h"

namespace stoker {

using client::ClientCore;
using client::ReceivedBatch;

// ---- Batch -----------------------------------------------------------------------------------------------------

Batch::Batch() = default;
Batch::Batch(std::shared_ptr<ClientCore> core, std::unique_ptr<ReceivedBatch> data)
    : core_(std::move(core)), data_(std::move(data)) {}
Batch::Batch(Batch&&) noexcept = default;
Batch& Batch::operator=(Batch&& other) noexcept {
  if (this != &other) {
    Release();
    core_ = std::move(other.core_);
    data_ = std::move(other.data_);
  }
  return *this;
}
Batch::~Batch() { Release(); }

void Batch::Release() {
  if (data_ && core_) core_->Release(data_->global);
  data_.reset();
  core_.reset();
}

uint32_t Batch::epoch() const { return data_->epoch; }
uint64_t Batch::position() const { return data_->global; }
uint64_t Batch::index() const { return data_->index; }
uint32_t Batch::rank() const { return data_->rank; }
uint32_t Batch::size() const { return data_->count; }
uint32_t Batch::height() const { return data_->height; }
uint32_t Batch::width() const { return data_->width; }
uint32_t Batch::channels() const { return data_->channels; }
const uint8_t* Batch::pixels() const { return data_->pixels(); }
size_t Batch::pixel_bytes() const { return data_->pixel_bytes; }
std::span<const int64_t> Batch::labels() const { return data_->labels; }
std::span<const uint64_t> Batch::sample_ids() const { return data_->sample_ids; }
std::span<const uint8_t> Batch::flags() const { return data_->flags; }
std::span<const SampleCrop> Batch::crops() const { return data_->crops; }
std::string_view Batch::quarantine_reason(uint32_t i) const {
  if (!is_quarantined(i)) return {};
  if (data_->quarantine_reasons.empty()) return "unreported";
  // Reasons are listed in slot order for the quarantined samples only: i's is the one after those before it.
  const auto before = std::count_if(data_->flags.begin(), data_->flags.begin() + i,
                                    [](uint8_t f) { return (f & kSampleFlagQuarantined) != 0; });
  return data_->quarantine_reasons[static_cast<size_t>(before)];
}
uint64_t Batch::attempt() const { return data_->attempt; }
const std::string& Batch::worker_id() const { return data_->worker_id; }

// ---- Client ----------------------------------------------------------------------------------------------------

namespace {

Status CheckOptions(const ClientOptions& options) {
  if (options.job.empty()) return InvalidArgumentError("ClientOptions.job is empty");
  if (options.prefetch == 0) return InvalidArgumentError("ClientOptions.prefetch must be at least 1");
  if (options.credits_per_worker == 0) return InvalidArgumentError("ClientOptions.credits_per_worker must be >= 1");
  if (options.max_workers == 0) return InvalidArgumentError("ClientOptions.max_workers must be >= 1");
  if (options.payload_frame_bytes != 0 && options.payload_frame_bytes < kMinPayloadFrameBytes) {
    return InvalidArgumentError("ClientOptions.payload_frame_bytes must be 0 (one frame) or at least " +
                                std::to_string(kMinPayloadFrameBytes) + " bytes");
  }
  if (!options.local_dir.empty() && (options.coordinator == kLocalCoordinator || options.local_workers != 0)) {
    return InvalidArgumentError("ClientOptions.local_dir names node-local workers someone else started: not with "
                                "local mode or local_workers, which start their own");
  }
  if (!options.local_dir.empty() && options.local_dir.front() != '/') {
    return InvalidArgumentError("ClientOptions.local_dir must be an absolute path");
  }
  if (options.spec && options.spec->name != options.job) {
    return InvalidArgumentError("ClientOptions.job '" + options.job + "' differs from spec.name '" +
                                options.spec->name + "'");
  }
  return Status::Ok();
}

StatusOr<std::optional<ResumePoint>> ResumePointOf(const ClientOptions& options) {
  if (options.resume_token.empty()) {
    if (options.resume_live) return InvalidArgumentError("resume_live (a live shape change) needs a resume_token");
    return std::optional<ResumePoint>();
  }
  STOKER_ASSIGN_OR_RETURN(CheckpointToken token, DecodeCheckpointToken(options.resume_token));
  // A version 2 token says how much of the epoch the job had trained on, which is the same for every rank: any
  // rank's token resumes any rank. A version 1 token names its rank's own position.
  if (token.job != options.job || (token.version == 1 && token.rank != options.rank)) {
    return InvalidArgumentError("the checkpoint token is for job '" + token.job + "' rank " +
                                std::to_string(token.rank) + ", not job '" + options.job + "' rank " +
                                std::to_string(options.rank));
  }
  if (options.resume_live && token.version == 1) {
    return InvalidArgumentError("a live shape change needs a version 2 checkpoint token (this one is version 1)");
  }
  return std::optional<ResumePoint>(
      ResumePoint{token.position, token.spec_fingerprint, options.resume_token, options.resume_live});
}

StatusOr<Security> SecurityOf(const ClientOptions& options, bool local) {
  if (local) {  // sockets only this user can open (local_servers.h): nothing to load, nothing to warn of
    Security none;
    none.insecure = true;
    return none;
  }
  return LoadSecurity(Role::kClient, {.key_file = options.key_file,
                                      .trust_file = options.trust_file,
                                      .insecure = options.insecure,
                                      .allow_readable_key = options.allow_readable_key});
}

// Node-local workers beside a cluster's pool (ClientOptions::local_workers with a coordinator of its own): started
// in a private directory, local to this client; `options.local_dir` then names it.
StatusOr<std::unique_ptr<client::LocalServers>> StartNodeLocal(ClientOptions& options) {
  std::vector<std::string> security;  // this client's key sources, as its own environment would give them
  if (!options.key_file.empty()) security.push_back("STOKER_KEY_FILE=" + options.key_file);
  if (!options.trust_file.empty()) security.push_back("STOKER_TRUST_FILE=" + options.trust_file);
  if (options.insecure) security.push_back("STOKER_INSECURE=1");
  if (options.allow_readable_key) security.push_back("STOKER_ALLOW_READABLE_KEY=1");
  STOKER_ASSIGN_OR_RETURN(auto servers, client::LocalServers::Start({.workers = options.local_workers,
                                                                     .bin_dir = options.local_bin_dir,
                                                                     .coordinator = options.coordinator,
                                                                     .worker_env = std::move(security)}));
  options.local_dir = servers->dir();
  // As in local mode, two batches per local worker keep them busy; the pool's workers need their room besides.
  options.prefetch = std::min(options.prefetch + 2 * std::min(options.local_workers, 2046u),
                              std::max(options.prefetch, 4096u));  // the coordinator's largest window
  return servers;
}

// The group of the node-local workers in `options.local_dir`; empty without one.
StatusOr<std::string> LocalGroupOf(const ClientOptions& options) {
  if (options.local_dir.empty() || options.coordinator == kLocalCoordinator) return std::string();
  auto group = ReadOrMakeLocalGroup(options.local_dir);
  if (!group.ok()) return group.status().WithContext("ClientOptions.local_dir");
  return group;
}

// The shared state, with the doorbell its I/O thread waits on.
StatusOr<std::shared_ptr<ClientCore>> NewCore(const ClientOptions& options) {
  const int doorbell = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (doorbell < 0) return InternalError("eventfd failed");
  std::shared_ptr<const Clock> clock = options.clock ? options.clock : std::make_shared<RealClock>();
  return std::make_shared<ClientCore>(std::move(clock),
                                      options.client_id.empty() ? NewPeerId("c") : options.client_id, doorbell);
}

StatusOr<std::unique_ptr<client::IoThread>> NewIoThread(const ClientOptions& options, Security security,
                                                        std::shared_ptr<ClientCore> core,
                                                        std::string local_group = "") {
  try {  // the coordinator socket: out of descriptors (EMFILE) is an error for the caller, never std::terminate
    return std::make_unique<client::IoThread>(options, std::move(security), std::move(core), std::move(local_group));
  } catch (const zmq::error_t& e) {
    return ResourceExhaustedError(std::string("cannot open the coordinator socket: ") + e.what());
  }
}

// Local mode: this client's own servers (client/src/local_servers.h), its dataset indexed if it is not a manifest;
// `options` then point at them.
StatusOr<std::unique_ptr<client::LocalServers>> StartLocal(ClientOptions& options) {
  STOKER_ASSIGN_OR_RETURN(std::string bin_dir, client::FindServerBinaries(options.local_bin_dir));
  if (options.spec) {
    STOKER_ASSIGN_OR_RETURN(options.spec->manifest_path, client::LocalManifest(options.spec->manifest_path, bin_dir));
  }
  const uint32_t workers = options.local_workers > 0 ? options.local_workers : client::LocalWorkersAuto();
  STOKER_ASSIGN_OR_RETURN(auto servers, client::LocalServers::Start({.workers = workers, .bin_dir = bin_dir}));
  options.coordinator = servers->coordinator_endpoint();
  options.insecure = true;
  // A worker busy on one batch of this client's and holding the next keeps its core busy: the window must hold
  // about two batches per worker (bench/RESULTS.md, 12b), or workers idle however many there are.
  options.prefetch = std::max(options.prefetch, 2 * std::min(workers, 2046u) + 4);  // at most 4,096 (max_window)
  return servers;
}

using StagerFactory = std::function<StatusOr<std::shared_ptr<client::BatchStager>>(const JobSpec& spec)>;

// What the registration settled, for the core: the job as the coordinator described it (its plan), the window,
// where this session starts, the stager of the GPU path and the metrics' labels.
StatusOr<ClientCore::Session> SessionOf(const ClientOptions& options, const RegisterClientResponse& registered,
                                        const std::string& gpu_uuid, const StagerFactory& make_stager) {
  auto plan = Plan::Make(registered.spec, registered.samples_per_epoch);
  if (!plan.ok()) return plan.status().WithContext("the job the coordinator described is inconsistent");
  std::shared_ptr<client::BatchStager> stager;
  if (make_stager) {
    STOKER_ASSIGN_OR_RETURN(stager, make_stager(registered.spec));
    if (stager->depth() == 0 || stager->depth() > options.prefetch) {
      return InvalidArgumentError("the device depth (" + std::to_string(stager->depth()) +
                                  ") must be between 1 and the prefetch window (" + std::to_string(options.prefetch) +
                                  ")");
    }
  }
  MetricLabels labels = {{"pipeline", registered.spec.name},
                         {"rank", std::to_string(options.rank)},
                         {"gpu", options.gpu >= 0 ? std::to_string(options.gpu) : "none"},
                         {"gpu_uuid", gpu_uuid}};
  return ClientCore::Session{registered.spec, std::move(*plan), registered.steps_per_epoch, options.prefetch,
                             registered.start_batch, options.stall_probe, std::move(stager), std::move(labels)};
}

}  // namespace

StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) { return Connect(options, {}); }

// One way out: any failure returns, and once the rank is claimed, dropping the claim gives it back (before any I/O
// thread, staging thread or worker connection exists for it).
StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& asked, const StagerFactory& make_stager) {
  STOKER_RETURN_IF_ERROR(CheckOptions(asked));
  STOKER_ASSIGN_OR_RETURN(std::optional<ResumePoint> resume, ResumePointOf(asked));
  auto client = std::unique_ptr<Client>(new Client());
  ClientOptions options = asked;
  // The keys first: node-local workers are not started for a client whose own key is refused.
  STOKER_ASSIGN_OR_RETURN(Security security, SecurityOf(options, asked.coordinator == kLocalCoordinator));
  if (asked.coordinator == kLocalCoordinator) {
    STOKER_ASSIGN_OR_RETURN(client->local_, StartLocal(options));
  } else if (asked.local_workers > 0) {
    STOKER_ASSIGN_OR_RETURN(client->local_, StartNodeLocal(options));
  }
  STOKER_ASSIGN_OR_RETURN(std::string local_group, LocalGroupOf(options));
  const std::string gpu_uuid = client::GpuUuidForOrdinal(options.gpu);
  client->rank_ = options.rank;
  STOKER_ASSIGN_OR_RETURN(client->core_, NewCore(options));
  STOKER_ASSIGN_OR_RETURN(client->io_,
                          NewIoThread(options, std::move(security), client->core_, std::move(local_group)));
  STOKER_ASSIGN_OR_RETURN(client::RankClaim claim, client->io_->Register(resume));
  STOKER_ASSIGN_OR_RETURN(ClientCore::Session session,
                          SessionOf(options, claim.registered(), gpu_uuid, make_stager));
  const bool stages = session.stager != nullptr;
  client->core_->Start(std::move(session));
  if (stages) client->stage_thread_ = std::thread([core = client->core_] { core->StageLoop(); });
  client->io_->Start(std::move(claim));
  client->JoinMetrics(options, gpu_uuid);
  return client;
}

StatusOr<Client::Description> Client::Describe(const ClientOptions& options) {
  STOKER_RETURN_IF_ERROR(CheckOptions(options));
  if (options.coordinator == kLocalCoordinator) {
    return NotFoundError("a local-mode job exists only while a Client of it is connected");
  }
  STOKER_ASSIGN_OR_RETURN(Security security, SecurityOf(options, false));
  STOKER_ASSIGN_OR_RETURN(std::shared_ptr<ClientCore> core, NewCore(options));
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<client::IoThread> io, NewIoThread(options, std::move(security), core));
  STOKER_ASSIGN_OR_RETURN(RegisterClientResponse described, io->Describe());
  return Description{described.spec, described.steps_per_epoch, described.samples_per_epoch};
}

void Client::JoinMetrics(const ClientOptions& options, const std::string& gpu_uuid) {
  auto& process = client::ClientProcess::Get();
  metrics_member_ = process.Join(client::MemberFor(core_, options.gpu, gpu_uuid));
  std::string listen = options.metrics_listen;
  if (listen.empty()) {
    if (const char* env = std::getenv("STOKER_METRICS_LISTEN")) listen = env;
  }
  if (listen.empty()) return;
  auto served = process.Serve(listen);
  if (!served.ok()) {
    STOKER_LOG(kWarning) << "client metrics endpoint on " << listen << " not started: " << served.status().message()
                         << " (training goes on without it)";
    return;
  }
  core_->NoteMetricsAddress(*served);
}

Client::~Client() {
  if (metrics_member_ != 0) client::ClientProcess::Get().Leave(metrics_member_);
  io_.reset();  // joins the I/O thread, which withdraws credits and deregisters
  if (stage_thread_.joinable()) stage_thread_.join();  // the I/O thread's end set `closing`
  local_.reset();  // the session has ended: its local servers go
}

std::string Client::Checkpoint() const {
  return EncodeCheckpointToken(MakeCheckpointToken(core_->spec(), core_->plan(), rank_, core_->position()));
}

StatusOr<Delivery> Client::Next(std::chrono::milliseconds timeout) {
  STOKER_ASSIGN_OR_RETURN(ClientCore::Taken taken, core_->Next(timeout));
  Delivery d;
  d.kind = taken.kind;
  d.epoch = taken.epoch;
  if (taken.batch) d.batch = Batch(core_, std::move(taken.batch));
  return d;
}

Status Client::PutBack(Batch batch) {
  if (!batch.valid() || batch.core_ != core_) return InvalidArgumentError("not a batch of this client");
  STOKER_RETURN_IF_ERROR(core_->PutBack(batch.data_));
  batch.core_.reset();  // nothing to release: the slot is filled again
  return Status::Ok();
}

const JobSpec& Client::spec() const { return core_->spec(); }
uint64_t Client::steps_per_epoch() const { return core_->steps_per_epoch(); }
uint64_t Client::start_batch() const { return core_->start_batch(); }
const std::string& Client::client_id() const { return core_->client_id(); }
ClientStats Client::Stats() const { return core_->Stats(); }

}  // namespace stoker
