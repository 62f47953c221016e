// Journal (journal.h): the append-only file of state updates — framing, group-commit sync, replay, compaction.
#include "coordinator/journal.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>

#include "common/hash.h"
#include "common/logging.h"
#include "common/wire.h"
#include "stoker/schema/journal.capnp.h"
#include "common/sync.h"

namespace stoker::coordinator {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'K', 'J', 'R', 'N', '0', '1'};
constexpr size_t kHeader = 16;                    // length u32, reserved u32, xxh64 u64
constexpr uint32_t kMaxRecord = 16u << 20;        // no honest record is larger

void PutU32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void PutU64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

}  // namespace

std::string EncodeJournalRecord(const Update& update) {
  capnp::MallocMessageBuilder message(kControlFirstSegmentWords);
  auto r = message.initRoot<wire::JournalRecord>();
  std::visit(
      [&r](const auto& u) {
        using T = std::decay_t<decltype(u)>;
        if constexpr (std::is_same_v<T, JobCreated>) {
          auto m = r.initJobCreated();
          ToWire(u.spec, m.initSpec());
          m.setNumSamples(u.num_samples);
        } else if constexpr (std::is_same_v<T, RankSessionStarted>) {
          auto m = r.initRankSession();
          m.setJob(u.job);
          m.setRank(u.rank);
          m.setClientId(u.client_id);
          m.setStartBatch(u.start_batch);
          m.setWindow(u.window);
          m.setHolder(u.holder);
        } else if constexpr (std::is_same_v<T, RankProgress>) {
          auto m = r.initRankProgress();
          m.setJob(u.job);
          m.setRank(u.rank);
          m.setReceived(u.received);
          m.setConsumed(u.consumed);
        } else if constexpr (std::is_same_v<T, AttemptsReserved>) {
          auto m = r.initAttemptsReserved();
          m.setJob(u.job);
          m.setRank(u.rank);
          m.setUpTo(u.up_to);
        } else if constexpr (std::is_same_v<T, WorkerJoined>) {
          auto m = r.initWorkerJoined();
          m.setWorkerId(u.worker_id);
          m.setDataEndpoint(u.data_endpoint);
          m.setThreads(u.threads);
          m.setDataPublicKey(u.data_public_key);
          m.setIdentity(u.identity);
        } else if constexpr (std::is_same_v<T, WorkerLeft>) {
          r.setWorkerLeft(u.worker_id);
        } else if constexpr (std::is_same_v<T, JobRemoved>) {
          r.setJobRemoved(u.job);
        }
      },
      update);
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  std::string payload(reinterpret_cast<const char*>(words.begin()), words.size() * sizeof(capnp::word));
  std::string record;
  PutU32(record, static_cast<uint32_t>(payload.size()));
  PutU32(record, 0);
  PutU64(record, Xxh64(payload.data(), payload.size()));
  record += payload;
  return record;
}

StatusOr<Update> DecodeJournalRecord(const void* data, size_t size) {
  if (size % sizeof(capnp::word) != 0) return DataLossError("journal record is not a whole number of words");
  std::vector<capnp::word> words(size / sizeof(capnp::word));
  std::memcpy(words.data(), data, size);
  Update out;
  Status s = CatchWireErrors("journal record", [&]() -> Status {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = words.size() * 4 + 64;
    capnp::FlatArrayMessageReader reader(kj::ArrayPtr<const capnp::word>(words.data(), words.size()), options);
    auto r = reader.getRoot<wire::JournalRecord>();
    switch (r.which()) {
      case wire::JournalRecord::JOB_CREATED: {
        auto spec = FromWire(r.getJobCreated().getSpec());
        if (!spec.ok()) return spec.status();
        out = JobCreated{*spec, r.getJobCreated().getNumSamples()};
        break;
      }
      case wire::JournalRecord::RANK_SESSION: {
        auto m = r.getRankSession();
        out = RankSessionStarted{m.getJob().cStr(), m.getRank(), m.getClientId().cStr(), m.getStartBatch(),
                                 m.getWindow(), m.getHolder().cStr()};
        break;
      }
      case wire::JournalRecord::RANK_PROGRESS: {
        auto m = r.getRankProgress();
        out = RankProgress{m.getJob().cStr(), m.getRank(), m.getReceived(), m.getConsumed()};
        break;
      }
      case wire::JournalRecord::ATTEMPTS_RESERVED: {
        auto m = r.getAttemptsReserved();
        out = AttemptsReserved{m.getJob().cStr(), m.getRank(), m.getUpTo()};
        break;
      }
      case wire::JournalRecord::WORKER_JOINED: {
        auto m = r.getWorkerJoined();
        out = WorkerJoined{m.getWorkerId().cStr(), m.getDataEndpoint().cStr(), m.getThreads(),
                           m.getDataPublicKey().cStr(), m.getIdentity().cStr()};
        break;
      }
      case wire::JournalRecord::WORKER_LEFT:
        out = WorkerLeft{r.getWorkerLeft().cStr()};
        break;
      case wire::JournalRecord::JOB_REMOVED:
        out = JobRemoved{r.getJobRemoved().cStr()};
        break;
      default:
        return DataLossError("journal record of an unknown kind (written by a newer stoker?)");
    }
    return Status::Ok();
  });
  if (!s.ok()) return Status(StatusCode::kDataLoss, s.message());
  return out;
}

Journal::Journal(Env& env, std::string path, const JournalOptions& options, std::unique_ptr<WritableFile> file)
    : env_(env), path_(std::move(path)), options_(options), file_(std::move(file)) {}

StatusOr<std::unique_ptr<Journal>> Journal::Open(Env& env, const std::string& path, const JournalOptions& options,
                                                 const std::function<void(const Update&)>& apply,
                                                 JournalReplay* replay) {
  *replay = JournalReplay{};
  STOKER_ASSIGN_OR_RETURN(FileInfo info, env.Stat(path));
  if (info.exists && info.size > 0) {
    STOKER_ASSIGN_OR_RETURN(auto file, env.OpenForRead(path));
    const uint64_t size = file->Size();
    char magic[sizeof(kMagic)];
    STOKER_ASSIGN_OR_RETURN(size_t got, file->Read(0, sizeof(magic), magic));
    if (got < sizeof(magic)) {
      // Crashed while writing the header of a new journal: nothing was ever recorded in it.
      replay->torn_bytes = size;
      STOKER_RETURN_IF_ERROR(env.Truncate(path, 0));
    } else if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
      return DataLossError(path + " is not a stoker journal (bad magic); refusing to start on it");
    } else {
      uint64_t offset = sizeof(kMagic);
      std::vector<char> payload;
      while (offset < size) {
        unsigned char header[kHeader];
        STOKER_ASSIGN_OR_RETURN(size_t n, file->Read(offset, kHeader, header));
        uint32_t length;
        uint64_t checksum;
        std::memcpy(&length, header, 4);
        std::memcpy(&checksum, header + 8, 8);
        bool whole = n == kHeader && length <= kMaxRecord && offset + kHeader + length <= size;
        if (!whole) {
          // The last append was cut short by a crash: keep everything before it.
          replay->torn_bytes = size - offset;
          break;
        }
        payload.resize(length);
        STOKER_ASSIGN_OR_RETURN(size_t p, file->Read(offset + kHeader, length, payload.data()));
        if (p != length || Xxh64(payload.data(), length) != checksum) {
          if (offset + kHeader + length == size) {  // the very last record: a torn write that reached the end
            replay->torn_bytes = size - offset;
            break;
          }
          return DataLossError("journal " + path + " is corrupt at byte " + std::to_string(offset) + " (record " +
                               std::to_string(replay->records + 1) + "): checksum mismatch with " +
                               std::to_string(size - offset - kHeader - length) +
                               " more bytes after it. The coordinator will not guess what it lost: restore the "
                               "journal from a backup, or move it aside to start without any job progress");
        }
        auto update = DecodeJournalRecord(payload.data(), length);
        if (!update.ok()) {
          return DataLossError("journal " + path + " record " + std::to_string(replay->records + 1) + " at byte " +
                               std::to_string(offset) + " does not decode: " + update.status().message());
        }
        apply(*update);
        ++replay->records;
        offset += kHeader + length;
      }
      replay->bytes = offset;
      if (replay->torn_bytes > 0) {
        STOKER_LOG(kWarning) << "journal " << path << ": dropped a torn tail of " << replay->torn_bytes
                             << " bytes after " << replay->records << " records";
        STOKER_RETURN_IF_ERROR(env.Truncate(path, offset));
      }
    }
  }
  STOKER_ASSIGN_OR_RETURN(auto writable, env.OpenForAppend(path));
  if (writable->Size() == 0) {
    STOKER_RETURN_IF_ERROR(writable->Append(kMagic, sizeof(kMagic)));
    STOKER_RETURN_IF_ERROR(writable->Sync());
  }
  return std::unique_ptr<Journal>(new Journal(env, path, options, std::move(writable)));
}

void Journal::Append(const Update& update) {
  MutexLock lock(mu_);
  if (const auto* p = std::get_if<RankProgress>(&update)) {
    auto key = std::make_pair(p->job, p->rank);
    auto it = progress_index_.find(key);
    if (it != progress_index_.end()) {  // a later ack of the same rank supersedes the earlier one
      pending_[it->second] = update;
      return;
    }
    progress_index_[key] = pending_.size();
  }
  pending_.push_back(update);
}

std::string Journal::EncodePendingLocked() {
  std::string bytes;
  for (const Update& u : pending_) bytes += EncodeJournalRecord(u);
  return bytes;
}

Status Journal::Sync(const std::function<std::vector<Update>()>& snapshot) {
  {
    MutexLock lock(mu_);
    if (pending_.empty()) return Status::Ok();
    std::string bytes = EncodePendingLocked();
    STOKER_RETURN_IF_ERROR(file_->Append(bytes.data(), bytes.size()));
    STOKER_RETURN_IF_ERROR(file_->Sync());
    records_written_ += pending_.size();
    pending_.clear();
    progress_index_.clear();
    if (!snapshot || file_->Size() <= options_.compact_threshold_bytes) return Status::Ok();
  }
  // The snapshot is taken without our lock (it locks the coordinator, which appends under its own lock).
  std::vector<Update> state = snapshot();
  MutexLock lock(mu_);
  // An update appended meanwhile is already in `state` and would be replayed twice: compact at the next sync.
  if (!pending_.empty()) return Status::Ok();
  return CompactLocked(state);
}

Status Journal::CompactLocked(const std::vector<Update>& snapshot) {
  std::string tmp = path_ + ".compact";
  std::string bytes(kMagic, sizeof(kMagic));
  for (const Update& u : snapshot) bytes += EncodeJournalRecord(u);
  STOKER_RETURN_IF_ERROR(env_.WriteFileAtomically(tmp, bytes.data(), bytes.size()));
  STOKER_RETURN_IF_ERROR(env_.Rename(tmp, path_));
  STOKER_ASSIGN_OR_RETURN(file_, env_.OpenForAppend(path_));
  STOKER_LOG(kInfo) << "journal compacted to " << bytes.size() << " bytes (" << snapshot.size() << " records)";
  return Status::Ok();
}

bool Journal::HasUnsynced() const {
  MutexLock lock(mu_);
  return !pending_.empty();
}

uint64_t Journal::size_bytes() const {
  MutexLock lock(mu_);
  return file_->Size();
}

uint64_t Journal::records_written() const {
  MutexLock lock(mu_);
  return records_written_;
}

Status Journal::TEST_WriteTorn(double fraction) {
  MutexLock lock(mu_);
  std::string bytes = EncodePendingLocked();
  size_t cut = static_cast<size_t>(bytes.size() * fraction);
  if (cut == 0 && !bytes.empty()) cut = 1;
  return file_->Append(bytes.data(), cut);
}

}  // namespace stoker::coordinator
