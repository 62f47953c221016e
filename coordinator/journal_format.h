// The journal's bytes: how updates are framed on disk, and what recovery makes of a file after a crash or damage.
// Pure functions over a RandomAccessFile, so the fuzz target and the tests drive exactly what Journal::Open runs.
//
// Format 2 (written since the durability issue), after the 8 bytes "STKJRN02":
//     record = [length: u32][header check: u32][checksum: u64][payload: `length` bytes, a multiple of 8]
//     header check = the low 32 bits of XXH64 of the length (seeded): a damaged length is seen at once
//     checksum     = XXH64 of the payload, seeded with the length and the header check: it covers the header too
//     payload      = one Cap'n Proto JournalGroup: every update of one Sync, in order
// One Sync writes one record (a group too large for one is split, each part synced before the next is written),
// so only the physically last record can ever be torn by a crash.
//
// What recovery promises (ScanJournal), for any damage whatever:
//   - every whole, valid record before the first bad one is replayed;
//   - a bad record with no valid record anywhere after it is the torn tail of the last write: it is dropped,
//     and the caller truncates the file there and logs what went (a crash can leave garbage or zeros there);
//   - a bad record with a valid record after it is damage in the middle: DataLoss naming both byte offsets,
//     because dropping the rest would silently delete acknowledged work;
//   - anything that is not a journal (bad magic) is refused, naming byte 0;
//   - a valid record whose updates do not fit the state the records before it made (an update for a job nothing
//     created, a rank out of range, a job created twice) is refused, naming its byte: replaying it would abort.
// Format 1 ("STKJRN01": one record per update; the length not covered by any checksum) is still read, with the
// same rule about what follows a bad record, and Journal::Open rewrites it in format 2.
//
// Thread safety: none needed; functions only.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/env.h"
#include "stoker/status.h"
#include "coordinator/state.h"

namespace stoker::coordinator {

inline constexpr char kJournalMagicV1[8] = {'S', 'T', 'K', 'J', 'R', 'N', '0', '1'};
inline constexpr char kJournalMagicV2[8] = {'S', 'T', 'K', 'J', 'R', 'N', '0', '2'};
inline constexpr size_t kJournalRecordHeader = 16;
inline constexpr uint32_t kJournalMaxRecord = 64u << 20;  // no honest record is larger (groups split at 4 MiB)
inline constexpr size_t kJournalGroupBytes = 4u << 20;    // a Sync's updates beyond this go in another record

struct JournalScan {
  int version = 2;            // the format found (2 for an empty or new file)
  uint64_t good_bytes = 0;    // the prefix that holds the magic and whole, valid records
  uint64_t torn_bytes = 0;    // after it, the torn tail of the last write (to truncate away)
  uint64_t records = 0;       // valid records replayed
  uint64_t updates = 0;       // updates in them
  std::string torn_reason;    // why the tail is torn ("runs past the end", "header check fails", ...)
};

// Reads the journal in `file`, calling `apply` for every update in order. Errors: DataLoss naming the byte offset
// (not a journal; damage in the middle; a valid record that does not decode), or the file's own read error.
StatusOr<JournalScan> ScanJournal(const RandomAccessFile& file, const std::function<void(const Update&)>& apply);

// One framed record (format 2) and how many updates it holds.
struct EncodedJournalRecord {
  std::string bytes;
  size_t updates = 0;
};

// The records holding `updates` in order, split so that no payload passes kJournalGroupBytes unless a single
// update does. Each is to be written and synced before the next.
std::vector<EncodedJournalRecord> EncodeJournalGroups(std::span<const Update> updates);

// The journal's high-water mark (a side file, `<journal>.mark`, Journal keeps it): how many bytes of whole records
// the journal had made durable, written after each sync, so that a journal cut back at a record boundary (or to
// its magic, or to nothing) is refused instead of replayed as a shorter history.
//     mark = "STKMRK01" [durable bytes: u64] [XXH64 of the 16 bytes before: u64]
inline constexpr char kJournalMarkMagic[8] = {'S', 'T', 'K', 'M', 'R', 'K', '0', '1'};
inline constexpr size_t kJournalMarkBytes = 24;
std::string EncodeJournalMark(uint64_t durable_bytes);
// The durable bytes a mark holds; InvalidArgument for anything that is not a whole, intact mark.
StatusOr<uint64_t> DecodeJournalMark(std::span<const uint8_t> bytes);

// One update as a Cap'n Proto JournalRecord message and back (exposed for tests and tools).
std::string EncodeJournalUpdate(const Update& update);
StatusOr<Update> DecodeJournalUpdate(const void* data, size_t size);

}  // namespace stoker::coordinator
