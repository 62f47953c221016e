// Journal format (journal_format.h): record framing, group encoding, and recovery's scan of a damaged file.
#include "coordinator/journal_format.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>
#include <tuple>

#include "base/hash.h"
#include "stoker/schema/journal.capnp.h"
#include "wire/fields.h"
#include "wire/frames.h"

namespace stoker::coordinator {
namespace {

constexpr uint64_t kHeaderCheckSeed = 0x53544b4a524e3032ull;  // "STKJRN02"
constexpr uint32_t kMaxRecordV1 = 16u << 20;
constexpr size_t kScanChunk = 1u << 20;  // the search for a valid record after a bad one reads this much at a time

uint32_t HeaderCheck(uint32_t length) { return static_cast<uint32_t>(Xxh64(&length, 4, kHeaderCheckSeed)); }
uint64_t PayloadSeed(uint32_t length, uint32_t check) { return (uint64_t{length} << 32) | check; }

void PutU32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void PutU64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

// What each update carries (wire/fields.h), in Update's order and the order the journal has always written it.
// WorkerLeft and JobRemoved are a Text in the union itself.
constexpr auto kUpdates = std::tuple(
    fields::Member(fields::List<JobCreated>(STOKER_FIELD(spec, Spec), STOKER_FIELD(num_samples, NumSamples)),
                   STOKER_CAPNP_ACCESSORS(JobCreated)),
    fields::Member(fields::List<RankSessionStarted>(STOKER_FIELD(job, Job), STOKER_FIELD(rank, Rank),
                                                    STOKER_FIELD(client_id, ClientId),
                                                    STOKER_FIELD(start_batch, StartBatch),
                                                    STOKER_FIELD(window, Window), STOKER_FIELD(holder, Holder),
                                                    fields::Bytes(STOKER_FIELD(session_check, SessionCheck))),
                   STOKER_CAPNP_ACCESSORS(RankSession)),
    fields::Member(fields::List<RankProgress>(STOKER_FIELD(job, Job), STOKER_FIELD(rank, Rank),
                                              STOKER_FIELD(received, Received), STOKER_FIELD(consumed, Consumed)),
                   STOKER_CAPNP_ACCESSORS(RankProgress)),
    fields::Member(fields::List<AttemptsReserved>(STOKER_FIELD(job, Job), STOKER_FIELD(rank, Rank),
                                                  STOKER_FIELD(up_to, UpTo)),
                   STOKER_CAPNP_ACCESSORS(AttemptsReserved)),
    fields::Member(fields::List<WorkerJoined>(STOKER_FIELD(worker_id, WorkerId),
                                              STOKER_FIELD(data_endpoint, DataEndpoint),
                                              STOKER_FIELD(threads, Threads),
                                              STOKER_FIELD(data_public_key, DataPublicKey),
                                              STOKER_FIELD(identity, Identity), STOKER_FIELD(data_sealed, DataSealed),
                                              fields::Bytes(STOKER_FIELD(session_check, SessionCheck))),
                   STOKER_CAPNP_ACCESSORS(WorkerJoined)),
    fields::Inline(fields::List<WorkerLeft>(STOKER_FIELD(worker_id, WorkerLeft)), STOKER_CAPNP_ACCESSORS(WorkerLeft)),
    fields::Inline(fields::List<JobRemoved>(STOKER_FIELD(job, JobRemoved)), STOKER_CAPNP_ACCESSORS(JobRemoved)),
    fields::Member(fields::List<JobReshaped>(STOKER_FIELD(spec, Spec), STOKER_FIELD(attempts_floor, AttemptsFloor),
                                             STOKER_FIELD(shape_changes, ShapeChanges)),
                   STOKER_CAPNP_ACCESSORS(JobReshaped)));

void UpdateToWire(const Update& update, wire::JournalRecord::Builder r) { fields::PutVariant(update, r, kUpdates); }

StatusOr<Update> UpdateFromWire(wire::JournalRecord::Reader r) {
  Update update;
  STOKER_RETURN_IF_ERROR(fields::GetVariant(r, &update, kUpdates, [] {
    return DataLossError("an update of an unknown kind (written by a newer stoker?)");
  }));
  return update;
}

std::string Frame(const std::string& payload) {
  const auto length = static_cast<uint32_t>(payload.size());
  const uint32_t check = HeaderCheck(length);
  std::string record;
  record.reserve(kJournalRecordHeader + payload.size());
  PutU32(record, length);
  PutU32(record, check);
  PutU64(record, Xxh64(payload.data(), payload.size(), PayloadSeed(length, check)));
  record += payload;
  return record;
}

std::string FlatBytes(capnp::MessageBuilder& message) {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  return std::string(reinterpret_cast<const char*>(words.begin()), words.size() * sizeof(capnp::word));
}

// Decodes one Cap'n Proto message of whole words with limits proportional to its size; `read` turns its root into
// updates. Any failure is DataLoss.
template <typename Root, typename Fn>
Status DecodeMessage(const void* data, size_t size, Fn&& read) {
  if (size % sizeof(capnp::word) != 0) return DataLossError("not a whole number of words");
  std::vector<capnp::word> words(size / sizeof(capnp::word));
  if (size > 0) std::memcpy(words.data(), data, size);
  Status s = CatchWireErrors("journal record", [&]() -> Status {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = words.size() * 4 + 64;
    options.nestingLimit = 16;
    capnp::FlatArrayMessageReader reader(kj::ArrayPtr<const capnp::word>(words.data(), words.size()), options);
    return read(reader.getRoot<Root>());
  });
  return s.ok() ? s : Status(StatusCode::kDataLoss, s.message());
}

// A record's framing, as read at some offset.
struct Frame2 {
  uint32_t length = 0;
  uint32_t check = 0;
  uint64_t checksum = 0;
};

bool ParseHeader(const unsigned char* h, int version, Frame2* f) {
  std::memcpy(&f->length, h, 4);
  std::memcpy(&f->check, h + 4, 4);
  std::memcpy(&f->checksum, h + 8, 8);
  if (version == 1) return f->length <= kMaxRecordV1 && f->length % 8 == 0 && f->check == 0;
  return f->check == HeaderCheck(f->length) && f->length % 8 == 0 && f->length <= kJournalMaxRecord;
}

bool ChecksumMatches(int version, const Frame2& f, const std::vector<char>& payload) {
  const uint64_t seed = version == 1 ? 0 : PayloadSeed(f.length, f.check);
  return Xxh64(payload.data(), payload.size(), seed) == f.checksum;
}

// Reads the record at `offset`: true with its payload when it is whole and valid, else false and why.
StatusOr<bool> ReadRecord(const RandomAccessFile& file, uint64_t offset, int version, std::vector<char>* payload,
                          std::string* why) {
  const uint64_t size = file.Size();
  if (size - offset < kJournalRecordHeader) {
    *why = "a record header cut short by the end of the file";
    return false;
  }
  unsigned char header[kJournalRecordHeader];
  STOKER_ASSIGN_OR_RETURN(size_t got, file.Read(offset, sizeof(header), header));
  Frame2 f;
  if (got != sizeof(header) || !ParseHeader(header, version, &f)) {
    *why = "the record header fails its check";
    return false;
  }
  if (f.length > size - offset - kJournalRecordHeader) {
    *why = "the record runs past the end of the file";
    return false;
  }
  payload->resize(f.length);
  size_t p = 0;
  if (f.length > 0) {
    STOKER_ASSIGN_OR_RETURN(p, file.Read(offset + kJournalRecordHeader, f.length, payload->data()));
  }
  if (p != f.length || !ChecksumMatches(version, f, *payload)) {
    *why = "the record fails its checksum";
    return false;
  }
  return true;
}

// The first offset after `bad` (8-byte aligned from the start of records, as records are) where a whole, valid
// record starts, or 0 if there is none: the difference between a torn tail and damage in the middle. Headers are
// read a chunk at a time; in format 2 the header check rejects almost every false start before any payload is
// hashed, and in format 1 only lengths an honest update could have (64 KiB) are tried.
StatusOr<uint64_t> FindValidRecordAfter(const RandomAccessFile& file, uint64_t bad, int version) {
  const uint64_t size = file.Size();
  std::vector<unsigned char> chunk;
  std::vector<char> payload;
  std::string why;
  for (uint64_t base = bad + 8; base + kJournalRecordHeader <= size; base += kScanChunk) {
    const uint64_t n = std::min<uint64_t>(kScanChunk + kJournalRecordHeader, size - base);
    chunk.resize(n);
    STOKER_ASSIGN_OR_RETURN(size_t got, file.Read(base, n, chunk.data()));
    for (uint64_t at = 0; at + kJournalRecordHeader <= got && at < kScanChunk; at += 8) {
      Frame2 f;
      if (!ParseHeader(chunk.data() + at, version, &f)) continue;
      if (version == 1 && (f.length == 0 || f.length > (64u << 10))) continue;
      STOKER_ASSIGN_OR_RETURN(bool valid, ReadRecord(file, base + at, version, &payload, &why));
      if (valid) return base + at;
    }
  }
  return uint64_t{0};
}

// Applies the updates in one valid record's payload, each checked against the state the records before it made
// (`shadow`): DataLoss if the payload does not decode, FailedPrecondition if an update does not fit.
Status ApplyPayload(int version, const std::vector<char>& payload, const std::function<void(const Update&)>& apply,
                    CoordinatorState* shadow, uint64_t* updates) {
  auto fitting = [&](const Update& u) -> Status {
    STOKER_RETURN_IF_ERROR(shadow->Check(u));
    shadow->Apply(u);
    apply(u);
    ++*updates;
    return Status::Ok();
  };
  if (version == 1) {
    StatusOr<Update> u = DecodeJournalUpdate(payload.data(), payload.size());
    if (!u.ok()) return DataLossError(u.status().message());
    return fitting(*u);
  }
  std::vector<Update> group;
  Status decoded = DecodeMessage<wire::JournalGroup>(
      payload.data(), payload.size(), [&](wire::JournalGroup::Reader root) -> Status {
        for (auto r : root.getUpdates()) {
          STOKER_ASSIGN_OR_RETURN(Update u, UpdateFromWire(r));
          group.push_back(std::move(u));
        }
        return Status::Ok();
      });
  if (!decoded.ok()) return DataLossError(decoded.message());
  for (const Update& u : group) STOKER_RETURN_IF_ERROR(fitting(u));
  return Status::Ok();
}

// A file shorter than the magic, or one whose bytes are a prefix of the magic then zeros: the very first write
// (magic and first record go out together) was cut short. Nothing in it was ever acknowledged.
bool IsTornStart(const unsigned char* head, size_t got) {
  for (size_t i = 0; i < got; ++i) {
    if (head[i] != 0 && (i >= sizeof(kJournalMagicV2) || head[i] != static_cast<unsigned char>(kJournalMagicV2[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string EncodeJournalUpdate(const Update& update) {
  capnp::MallocMessageBuilder message(kControlFirstSegmentWords);
  UpdateToWire(update, message.initRoot<wire::JournalRecord>());
  return FlatBytes(message);
}

StatusOr<Update> DecodeJournalUpdate(const void* data, size_t size) {
  Update out;
  STOKER_RETURN_IF_ERROR(DecodeMessage<wire::JournalRecord>(data, size, [&](wire::JournalRecord::Reader r) -> Status {
    STOKER_ASSIGN_OR_RETURN(out, UpdateFromWire(r));
    return Status::Ok();
  }));
  return out;
}

std::vector<EncodedJournalRecord> EncodeJournalGroups(std::span<const Update> updates) {
  std::vector<EncodedJournalRecord> records;
  size_t begin = 0;
  while (begin < updates.size()) {
    // Measure the updates one by one to find where this record ends (a Cap'n Proto list is sized up front).
    size_t end = begin;
    size_t bytes = 0;
    while (end < updates.size()) {
      const size_t one = EncodeJournalUpdate(updates[end]).size();
      if (end > begin && bytes + one > kJournalGroupBytes) break;
      bytes += one;
      ++end;
    }
    capnp::MallocMessageBuilder message(static_cast<unsigned>(std::min<size_t>(bytes / 8 + 64, 1u << 20)));
    auto list = message.initRoot<wire::JournalGroup>().initUpdates(static_cast<unsigned>(end - begin));
    for (size_t i = begin; i < end; ++i) UpdateToWire(updates[i], list[static_cast<unsigned>(i - begin)]);
    records.push_back({Frame(FlatBytes(message)), end - begin});
    begin = end;
  }
  return records;
}

StatusOr<JournalScan> ScanJournal(const RandomAccessFile& file, const std::function<void(const Update&)>& apply) {
  JournalScan scan;
  const uint64_t size = file.Size();
  if (size == 0) return scan;
  unsigned char magic[sizeof(kJournalMagicV2)] = {};
  STOKER_ASSIGN_OR_RETURN(size_t got, file.Read(0, sizeof(magic), magic));
  if (std::memcmp(magic, kJournalMagicV2, sizeof(magic)) == 0) {
    scan.version = 2;
  } else if (std::memcmp(magic, kJournalMagicV1, sizeof(magic)) == 0) {
    scan.version = 1;
  } else if (got < sizeof(magic) || IsTornStart(magic, got)) {
    std::vector<unsigned char> all(std::min<uint64_t>(size, 1u << 20));
    STOKER_ASSIGN_OR_RETURN(size_t n, file.Read(0, all.size(), all.data()));
    if (size <= all.size() && IsTornStart(all.data(), n)) {
      scan.torn_bytes = size;
      scan.torn_reason = "the first write, cut short";
      return scan;
    }
    return DataLossError("not a stoker journal (bad magic at byte 0)");
  } else {
    return DataLossError("not a stoker journal (bad magic at byte 0)");
  }
  uint64_t offset = sizeof(magic);
  std::vector<char> payload;
  CoordinatorState shadow;  // what the records so far made: each update must fit it
  while (offset < size) {
    std::string why;
    STOKER_ASSIGN_OR_RETURN(bool valid, ReadRecord(file, offset, scan.version, &payload, &why));
    if (!valid) {
      STOKER_ASSIGN_OR_RETURN(uint64_t next, FindValidRecordAfter(file, offset, scan.version));
      if (next != 0) {
        return DataLossError("damaged at byte " + std::to_string(offset) + " (record " +
                             std::to_string(scan.records + 1) + ": " + why + "), and a valid record follows at byte " +
                             std::to_string(next) + ", so this is not a torn last write");
      }
      scan.torn_bytes = size - offset;
      scan.torn_reason = why;
      break;
    }
    Status applied = ApplyPayload(scan.version, payload, apply, &shadow, &scan.updates);
    if (!applied.ok()) {
      return DataLossError("record " + std::to_string(scan.records + 1) + " at byte " + std::to_string(offset) +
                           " passes its checksum but " +
                           (applied.code() == StatusCode::kFailedPrecondition ? "does not fit the records before it: "
                                                                               : "does not decode: ") +
                           applied.message());
    }
    ++scan.records;
    offset += kJournalRecordHeader + payload.size();
  }
  scan.good_bytes = offset;
  return scan;
}

std::string EncodeJournalMark(uint64_t durable_bytes) {
  std::string mark(kJournalMarkMagic, sizeof(kJournalMarkMagic));
  mark.append(reinterpret_cast<const char*>(&durable_bytes), sizeof(durable_bytes));
  const uint64_t check = Xxh64(mark.data(), mark.size());
  mark.append(reinterpret_cast<const char*>(&check), sizeof(check));
  return mark;
}

StatusOr<uint64_t> DecodeJournalMark(std::span<const uint8_t> bytes) {
  if (bytes.size() != kJournalMarkBytes || std::memcmp(bytes.data(), kJournalMarkMagic, 8) != 0) {
    return InvalidArgumentError("not a journal mark");
  }
  uint64_t durable = 0, check = 0;
  std::memcpy(&durable, bytes.data() + 8, sizeof(durable));
  std::memcpy(&check, bytes.data() + 16, sizeof(check));
  if (Xxh64(bytes.data(), 16) != check) return InvalidArgumentError("a journal mark whose checksum fails");
  return durable;
}

}  // namespace stoker::coordinator
