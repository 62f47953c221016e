// Journal: the coordinator's append-only log of CoordinatorState updates (the format and what recovery promises
// are in journal_format.h). Open() replays it; Append() buffers an update; Sync() writes everything buffered as one
// record and fdatasyncs it (group commit) — the coordinator answers the requests that caused those updates only
// after Sync().
//
// Progress records coalesce: several acks of one rank between two syncs become one update. When the file grows
// past its compaction threshold, Sync() rewrites it as a snapshot of the current state (a new file, fsynced,
// renamed over the old, the directory fsynced), so its size stays proportional to the number of jobs, not to their
// history. A compaction that fails (the volume is full) leaves the journal as it was and is tried again later.
//
// Recovery (Open): a torn last write is dropped, the file truncated to the last whole record and the loss logged;
// damage with a valid record after it refuses the start with DataLoss naming the byte. A format 1 journal is
// rewritten in format 2. A high-water mark beside the journal (`<path>.mark`, journal_format.h), rewritten after
// each sync, says how many bytes were made durable: a journal shorter than that (cut back at a record boundary,
// to its magic or to nothing, or an older copy put back) refuses the start with DataLoss. A missing journal is a
// fresh start and resets the mark.
//
// A Sync that fails (ENOSPC: ResourceExhausted; other I/O errors: Unavailable) leaves nothing of its write in the
// file and keeps every update pending, so the next Sync writes them all again: the caller holds its replies and
// retries, nothing is lost and nothing is answered early.
//
// Thread safety: Append and Sync may be called from different threads (one mutex).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/env.h"
#include "stoker/status.h"
#include "coordinator/state.h"
#include "base/sync.h"

namespace stoker::coordinator {

struct JournalReplay {
  int format = 2;                 // the format found (a format 1 journal is rewritten in format 2)
  uint64_t records = 0;           // whole records replayed
  uint64_t updates = 0;           // updates in them
  uint64_t bytes = 0;             // valid bytes kept
  uint64_t torn_bytes = 0;        // bytes of a torn tail that were truncated away
};

struct JournalOptions {
  uint64_t compact_threshold_bytes = 64ull << 20;
};

class Journal {
 public:
  // Opens (creating if absent) the journal at `path`, calling `apply` for every record in order.
  static StatusOr<std::unique_ptr<Journal>> Open(Env& env, const std::string& path, const JournalOptions& options,
                                                 const std::function<void(const Update&)>& apply,
                                                 JournalReplay* replay);

  void Append(const Update& update);
  // Writes and syncs what was appended. `snapshot` is asked for the full state only when compacting.
  Status Sync(const std::function<std::vector<Update>()>& snapshot = nullptr);
  bool HasUnsynced() const;
  uint64_t size_bytes() const;
  uint64_t records_written() const;  // updates made durable by this process
  uint64_t compaction_failures() const;
  // The space of the volume the journal is on (free space as a metric, before it runs out).
  StatusOr<VolumeSpace> Space() const { return env_.Space(DirectoryOf(path_)); }
  const std::string& path() const { return path_; }

  // Fault injection for tests: writes the first `fraction` of the next Sync's bytes and does not sync.
  Status TEST_WriteTorn(double fraction);

 private:
  Journal(Env& env, std::string path, const JournalOptions& options, std::unique_ptr<WritableFile> file);
  Status WritePendingLocked() STOKER_REQUIRES(mu_);
  void ForgetPendingLocked(size_t count) STOKER_REQUIRES(mu_);
  Status CompactLocked(const std::vector<Update>& snapshot) STOKER_REQUIRES(mu_);
  // Rewrites the high-water mark (failures are logged: the mark then stays lower).
  Status WriteMarkLocked(uint64_t durable_bytes, bool sync) STOKER_REQUIRES(mu_);

  Env& env_;
  const std::string path_;
  const std::string mark_path_;
  const JournalOptions options_;
  mutable Mutex mu_;
  std::unique_ptr<WritableFile> file_ STOKER_GUARDED_BY(mu_);
  std::vector<Update> pending_ STOKER_GUARDED_BY(mu_);
  std::map<std::pair<std::string, uint32_t>, size_t> progress_index_ STOKER_GUARDED_BY(mu_);  // coalescing
  uint64_t records_written_ STOKER_GUARDED_BY(mu_) = 0;
  uint64_t good_size_ STOKER_GUARDED_BY(mu_) = 0;   // the file's size after its last whole, synced record
  bool needs_magic_ STOKER_GUARDED_BY(mu_) = false;  // a new file: the magic goes out with the first record
  uint64_t compaction_failures_ STOKER_GUARDED_BY(mu_) = 0;
  uint64_t next_compaction_size_ STOKER_GUARDED_BY(mu_) = 0;  // after a failed compaction, wait for this size
};

}  // namespace stoker::coordinator
