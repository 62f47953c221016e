// Journal: the coordinator's append-only log of CoordinatorState updates (schema/journal.capnp describes the
// file). Open() replays it; Append() buffers an update; Sync() writes everything buffered in one write and one
// fdatasync (group commit) — the coordinator answers the requests that caused those updates only after Sync().
//
// Progress records coalesce: several acks of one rank between two syncs become one record. When the file grows
// past its compaction threshold, Sync() rewrites it as a snapshot of the current state (a new file, fsynced and
// renamed over the old), so its size stays proportional to the number of jobs, not to their history.
//
// Recovery: a record cut short at the end of the file (a crash in the middle of an append) is dropped and the
// file truncated to the last whole record. A record that fails its checksum with more data after it is
// corruption in the middle: Open() refuses with DataLoss saying where, rather than continue on a guess.
//
// Thread safety: Append and Sync may be called from different threads (one mutex).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/status.h"
#include "coordinator/state.h"
#include "common/sync.h"

namespace stoker::coordinator {

struct JournalReplay {
  uint64_t records = 0;
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
  uint64_t records_written() const;

  // Fault injection for tests: writes the first `fraction` of the next Sync's bytes and does not sync.
  Status TEST_WriteTorn(double fraction);

 private:
  Journal(Env& env, std::string path, const JournalOptions& options, std::unique_ptr<WritableFile> file);
  std::string EncodePendingLocked() STOKER_REQUIRES(mu_);
  Status CompactLocked(const std::vector<Update>& snapshot) STOKER_REQUIRES(mu_);

  Env& env_;
  const std::string path_;
  const JournalOptions options_;
  mutable Mutex mu_;
  std::unique_ptr<WritableFile> file_ STOKER_GUARDED_BY(mu_);
  std::vector<Update> pending_ STOKER_GUARDED_BY(mu_);
  std::map<std::pair<std::string, uint32_t>, size_t> progress_index_ STOKER_GUARDED_BY(mu_);  // coalescing
  uint64_t records_written_ STOKER_GUARDED_BY(mu_) = 0;
};

// The record encoding, exposed for tests and tools.
std::string EncodeJournalRecord(const Update& update);
StatusOr<Update> DecodeJournalRecord(const void* data, size_t size);

}  // namespace stoker::coordinator
