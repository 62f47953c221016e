// Journal (journal.h): replay and recovery on open, group-commit sync with rollback of failed writes, compaction.
#include "coordinator/journal.h"

#include <cstring>

#include "base/logging.h"
#include "base/sync.h"
#include "coordinator/journal_format.h"

namespace stoker::coordinator {
namespace {

std::string Refusal(const std::string& path, const std::string& what) {
  return "journal " + path + ": " + what +
         ". The coordinator will not guess what it lost: restore the journal from a backup, or move it (and " +
         path + ".mark) aside to start without any job progress";
}

// The high-water mark's durable bytes, 0 without a mark; a mark that cannot be read or is damaged (a crash while
// it was rewritten) only lowers the check to none, with a warning.
uint64_t ReadMark(Env& env, const std::string& mark_path) {
  auto file = env.OpenForRead(mark_path);
  if (file.status().code() == StatusCode::kNotFound) return 0;
  uint8_t bytes[kJournalMarkBytes + 1];  // one more: a longer file is no mark
  StatusOr<size_t> got = file.ok() ? (*file)->Read(0, sizeof(bytes), bytes) : StatusOr<size_t>(file.status());
  StatusOr<uint64_t> durable = got.ok() ? DecodeJournalMark({bytes, *got}) : StatusOr<uint64_t>(got.status());
  if (!durable.ok()) {
    STOKER_LOG(kWarning) << "journal mark " << mark_path << " is not usable (" << durable.status().message()
                         << "): the journal's length cannot be checked this time";
    return 0;
  }
  return *durable;
}

// Rewrites a format 1 journal as format 2 holding the same updates in the same order, atomically.
Status Migrate(Env& env, const std::string& path, const std::vector<Update>& updates) {
  std::string bytes(kJournalMagicV2, sizeof(kJournalMagicV2));
  for (const EncodedJournalRecord& r : EncodeJournalGroups(updates)) bytes += r.bytes;
  STOKER_RETURN_IF_ERROR(env.WriteFileAtomically(path, bytes.data(), bytes.size()));
  STOKER_LOG(kInfo) << "journal " << path << ": rewritten from format 1 to format 2 (" << updates.size()
                    << " updates, " << bytes.size() << " bytes)";
  return Status::Ok();
}

// The refusal of a journal shorter than its high-water mark.
Status ShorterThanItsMark(const std::string& path, uint64_t holds, uint64_t durable) {
  return DataLossError(Refusal(path, "it holds " + std::to_string(holds) +
                                         " bytes of whole records, but its high-water mark says " +
                                         std::to_string(durable) +
                                         " were made durable: it was cut back, damaged after it was written, or "
                                         "replaced by an older copy, and what was recorded after byte " +
                                         std::to_string(holds) + " is gone"));
}

// Replays an existing journal into `apply`, then cuts off a torn tail or rewrites a format 1 file; first refuses
// it if it holds fewer whole records than the `durable` bytes its mark says were synced (a damaged last record
// that was synced is then refused, not cut off).
Status Recover(Env& env, const std::string& path, const std::function<void(const Update&)>& apply,
               uint64_t durable, JournalReplay* replay) {
  STOKER_ASSIGN_OR_RETURN(auto file, env.OpenForRead(path));
  char magic[sizeof(kJournalMagicV1)] = {};
  STOKER_ASSIGN_OR_RETURN(size_t got, file->Read(0, sizeof(magic), magic));
  const bool format1 = got == sizeof(magic) && std::memcmp(magic, kJournalMagicV1, sizeof(magic)) == 0;
  std::vector<Update> kept;  // only for a format 1 file, to rewrite it
  auto scan = ScanJournal(*file, [&](const Update& u) {
    apply(u);
    if (format1) kept.push_back(u);
  });
  if (!scan.ok()) {
    if (scan.status().code() != StatusCode::kDataLoss) return scan.status();
    return DataLossError(Refusal(path, scan.status().message()));
  }
  if (scan->good_bytes < durable) return ShorterThanItsMark(path, scan->good_bytes, durable);
  replay->format = scan->version;
  replay->records = scan->records;
  replay->updates = scan->updates;
  replay->bytes = scan->good_bytes;
  replay->torn_bytes = scan->torn_bytes;
  if (scan->torn_bytes > 0) {
    STOKER_LOG(kWarning) << "journal " << path << ": dropped " << scan->torn_bytes << " bytes at byte "
                         << scan->good_bytes << " (" << scan->torn_reason << ") after " << scan->records
                         << " whole records: the last write, cut short by a crash before it was synced (or damaged "
                            "after), with no valid record after it";
    STOKER_RETURN_IF_ERROR(env.Truncate(path, scan->good_bytes));
  }
  if (format1) STOKER_RETURN_IF_ERROR(Migrate(env, path, kept));
  return Status::Ok();
}

}  // namespace

Journal::Journal(Env& env, std::string path, const JournalOptions& options, std::unique_ptr<WritableFile> file)
    : env_(env), path_(std::move(path)), mark_path_(path_ + ".mark"), options_(options), file_(std::move(file)) {}

StatusOr<std::unique_ptr<Journal>> Journal::Open(Env& env, const std::string& path, const JournalOptions& options,
                                                 const std::function<void(const Update&)>& apply,
                                                 JournalReplay* replay) {
  *replay = JournalReplay{};
  STOKER_ASSIGN_OR_RETURN(FileInfo info, env.Stat(path));
  const std::string mark_path = path + ".mark";
  if (!info.exists) {
    // No journal at all is a fresh start (the operator moved it aside): a mark left from before is zeroed in place
    // (no new space needed: a full volume still starts), synced, so that the new journal is not judged by it.
    STOKER_ASSIGN_OR_RETURN(FileInfo mark, env.Stat(mark_path));
    const std::string zero = EncodeJournalMark(0);
    if (mark.exists) STOKER_RETURN_IF_ERROR(env.Overwrite(mark_path, zero.data(), zero.size(), /*sync=*/true));
  } else {
    const uint64_t durable = ReadMark(env, mark_path);
    if (info.size > 0) {
      STOKER_RETURN_IF_ERROR(Recover(env, path, apply, durable, replay));
    } else if (durable > 0) {
      return ShorterThanItsMark(path, 0, durable);
    }
  }
  STOKER_ASSIGN_OR_RETURN(auto writable, env.OpenForAppend(path));
  // A new file's name must survive a crash as well as its first record; nothing is written until the first Sync,
  // so a coordinator can start on a full volume and say so instead of failing here.
  if (!info.exists) STOKER_RETURN_IF_ERROR(env.SyncDirectory(DirectoryOf(path)));
  auto journal = std::unique_ptr<Journal>(new Journal(env, path, options, std::move(writable)));
  MutexLock lock(journal->mu_);
  journal->good_size_ = journal->file_->Size();
  journal->needs_magic_ = journal->good_size_ == 0;
  if (journal->good_size_ > 0) {
    // What was replayed may have been read from the page cache of a process killed before its sync: synced now,
    // before the mark counts it.
    STOKER_RETURN_IF_ERROR(journal->file_->Sync());
    (void)journal->WriteMarkLocked(journal->good_size_, /*sync=*/false);
  }
  return journal;
}

Status Journal::WriteMarkLocked(uint64_t durable_bytes, bool sync) {
  const std::string mark = EncodeJournalMark(durable_bytes);
  Status written = env_.Overwrite(mark_path_, mark.data(), mark.size(), sync);
  if (!written.ok()) {
    // Only the check at the next start is weaker: the mark stays at an earlier, smaller length.
    STOKER_LOG(kWarning) << "journal " << path_ << ": its high-water mark was not updated: " << written.ToString();
  }
  return written;
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

void Journal::ForgetPendingLocked(size_t count) {
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(count));
  records_written_ += count;
  progress_index_.clear();
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (const auto* p = std::get_if<RankProgress>(&pending_[i])) progress_index_[{p->job, p->rank}] = i;
  }
}

Status Journal::WritePendingLocked() {
  // A write that failed before may have left part of a record behind: cut back to the last whole one first.
  if (file_->Size() != good_size_) STOKER_RETURN_IF_ERROR(file_->Truncate(good_size_));
  std::vector<EncodedJournalRecord> records = EncodeJournalGroups(pending_);
  size_t durable = 0;  // updates in the records synced so far
  for (EncodedJournalRecord& record : records) {
    if (needs_magic_) record.bytes.insert(0, kJournalMagicV2, sizeof(kJournalMagicV2));
    Status s = file_->Append(record.bytes.data(), record.bytes.size());
    if (s.ok()) s = file_->Sync();
    if (!s.ok()) {
      (void)file_->Truncate(good_size_);  // best effort now; done again before the next write if it failed
      ForgetPendingLocked(durable);
      return s;
    }
    good_size_ = file_->Size();
    needs_magic_ = false;
    durable += record.updates;
  }
  ForgetPendingLocked(durable);
  // After the records are synced, so the mark never says more than the file holds; not synced itself: after a
  // crash it may say less (a weaker check, never a false one).
  (void)WriteMarkLocked(good_size_, /*sync=*/false);
  return Status::Ok();
}

Status Journal::Sync(const std::function<std::vector<Update>()>& snapshot) {
  {
    MutexLock lock(mu_);
    if (pending_.empty()) return Status::Ok();
    STOKER_RETURN_IF_ERROR(WritePendingLocked());
    const uint64_t size = file_->Size();
    if (!snapshot || size <= options_.compact_threshold_bytes || size < next_compaction_size_) return Status::Ok();
  }
  // The snapshot is taken without our lock (it locks the coordinator, which appends under its own lock).
  std::vector<Update> state = snapshot();
  MutexLock lock(mu_);
  // An update appended meanwhile is already in `state` and would be replayed twice: compact at the next sync.
  if (!pending_.empty()) return Status::Ok();
  Status compacted = CompactLocked(state);
  if (!compacted.ok()) {
    ++compaction_failures_;
    next_compaction_size_ = file_->Size() + options_.compact_threshold_bytes / 8;
    STOKER_LOG(kWarning) << "journal " << path_ << ": compaction failed (" << compacted.ToString()
                         << "); the journal stays as it is and grows, compaction is tried again at "
                         << next_compaction_size_ << " bytes";
  }
  return Status::Ok();  // the updates themselves are durable: a failed compaction loses nothing
}

Status Journal::CompactLocked(const std::vector<Update>& snapshot) {
  std::string bytes(kJournalMagicV2, sizeof(kJournalMagicV2));
  for (const EncodedJournalRecord& r : EncodeJournalGroups(snapshot)) bytes += r.bytes;
  // The compacted file is shorter than the mark: the mark goes to zero (synced) before the rename, so that a crash
  // between the two cannot leave a mark that refuses the new file.
  STOKER_RETURN_IF_ERROR(WriteMarkLocked(0, /*sync=*/true));
  STOKER_RETURN_IF_ERROR(env_.WriteFileAtomically(path_, bytes.data(), bytes.size()));  // fsyncs the directory
  STOKER_ASSIGN_OR_RETURN(file_, env_.OpenForAppend(path_));
  good_size_ = file_->Size();
  needs_magic_ = false;
  next_compaction_size_ = 0;
  (void)WriteMarkLocked(good_size_, /*sync=*/false);
  STOKER_LOG(kInfo) << "journal compacted to " << bytes.size() << " bytes (" << snapshot.size() << " updates)";
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

uint64_t Journal::compaction_failures() const {
  MutexLock lock(mu_);
  return compaction_failures_;
}

Status Journal::TEST_WriteTorn(double fraction) {
  MutexLock lock(mu_);
  std::vector<EncodedJournalRecord> records = EncodeJournalGroups(pending_);
  if (records.empty()) return Status::Ok();
  std::string bytes = needs_magic_ ? std::string(kJournalMagicV2, sizeof(kJournalMagicV2)) + records[0].bytes
                                   : records[0].bytes;
  size_t cut = static_cast<size_t>(static_cast<double>(bytes.size()) * fraction);
  if (cut == 0) cut = 1;
  return file_->Append(bytes.data(), cut);
}

}  // namespace stoker::coordinator
