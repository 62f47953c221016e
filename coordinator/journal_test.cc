// The journal on real files: replay, coalescing, torn tails, corruption in the middle, compaction, and writes that
// fail (a full volume). What recovery makes of every kind of damage is journal_recovery_test.cc.
#include "coordinator/journal.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tests/support/specs.h"
#include "tests/support/temp_dir.h"

namespace stoker::coordinator {
namespace {

using testing::SmallJobSpec;
using testing::TempDir;

// The real file system, except that writes can be made to fail the way a full volume fails them: with `full`, an
// append writes `partial` bytes and then reports ENOSPC; with `full` or `no_room_for_copies`, atomic whole-file
// writes (compaction's new file) fail outright. It counts the directory syncs and atomic writes asked of it.
class FullVolumeEnv final : public Env {
 public:
  bool full = false;
  bool no_room_for_copies = false;
  size_t partial = 7;
  int directory_syncs = 0;
  int atomic_writes = 0;

  StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& p) override { return real_.OpenForRead(p); }
  StatusOr<std::string> RealPath(const std::string& p) override { return real_.RealPath(p); }
  StatusOr<FileInfo> Stat(const std::string& p) override { return real_.Stat(p); }
  StatusOr<std::vector<std::string>> ListDirectory(const std::string& p) override { return real_.ListDirectory(p); }
  Status WriteFileAtomically(const std::string& p, const void* data, size_t size) override {
    if (full || no_room_for_copies) return ResourceExhaustedError("cannot write " + p + ".tmp: No space left on device");
    ++atomic_writes;
    return real_.WriteFileAtomically(p, data, size);  // PosixEnv's: tmp, fsync, rename, fsync of the directory
  }
  Status CreateDirectories(const std::string& p) override { return real_.CreateDirectories(p); }
  StatusOr<std::unique_ptr<WritableFile>> OpenForAppend(const std::string& p) override;
  Status Truncate(const std::string& p, uint64_t size) override { return real_.Truncate(p, size); }
  Status Overwrite(const std::string& p, const void* data, size_t size, bool sync) override {
    StatusOr<FileInfo> info = real_.Stat(p);
    if (full && (!info.ok() || !info->exists)) return ResourceExhaustedError("cannot create " + p + ": No space left");
    return real_.Overwrite(p, data, size, sync);  // in place: no new space
  }
  Status Rename(const std::string& from, const std::string& to) override { return real_.Rename(from, to); }
  Status SyncDirectory(const std::string& p) override {
    ++directory_syncs;
    return real_.SyncDirectory(p);
  }
  StatusOr<VolumeSpace> Space(const std::string& p) override { return real_.Space(p); }

 private:
  class File final : public WritableFile {
   public:
    File(FullVolumeEnv& env, std::unique_ptr<WritableFile> real) : env_(env), real_(std::move(real)) {}
    Status Append(const void* data, size_t size) override {
      if (!env_.full) return real_->Append(data, size);
      STOKER_RETURN_IF_ERROR(real_->Append(data, std::min(size, env_.partial)));
      return ResourceExhaustedError("cannot append: No space left on device");
    }
    Status Sync() override { return real_->Sync(); }
    uint64_t Size() const override { return real_->Size(); }
    Status Truncate(uint64_t size) override { return real_->Truncate(size); }

   private:
    FullVolumeEnv& env_;
    std::unique_ptr<WritableFile> real_;
  };
  PosixEnv real_;
};

StatusOr<std::unique_ptr<WritableFile>> FullVolumeEnv::OpenForAppend(const std::string& p) {
  STOKER_ASSIGN_OR_RETURN(auto file, real_.OpenForAppend(p));
  return std::unique_ptr<WritableFile>(std::make_unique<File>(*this, std::move(file)));
}

std::vector<Update> Replay(const std::string& path, JournalReplay* replay, Status* status = nullptr) {
  PosixEnv env;
  std::vector<Update> seen;
  auto journal = Journal::Open(env, path, JournalOptions{}, [&](const Update& u) { seen.push_back(u); }, replay);
  if (status != nullptr) *status = journal.status();
  return seen;
}

// Options that compact the journal once it passes `bytes`.
JournalOptions CompactingPast(uint64_t bytes) {
  JournalOptions options;
  options.compact_threshold_bytes = bytes;
  return options;
}

// A journal at dir/j that compacts past 2048 bytes, and the state it records as the coordinator does: Record
// applies an update to the state, appends it and syncs (compacting to the state's snapshot when due).
struct CompactingJournal {
  CompactingJournal(Env& env, const TempDir& dir, JournalReplay* replay)
      : opened(Journal::Open(env, dir.Join("j"), CompactingPast(2048), [](const Update&) {}, replay)) {}

  Status Record(const Update& u) {
    state.Apply(u);
    (*opened)->Append(u);
    return (*opened)->Sync([&] { return state.Snapshot(); });
  }

  StatusOr<std::unique_ptr<Journal>> opened;
  CoordinatorState state;
};

// A journal at dir/j that recorded the job (SmallJobSpec, 100 samples) and synced it.
std::unique_ptr<Journal> JournalWithTheJob(Env& env, const TempDir& dir, JournalReplay* replay) {
  auto journal = Journal::Open(env, dir.Join("j"), JournalOptions{}, [](const Update&) {}, replay);
  EXPECT_TRUE(journal.ok()) << journal.status().ToString();
  if (!journal.ok()) return nullptr;
  (*journal)->Append(JobCreated{SmallJobSpec(), 100});
  EXPECT_TRUE((*journal)->Sync().ok());
  return std::move(*journal);
}

TEST(Journal, ReplaysWhatWasSyncedAndCoalescesProgress) {
  TempDir dir;
  PosixEnv env;
  JournalReplay replay;
  {
    auto journal = Journal::Open(env, dir.Join("j"), JournalOptions{}, [](const Update&) {}, &replay);
    ASSERT_TRUE(journal.ok()) << journal.status().ToString();
    (*journal)->Append(JobCreated{SmallJobSpec(), 100});
    (*journal)->Append(RankSessionStarted{"j", 0, "c-1", 0, 8});
    for (uint64_t i = 1; i <= 50; ++i) (*journal)->Append(RankProgress{"j", 0, i, i - 1});  // one record
    (*journal)->Append(RankProgress{"j", 1, 3, 2});
    (*journal)->Append(WorkerJoined{"w-1", "tcp://x:1", 4});
    ASSERT_TRUE((*journal)->Sync().ok());
    EXPECT_EQ((*journal)->records_written(), 5u);
    (*journal)->Append(AttemptsReserved{"j", 0, 2048});
    (*journal)->Append(WorkerLeft{"w-1"});
    JobSpec reshaped = SmallJobSpec();
    reshaped.world_size = 3;
    reshaped.origin_epoch = 0;
    reshaped.origin_offset = 24;
    (*journal)->Append(JobReshaped{reshaped, 2049, 1});
    ASSERT_TRUE((*journal)->Sync().ok());
    (*journal)->Append(RankProgress{"j", 0, 99, 99});  // never synced: lost, as after a crash
  }
  std::vector<Update> seen = Replay(dir.Join("j"), &replay);
  ASSERT_EQ(seen.size(), 8u);
  EXPECT_EQ(replay.torn_bytes, 0u);
  EXPECT_EQ(std::get<JobCreated>(seen[0]).spec, SmallJobSpec());
  EXPECT_EQ(std::get<RankSessionStarted>(seen[1]).window, 8u);
  EXPECT_EQ(std::get<RankProgress>(seen[2]).received, 50u);  // the last of the 50 acks
  EXPECT_EQ(std::get<AttemptsReserved>(seen[5]).up_to, 2048u);
  EXPECT_EQ(std::get<WorkerLeft>(seen[6]).worker_id, "w-1");
  EXPECT_EQ(std::get<JobReshaped>(seen[7]).spec.origin_offset, 24u);
  CoordinatorState state;
  for (size_t i = 0; i < 7; ++i) state.Apply(seen[i]);
  EXPECT_EQ(state.FindJob("j")->ranks[0].received, 50u);
  EXPECT_TRUE(state.workers().empty());
  // The shape change: three fresh ranks whose attempts start above every old one.
  state.Apply(seen[7]);
  const JobRecord& job = *state.FindJob("j");
  ASSERT_EQ(job.ranks.size(), 3u);
  EXPECT_EQ(job.ranks[0].received, 0u);
  EXPECT_EQ(job.ranks[2].attempts_reserved, 2049u);
  EXPECT_EQ(job.shape_changes, 1u);
  CoordinatorState rebuilt;
  for (const Update& u : state.Snapshot()) rebuilt.Apply(u);
  EXPECT_EQ(rebuilt.FindJob("j")->spec, job.spec);
  EXPECT_EQ(rebuilt.FindJob("j")->shape_changes, 1u);
  EXPECT_EQ(rebuilt.FindJob("j")->attempts_floor, 2049u);
  EXPECT_EQ(rebuilt.FindJob("j")->ranks[2].attempts_reserved, 2049u);
}

TEST(Journal, TornTailIsTruncatedAndEverythingBeforeItKept) {
  TempDir dir;
  PosixEnv env;
  JournalReplay replay;
  uint64_t good_size;
  {
    auto journal = JournalWithTheJob(env, dir, &replay);
    ASSERT_NE(journal, nullptr);
    good_size = journal->size_bytes();
    journal->Append(RankSessionStarted{"j", 1, "c-2", 5, 4});
    ASSERT_TRUE(journal->TEST_WriteTorn(0.6).ok());  // crash in the middle of the append
  }
  ASSERT_GT(std::filesystem::file_size(dir.Join("j")), good_size);
  std::vector<Update> seen = Replay(dir.Join("j"), &replay);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_GT(replay.torn_bytes, 0u);
  EXPECT_EQ(std::filesystem::file_size(dir.Join("j")), good_size);
  // And the journal takes new records after the truncation.
  {
    auto journal = Journal::Open(env, dir.Join("j"), JournalOptions{}, [](const Update&) {}, &replay);
    (*journal)->Append(RankSessionStarted{"j", 1, "c-2", 5, 4});
    ASSERT_TRUE((*journal)->Sync().ok());
  }
  EXPECT_EQ(Replay(dir.Join("j"), &replay).size(), 2u);
}

TEST(Journal, CorruptionInTheMiddleRefusesToStart) {
  TempDir dir;
  PosixEnv env;
  JournalReplay replay;
  {
    auto journal = JournalWithTheJob(env, dir, &replay);
    ASSERT_NE(journal, nullptr);
    journal->Append(RankSessionStarted{"j", 0, "c-1", 0, 8});
    ASSERT_TRUE(journal->Sync().ok());
    journal->Append(RankProgress{"j", 0, 7, 7});
    ASSERT_TRUE(journal->Sync().ok());
  }
  // Flip a byte inside the first record's payload.
  {
    std::fstream f(dir.Join("j"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8 + 16 + 20);
    char c;
    f.read(&c, 1);
    f.seekp(8 + 16 + 20);
    c ^= 0x5a;
    f.write(&c, 1);
  }
  Status status;
  Replay(dir.Join("j"), &replay, &status);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("damaged at byte 8 (record 1"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("a valid record follows at byte"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("restore the journal from a backup"), std::string::npos);
  // Not a journal at all.
  TempDir other;
  other.Write("j", "this is not a journal at all");
  Replay(other.Join("j"), &replay, &status);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("not a stoker journal"), std::string::npos);
}

TEST(Journal, CompactionRewritesTheStateAndKeepsItReplayable) {
  TempDir dir;
  PosixEnv env;
  JournalReplay replay;
  {
    CompactingJournal journal(env, dir, &replay);
    ASSERT_TRUE(journal.opened.ok()) << journal.opened.status().ToString();
    ASSERT_TRUE(journal.Record(JobCreated{SmallJobSpec(), 100}).ok());
    ASSERT_TRUE(journal.Record(RankSessionStarted{"j", 0, "c-1", 0, 8}).ok());
    for (uint64_t i = 1; i <= 400; ++i) ASSERT_TRUE(journal.Record(RankProgress{"j", 0, i, i}).ok());
    EXPECT_LT((*journal.opened)->size_bytes(), 2048u + 200);  // compacted, not 400 records long
  }
  CoordinatorState replayed;
  Replay(dir.Join("j"), &replay);
  for (const Update& u : Replay(dir.Join("j"), &replay)) replayed.Apply(u);
  EXPECT_EQ(replayed.FindJob("j")->ranks[0].received, 400u);
  EXPECT_EQ(replayed.FindJob("j")->ranks[0].client_id, "c-1");
  // The high-water mark follows the compacted file: it opens, and cut back to its magic it is refused.
  std::filesystem::resize_file(dir.Join("j"), 8);
  auto cut = Journal::Open(env, dir.Join("j"), JournalOptions{}, [](const Update&) {}, &replay);
  EXPECT_EQ(cut.status().code(), StatusCode::kDataLoss) << cut.status().ToString();
}

// Regression: on a full volume a failed sync made the coordinator exit, and it crash-looped. Now a failed write
// leaves nothing of itself in the file and keeps every update pending; the next sync, once there is room, writes
// them all, and a replay sees each exactly once.
TEST(Journal, AWriteThatFailsForLackOfSpaceLeavesNothingBehindAndIsWrittenLater) {
  TempDir dir;
  FullVolumeEnv env;
  JournalReplay replay;
  std::unique_ptr<Journal> journal = JournalWithTheJob(env, dir, &replay);
  ASSERT_NE(journal, nullptr);
  const uint64_t good = journal->size_bytes();

  env.full = true;
  journal->Append(RankSessionStarted{"j", 0, "c-1", 0, 8});
  journal->Append(RankProgress{"j", 0, 3, 2});
  Status failed = journal->Sync();
  EXPECT_EQ(failed.code(), StatusCode::kResourceExhausted) << failed.ToString();
  EXPECT_TRUE(journal->HasUnsynced());
  EXPECT_EQ(std::filesystem::file_size(dir.Join("j")), good) << "part of the failed write was left in the file";
  journal->Append(RankProgress{"j", 0, 5, 4});  // supersedes the pending ack of the same rank
  EXPECT_EQ(journal->Sync().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(std::filesystem::file_size(dir.Join("j")), good);

  env.full = false;
  ASSERT_TRUE(journal->Sync().ok());
  EXPECT_FALSE(journal->HasUnsynced());
  journal.reset();
  std::vector<Update> seen = Replay(dir.Join("j"), &replay);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(replay.torn_bytes, 0u);
  EXPECT_EQ(std::get<RankSessionStarted>(seen[1]).client_id, "c-1");
  EXPECT_EQ(std::get<RankProgress>(seen[2]).received, 5u);
}

// Also (found when the journal's durability was reviewed): neither creating the journal nor compaction's rename
// made the directory durable, so a crash could lose the file's name (and every record with it) or the compacted
// file. Creation syncs the directory once, reopening an existing journal needs no sync, and compaction writes
// through WriteFileAtomically, which fsyncs the directory after its rename.
TEST(Journal, ACompactionThatFailsLosesNothingAndIsTriedAgainLater) {
  TempDir dir;
  FullVolumeEnv env;
  JournalReplay replay;
  CompactingJournal compacting(env, dir, &replay);
  auto& journal = compacting.opened;
  ASSERT_TRUE(journal.ok());
  EXPECT_EQ(env.directory_syncs, 1) << "creating the journal must sync its directory";
  ASSERT_TRUE(compacting.Record(JobCreated{SmallJobSpec(), 100}).ok());
  ASSERT_TRUE(compacting.Record(RankSessionStarted{"j", 0, "c-1", 0, 8}).ok());
  env.no_room_for_copies = true;  // appends fit, a whole new file does not
  uint64_t i = 1;
  for (; (*journal)->size_bytes() <= 2048 + 200; ++i) ASSERT_TRUE(compacting.Record(RankProgress{"j", 0, i, i}).ok());
  EXPECT_EQ((*journal)->compaction_failures(), 1u) << "tried once, then again only after more growth";
  env.no_room_for_copies = false;
  for (; (*journal)->size_bytes() > 2048; ++i) ASSERT_TRUE(compacting.Record(RankProgress{"j", 0, i, i}).ok());
  EXPECT_EQ(env.atomic_writes, 1) << "the compaction replaces the journal by an atomic (directory-synced) write";
  journal->reset();
  const int syncs = env.directory_syncs;
  ASSERT_TRUE(Journal::Open(env, dir.Join("j"), CompactingPast(2048), [](const Update&) {}, &replay).ok());
  EXPECT_EQ(env.directory_syncs, syncs) << "an existing journal's name is durable already";
  CoordinatorState replayed;
  for (const Update& u : Replay(dir.Join("j"), &replay)) replayed.Apply(u);
  EXPECT_EQ(replayed.FindJob("j")->ranks[0].received, i - 1);
}

// A fresh start on a full volume needs no new space with a high-water mark either: without a mark none is
// created, and an old one (the journal moved aside) is zeroed in place. The old mark then judges nothing.
TEST(Journal, AFreshStartOnAFullVolumeNeedsNoNewSpaceForItsMark) {
  TempDir dir;
  FullVolumeEnv env;
  env.full = true;
  JournalReplay replay;
  ASSERT_TRUE(Journal::Open(env, dir.Join("j"), JournalOptions{}, [](const Update&) {}, &replay).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.Join("j.mark")));
  env.full = false;
  { JournalWithTheJob(env, dir, &replay); }
  ASSERT_TRUE(std::filesystem::exists(dir.Join("j.mark")));
  std::filesystem::rename(dir.Join("j"), dir.Join("moved-aside"));
  env.full = true;
  ASSERT_TRUE(Journal::Open(env, dir.Join("j"), JournalOptions{}, [](const Update&) {}, &replay).ok());
  env.full = false;
  std::filesystem::resize_file(dir.Join("j"), 0);  // the new journal is empty: the zeroed mark allows it
  EXPECT_TRUE(Journal::Open(env, dir.Join("j"), JournalOptions{}, [](const Update&) {}, &replay).ok());
}

TEST(Journal, ANewJournalWritesItsMagicWithItsFirstRecordAndNothingBefore) {
  TempDir dir;
  PosixEnv env;
  JournalReplay replay;
  auto journal = Journal::Open(env, dir.Join("j"), JournalOptions{}, [](const Update&) {}, &replay);
  ASSERT_TRUE(journal.ok());
  EXPECT_EQ(std::filesystem::file_size(dir.Join("j")), 0u) << "a start on a full volume must not need a write";
  (*journal)->Append(JobCreated{SmallJobSpec(), 100});
  ASSERT_TRUE((*journal)->Sync().ok());
  std::ifstream in(dir.Join("j"), std::ios::binary);
  char magic[8];
  in.read(magic, 8);
  EXPECT_EQ(std::string(magic, 8), "STKJRN02");
}

}  // namespace
}  // namespace stoker::coordinator
