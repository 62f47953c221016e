// The journal on real files: replay, coalescing, torn tails, corruption in the middle, compaction.
#include "coordinator/journal.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"

namespace stoker::coordinator {
namespace {

using testing::TempDir;

JobSpec Spec() {
  JobSpec spec;
  spec.name = "j";
  spec.manifest_path = "/m";
  spec.manifest_fingerprint = 42;
  spec.world_size = 2;
  spec.batch_size = 4;
  return spec;
}

std::vector<Update> Replay(const std::string& path, JournalReplay* replay, Status* status = nullptr) {
  PosixEnv env;
  std::vector<Update> seen;
  auto journal = Journal::Open(env, path, JournalOptions{}, [&](const Update& u) { seen.push_back(u); }, replay);
  if (status != nullptr) *status = journal.status();
  return seen;
}

TEST(Journal, ReplaysWhatWasSyncedAndCoalescesProgress) {
  TempDir dir;
  PosixEnv env;
  JournalReplay replay;
  {
    auto journal = Journal::Open(env, dir.Join("j"), JournalOptions{}, [](const Update&) {}, &replay);
    ASSERT_TRUE(journal.ok()) << journal.status().ToString();
    (*journal)->Append(JobCreated{Spec(), 100});
    (*journal)->Append(RankSessionStarted{"j", 0, "c-1", 0, 8});
    for (uint64_t i = 1; i <= 50; ++i) (*journal)->Append(RankProgress{"j", 0, i, i - 1});  // one record
    (*journal)->Append(RankProgress{"j", 1, 3, 2});
    (*journal)->Append(WorkerJoined{"w-1", "tcp://x:1", 4});
    ASSERT_TRUE((*journal)->Sync().ok());
    EXPECT_EQ((*journal)->records_written(), 5u);
    (*journal)->Append(AttemptsReserved{"j", 0, 2048});
    (*journal)->Append(WorkerLeft{"w-1"});
    ASSERT_TRUE((*journal)->Sync().ok());
    (*journal)->Append(RankProgress{"j", 0, 99, 99});  // never synced: lost, as after a crash
  }
  std::vector<Update> seen = Replay(dir.Join("j"), &replay);
  ASSERT_EQ(seen.size(), 7u);
  EXPECT_EQ(replay.torn_bytes, 0u);
  EXPECT_EQ(std::get<JobCreated>(seen[0]).spec, Spec());
  EXPECT_EQ(std::get<RankSessionStarted>(seen[1]).window, 8u);
  EXPECT_EQ(std::get<RankProgress>(seen[2]).received, 50u);  // the last of the 50 acks
  EXPECT_EQ(std::get<AttemptsReserved>(seen[5]).up_to, 2048u);
  EXPECT_EQ(std::get<WorkerLeft>(seen[6]).worker_id, "w-1");
  CoordinatorState state;
  for (const Update& u : seen) state.Apply(u);
  EXPECT_EQ(state.FindJob("j")->ranks[0].received, 50u);
  EXPECT_TRUE(state.workers().empty());
}

TEST(Journal, TornTailIsTruncatedAndEverythingBeforeItKept) {
  TempDir dir;
  PosixEnv env;
  JournalReplay replay;
  uint64_t good_size;
  {
    auto journal = Journal::Open(env, dir.Join("j"), JournalOptions{}, [](const Update&) {}, &replay);
    (*journal)->Append(JobCreated{Spec(), 100});
    ASSERT_TRUE((*journal)->Sync().ok());
    good_size = (*journal)->size_bytes();
    (*journal)->Append(RankSessionStarted{"j", 1, "c-2", 5, 4});
    ASSERT_TRUE((*journal)->TEST_WriteTorn(0.6).ok());  // crash in the middle of the append
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
    auto journal = Journal::Open(env, dir.Join("j"), JournalOptions{}, [](const Update&) {}, &replay);
    (*journal)->Append(JobCreated{Spec(), 100});
    ASSERT_TRUE((*journal)->Sync().ok());
    (*journal)->Append(RankSessionStarted{"j", 0, "c-1", 0, 8});
    ASSERT_TRUE((*journal)->Sync().ok());
    (*journal)->Append(RankProgress{"j", 0, 7, 7});
    ASSERT_TRUE((*journal)->Sync().ok());
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
  EXPECT_NE(status.message().find("corrupt at byte 8 (record 1)"), std::string::npos) << status.message();
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
  JournalOptions options;
  options.compact_threshold_bytes = 2048;
  CoordinatorState state;
  {
    auto journal = Journal::Open(env, dir.Join("j"), options, [](const Update&) {}, &replay);
    auto apply = [&](const Update& u) {
      state.Apply(u);
      (*journal)->Append(u);
    };
    apply(JobCreated{Spec(), 100});
    apply(RankSessionStarted{"j", 0, "c-1", 0, 8});
    for (uint64_t i = 1; i <= 400; ++i) {
      apply(RankProgress{"j", 0, i, i});
      ASSERT_TRUE((*journal)->Sync([&] { return state.Snapshot(); }).ok());
    }
    EXPECT_LT((*journal)->size_bytes(), 2048u + 200);  // compacted, not 400 records long
  }
  CoordinatorState replayed;
  Replay(dir.Join("j"), &replay);
  for (const Update& u : Replay(dir.Join("j"), &replay)) replayed.Apply(u);
  EXPECT_EQ(replayed.FindJob("j")->ranks[0].received, 400u);
  EXPECT_EQ(replayed.FindJob("j")->ranks[0].client_id, "c-1");
}

}  // namespace
}  // namespace stoker::coordinator
