// What the journal makes of damage (journal_format.h's promise): the three ways an auditor made it delete itself,
// a zero-filled tail, every single-byte corruption of a small journal, and a format 1 journal rewritten.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/hash.h"
#include "coordinator/journal.h"
#include "coordinator/journal_format.h"
#include "tests/support/specs.h"
#include "tests/support/temp_dir.h"

namespace stoker::coordinator {
namespace {

using testing::ReadFile;
using testing::SmallJobSpec;
using testing::TempDir;

// A journal of `syncs` records (one job, then one ack per sync); returns where each record starts.
std::vector<uint64_t> WriteJournal(const std::string& path, int syncs) {
  PosixEnv env;
  JournalReplay replay;
  auto journal = Journal::Open(env, path, JournalOptions{}, [](const Update&) {}, &replay);
  EXPECT_TRUE(journal.ok());
  std::vector<uint64_t> starts;
  (*journal)->Append(JobCreated{SmallJobSpec(), 100});
  for (int i = 0; i < syncs; ++i) {
    starts.push_back(i == 0 ? 8 : (*journal)->size_bytes());
    if (i > 0) (*journal)->Append(RankProgress{"j", 0, static_cast<uint64_t>(i), static_cast<uint64_t>(i)});
    EXPECT_TRUE((*journal)->Sync().ok());
  }
  return starts;
}

struct Opened {
  Status status;
  JournalReplay replay;
  size_t updates = 0;
};

Opened Open(const std::string& path) {
  PosixEnv env;
  Opened o;
  auto journal = Journal::Open(env, path, JournalOptions{}, [&](const Update&) { ++o.updates; }, &o.replay);
  o.status = journal.status();
  return o;
}

void PatchU32(const std::string& path, uint64_t offset, uint32_t value) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(reinterpret_cast<const char*>(&value), 4);
}

// Regression: the first record's length set to 0xFFFFFFFF was taken for a torn tail, and a 7,010-record journal
// was truncated to its 8-byte magic: the coordinator started with no jobs.
TEST(JournalRecovery, AnImpossibleFirstLengthRefusesTheStartInsteadOfTruncatingEverything) {
  TempDir dir;
  const std::string path = dir.Join("j");
  WriteJournal(path, 50);
  const uint64_t size = std::filesystem::file_size(path);
  PatchU32(path, 8, 0xFFFFFFFFu);
  Opened o = Open(path);
  EXPECT_EQ(o.status.code(), StatusCode::kDataLoss) << o.status.ToString();
  EXPECT_NE(o.status.message().find("damaged at byte 8 (record 1"), std::string::npos) << o.status.message();
  EXPECT_EQ(std::filesystem::file_size(path), size) << "the journal was cut";
}

// Regression: a middle record's length set above 16 MiB kept the records before it and deleted the rest.
TEST(JournalRecovery, AnImpossibleMiddleLengthRefusesTheStartNamingItsByte) {
  TempDir dir;
  const std::string path = dir.Join("j");
  std::vector<uint64_t> starts = WriteJournal(path, 50);
  const uint64_t size = std::filesystem::file_size(path);
  PatchU32(path, starts[20], 17u << 20);
  Opened o = Open(path);
  EXPECT_EQ(o.status.code(), StatusCode::kDataLoss) << o.status.ToString();
  EXPECT_NE(o.status.message().find("damaged at byte " + std::to_string(starts[20]) + " (record 21"),
            std::string::npos)
      << o.status.message();
  EXPECT_EQ(std::filesystem::file_size(path), size);
}

// Regression: 4 KiB of zeros at the end (what a crash on some file systems leaves) was refused as corruption in
// the middle. It is a torn tail: dropped, everything before it kept.
TEST(JournalRecovery, AZeroFilledTailIsATornTail) {
  TempDir dir;
  const std::string path = dir.Join("j");
  WriteJournal(path, 10);
  const uint64_t size = std::filesystem::file_size(path);
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out << std::string(4096, '\0');
  }
  Opened o = Open(path);
  ASSERT_TRUE(o.status.ok()) << o.status.ToString();
  EXPECT_EQ(o.replay.records, 10u);
  EXPECT_EQ(o.replay.torn_bytes, 4096u);
  EXPECT_EQ(std::filesystem::file_size(path), size);
}

// Any single byte of a journal changed, in every position, two ways: the outcome is always either every record
// but the last (the damage was in the last record: a torn tail, logged) or a refusal naming a byte at or before
// the damage. Never fewer records, never a crash, never a silent success with the damage inside.
TEST(JournalRecovery, EverySingleByteCorruptionRecoversTheTailOnlyOrRefusesNamingTheByte) {
  TempDir dir;
  const std::string pristine = dir.Join("pristine");
  std::vector<uint64_t> starts = WriteJournal(pristine, 6);
  const std::string bytes = ReadFile(pristine);
  const uint64_t last = starts.back();
  int torn = 0, refused = 0;
  for (uint64_t at = 0; at < bytes.size(); ++at) {
    for (unsigned char mask : {0x01, 0xff}) {
      std::string damaged = bytes;
      damaged[at] = static_cast<char>(damaged[at] ^ mask);
      const std::string path = dir.Write("damaged", damaged);
      Opened o = Open(path);
      if (o.status.ok()) {
        ++torn;
        EXPECT_GE(at, last) << "byte " << at << ": damage before the last record was dropped as a torn tail";
        EXPECT_EQ(o.replay.records, 5u) << "byte " << at;
        EXPECT_EQ(o.replay.torn_bytes, bytes.size() - last) << "byte " << at;
      } else {
        ++refused;
        EXPECT_EQ(o.status.code(), StatusCode::kDataLoss) << "byte " << at << ": " << o.status.ToString();
        const size_t named = o.status.message().find("at byte ");
        ASSERT_NE(named, std::string::npos) << o.status.message();
        EXPECT_LE(std::stoull(o.status.message().substr(named + 8)), at) << o.status.message();
        EXPECT_LT(at, last) << "byte " << at << ": damage in the last record refused the start";
      }
    }
  }
  EXPECT_EQ(torn + refused, static_cast<int>(2 * bytes.size()));
  EXPECT_GT(torn, 0);
  EXPECT_GT(refused, 0);
}

// A journal written by an earlier stoker (format 1: a record per update, the length outside the checksum) is
// replayed and rewritten in format 2 holding the same updates; a second start reads format 2.
TEST(JournalRecovery, AFormatOneJournalIsReplayedAndRewrittenInFormatTwo) {
  TempDir dir;
  std::string v1(kJournalMagicV1, sizeof(kJournalMagicV1));
  for (const Update& u : std::vector<Update>{JobCreated{SmallJobSpec(), 100}, RankSessionStarted{"j", 0, "c-1", 0, 8},
                                             RankProgress{"j", 0, 9, 7}}) {
    const std::string payload = EncodeJournalUpdate(u);
    const auto length = static_cast<uint32_t>(payload.size());
    const uint32_t reserved = 0;
    const uint64_t checksum = Xxh64(payload.data(), payload.size());
    v1.append(reinterpret_cast<const char*>(&length), 4);
    v1.append(reinterpret_cast<const char*>(&reserved), 4);
    v1.append(reinterpret_cast<const char*>(&checksum), 8);
    v1 += payload;
  }
  v1 += std::string(5, '\x7f');  // and a torn tail, which the rewrite leaves out
  const std::string path = dir.Write("j", v1);
  Opened first = Open(path);
  ASSERT_TRUE(first.status.ok()) << first.status.ToString();
  EXPECT_EQ(first.replay.format, 1);
  EXPECT_EQ(first.updates, 3u);
  EXPECT_EQ(ReadFile(path).substr(0, 8), "STKJRN02");
  Opened second = Open(path);
  ASSERT_TRUE(second.status.ok()) << second.status.ToString();
  EXPECT_EQ(second.replay.format, 2);
  EXPECT_EQ(second.updates, 3u);
  EXPECT_EQ(second.replay.torn_bytes, 0u);
}

// Found by fuzz_journal: format 1 records of length 0 made the scan read 0 bytes into an empty vector's null data
// (undefined behaviour, reported by UBSan in the sanitizer run). They are checksum failures, so a torn tail here.
TEST(JournalRecovery, ZeroLengthRecordsAreDamageNotUndefinedBehaviour) {
  TempDir dir;
  std::string v1(kJournalMagicV1, sizeof(kJournalMagicV1));
  v1 += std::string(128, '\0');
  Opened o = Open(dir.Write("j", v1));
  ASSERT_TRUE(o.status.ok()) << o.status.ToString();
  EXPECT_EQ(o.replay.records, 0u);
  EXPECT_EQ(o.replay.torn_bytes, 128u);
  StringFile empty("empty", "");
  EXPECT_EQ(*empty.Read(0, 0, nullptr), 0u);
}

// Regression (found by fuzz_journal in the one-CPU-hour run): a record that passes its checksum but whose update
// does not fit the records before it (here progress for a job no record created) made replay abort the process
// on CoordinatorState's check: a coordinator would crash-loop on such a file. It is refused, naming the byte.
TEST(JournalRecovery, AValidRecordThatDoesNotFitTheStateBeforeItRefusesTheStartNamingItsByte) {
  TempDir dir;
  WriteJournal(dir.Join("j"), 2);  // the job, then one progress record
  const uint64_t size_before = std::filesystem::file_size(dir.Join("j"));
  const Update orphans[] = {RankProgress{"no-such-job", 0, 5, 5}, RankProgress{"j", 7, 1, 1}};
  for (const Update& orphan : orphans) {
    std::filesystem::resize_file(dir.Join("j"), size_before);
    {
      std::ofstream out(dir.Join("j"), std::ios::binary | std::ios::app);
      for (const EncodedJournalRecord& r : EncodeJournalGroups({&orphan, 1})) out << r.bytes;
    }
    const uint64_t damaged_size = std::filesystem::file_size(dir.Join("j"));
    Opened o = Open(dir.Join("j"));
    EXPECT_EQ(o.status.code(), StatusCode::kDataLoss) << o.status.ToString();
    EXPECT_NE(o.status.message().find("at byte " + std::to_string(size_before)), std::string::npos)
        << o.status.message();
    EXPECT_NE(o.status.message().find("does not fit"), std::string::npos) << o.status.message();
    EXPECT_EQ(std::filesystem::file_size(dir.Join("j")), damaged_size) << "a refusal cuts nothing";
  }
  // A job created twice is refused the same way.
  std::filesystem::resize_file(dir.Join("j"), size_before);
  {
    const Update again = JobCreated{SmallJobSpec(), 100};
    std::ofstream out(dir.Join("j"), std::ios::binary | std::ios::app);
    for (const EncodedJournalRecord& r : EncodeJournalGroups({&again, 1})) out << r.bytes;
  }
  EXPECT_EQ(Open(dir.Join("j")).status.code(), StatusCode::kDataLoss);
}

TEST(JournalRecovery, AFirstWriteCutShortIsAnEmptyJournalAndAnythingElseIsNotAJournal) {
  TempDir dir;
  EXPECT_TRUE(Open(dir.Write("a", std::string("STKJ", 4))).status.ok());
  EXPECT_TRUE(Open(dir.Write("b", std::string("STKJRN0\0\0\0\0\0", 12))).status.ok());
  Opened garbage = Open(dir.Write("c", "certainly not a journal"));
  EXPECT_EQ(garbage.status.code(), StatusCode::kDataLoss);
  EXPECT_NE(garbage.status.message().find("not a stoker journal (bad magic at byte 0)"), std::string::npos);
}

// Regression: a journal cut back at a record boundary (two records of four), to its magic, or to nothing was
// replayed as a shorter history: the coordinator started with jobs and progress missing and said only INFO. The
// high-water mark beside it now refuses all three, naming both lengths.
TEST(JournalRecovery, AJournalCutBackAtARecordBoundaryIsRefusedByItsHighWaterMark) {
  for (const uint64_t keep : {uint64_t{2}, uint64_t{8}, uint64_t{0}}) {
    TempDir dir;
    const std::string path = dir.Join("j");
    const std::vector<uint64_t> starts = WriteJournal(path, 4);
    const uint64_t cut = keep == 2 ? starts[2] : keep;
    std::filesystem::resize_file(path, cut);
    Opened o = Open(path);
    EXPECT_EQ(o.status.code(), StatusCode::kDataLoss) << "cut to " << cut << ": " << o.status.ToString();
    EXPECT_NE(o.status.message().find("holds " + std::to_string(cut) + " bytes of whole records, "
                                      "but its high-water mark says"),
              std::string::npos)
        << o.status.message();
    EXPECT_NE(o.status.message().find(path + ".mark) aside"), std::string::npos) << o.status.message();
  }
}

// A bit flipped in the last record after it was synced: without a mark it can only be taken for a torn write and
// cut off (logged); the mark says it was synced, so the start is refused and the file left as it is, for repair.
TEST(JournalRecovery, ADamagedLastRecordThatWasSyncedIsRefusedAndKept) {
  TempDir dir;
  const std::string path = dir.Join("j");
  const std::vector<uint64_t> starts = WriteJournal(path, 3);
  const uint64_t size = std::filesystem::file_size(path);
  PatchU32(path, size - 4, 0xdeadbeef);  // inside the last record's payload
  Opened o = Open(path);
  EXPECT_EQ(o.status.code(), StatusCode::kDataLoss) << o.status.ToString();
  EXPECT_NE(o.status.message().find("holds " + std::to_string(starts[2]) + " bytes of whole records"),
            std::string::npos)
      << o.status.message();
  EXPECT_EQ(std::filesystem::file_size(path), size) << "nothing is cut off a journal that is refused";
}

// What the mark must not refuse: a torn last write (the mark never counts unsynced bytes), a journal moved aside
// (a fresh start, which resets the mark), and a mark that is itself damaged (the check is skipped, with a warning).
TEST(JournalRecovery, TheHighWaterMarkRefusesNoTornTailFreshStartOrDamagedMark) {
  TempDir dir;
  const std::string path = dir.Join("j");
  WriteJournal(path, 3);
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out << std::string(100, '\x7f');  // a torn tail
  }
  EXPECT_TRUE(Open(path).status.ok());
  std::filesystem::rename(path, dir.Join("moved-aside"));
  Opened fresh = Open(path);
  ASSERT_TRUE(fresh.status.ok()) << fresh.status.ToString();
  EXPECT_EQ(fresh.updates, 0u);
  WriteJournal(path, 1);  // the new journal, shorter than the old one was: its own mark
  EXPECT_TRUE(Open(path).status.ok());
  dir.Write("j.mark", "STKMRK01 and then damage");
  std::filesystem::resize_file(path, 8);
  EXPECT_TRUE(Open(path).status.ok()) << "a damaged mark checks nothing";
}

TEST(JournalRecovery, AMarkIsWholeAndIntactOrNotAMark) {
  const std::string mark = EncodeJournalMark(123456789);
  auto bytes = [](const std::string& s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  ASSERT_EQ(mark.size(), kJournalMarkBytes);
  EXPECT_EQ(*DecodeJournalMark(bytes(mark)), 123456789u);
  for (size_t i = 0; i < mark.size(); ++i) {
    std::string damaged = mark;
    damaged[i] ^= 0x10;
    EXPECT_FALSE(DecodeJournalMark(bytes(damaged)).ok()) << "byte " << i;
  }
  EXPECT_FALSE(DecodeJournalMark(bytes(mark.substr(0, 23))).ok());
  EXPECT_FALSE(DecodeJournalMark(bytes(mark + "x")).ok());
}

}  // namespace
}  // namespace stoker::coordinator
