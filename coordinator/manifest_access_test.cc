// What a client's job spec can make the coordinator open: regular files only, never waited on; one answer for every
// manifest it cannot use (no existence oracle); only under --manifest-dirs when set; epochs and names validated.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>

#include "coordinator/impl_test_fixture.h"

namespace stoker::coordinator {
namespace {

class ManifestAccessTest : public CoordinatorImplTest {
 protected:
  Status RegisterWith(const std::string& manifest_path, const std::string& job = "job") {
    JobSpec spec = spec_;
    spec.name = job;
    spec.manifest_path = manifest_path;
    return impl_->RegisterClient({"c-" + job, job, 0, spec, 4}).status();
  }
  // The refusal for `path`, with the path (the client's own words) replaced by PATH.
  std::string Refusal(const std::string& path, const std::string& job = "job") {
    Status s = RegisterWith(path, job);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << path << ": " << s.ToString();
    std::string message(s.message());
    const size_t at = message.find(path);
    return at == std::string::npos ? message : message.replace(at, path.size(), "PATH");
  }
};

// Regression: a client-chosen manifest path was an existence oracle (NotFound, PermissionDenied,
// "not a stoker manifest" told apart), and a FIFO there froze the coordinator's main loop for 18 s.
TEST_F(ManifestAccessTest, EveryUnusableManifestGetsTheSameAnswerAndAFifoIsNotWaitedOn) {
  ASSERT_EQ(::mkfifo(dir_.Join("fifo").c_str(), 0600), 0);
  dir_.Write("junk", "not a manifest at all, but long enough to read a magic from");
  std::filesystem::create_directories(dir_.Join("subdir"));
  const std::string missing = Refusal(dir_.Join("missing.stoker"));
  EXPECT_NE(missing.find("not a readable stoker manifest"), std::string::npos) << missing;
  EXPECT_EQ(Refusal(dir_.Join("junk")), missing);
  EXPECT_EQ(Refusal(dir_.Join("subdir")), missing);
  EXPECT_EQ(Refusal(dir_.Join("junk/below")), missing);
  // Answered at once. Were the FIFO waited on, the deadline fails the test, and a writer opening the FIFO's other
  // end lets the waiting open return.
  auto fifo = std::async(std::launch::async, [&] { return Refusal(dir_.Join("fifo")); });
  if (fifo.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "the coordinator waited on a FIFO for 10 s";
    const int writer = ::open(dir_.Join("fifo").c_str(), O_WRONLY | O_NONBLOCK);
    if (writer >= 0) ::close(writer);
  }
  EXPECT_EQ(fifo.get(), missing);
  EXPECT_EQ(impl_->Stats().jobs, 0u);
  EXPECT_TRUE(RegisterWith(dir_.Join("m.stoker")).ok());
}

// A client may ask for bad paths as fast as it can send: the log gets the first 16 refusals, then each power of two.
TEST_F(ManifestAccessTest, RefusalsFloodingTheLogAreThinned) {
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(RegisterWith(dir_.Join("missing-" + std::to_string(i))).ok());
  const std::string log = ::testing::internal::GetCapturedStderr();
  size_t lines = 0;
  for (size_t at = log.find("manifest refused"); at != std::string::npos; at = log.find("manifest refused", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 16u + 5u) << log;  // 1..16, then 32, 64, 128, 256 and 512
  EXPECT_NE(log.find("512 refused so far"), std::string::npos) << log;
}

TEST_F(ManifestAccessTest, WithManifestDirsOnlyManifestsInsideThemAreOpened) {
  std::filesystem::create_directories(dir_.Join("allowed"));
  std::filesystem::copy_file(dir_.Join("m.stoker"), dir_.Join("allowed/m.stoker"));
  std::filesystem::create_symlink(dir_.Join("m.stoker"), dir_.Join("allowed/escape.stoker"));
  options_.manifest_dirs = {dir_.Join("nowhere"), dir_.Join("allowed") + "/"};
  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  const std::string outside = Refusal(dir_.Join("m.stoker"));
  EXPECT_NE(outside.find("--manifest-dirs"), std::string::npos) << outside;
  EXPECT_EQ(Refusal(dir_.Join("allowed/../m.stoker")), outside);
  EXPECT_EQ(Refusal(dir_.Join("allowed/escape.stoker")), outside);  // a link out of the directory
  EXPECT_EQ(Refusal(dir_.Join("allowed/missing.stoker")), outside);
  EXPECT_TRUE(RegisterWith(dir_.Join("allowed/m.stoker")).ok());
  EXPECT_EQ(impl_->Stats().jobs, 1u);
}

// Regression: a 1,000,000-epoch job was accepted.
TEST_F(ManifestAccessTest, AJobSpecPastTheEpochOrNameLimitsIsRefused) {
  spec_.epochs = kMaxEpochs + 1;
  EXPECT_EQ(RegisterWith(dir_.Join("m.stoker")).code(), StatusCode::kInvalidArgument);
  spec_.epochs = 2;
  EXPECT_EQ(RegisterWith(dir_.Join("m.stoker"), std::string(65, 'j')).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(impl_->Stats().jobs, 0u);
}

// A journal written before the epoch limit may hold a job past it: the coordinator starts, and forgets that job.
TEST_F(ManifestAccessTest, AJournalledJobPastTodaysLimitsIsForgottenNotFatal) {
  JobSpec old = spec_;
  old.name = "old";
  old.epochs = kMaxEpochs + 1;
  impl_->Restore(JobCreated{old, 100});
  impl_->Restore(RankSessionStarted{"old", 0, "c-1", 0, 4, ""});
  impl_->Restore(JobCreated{spec_, 100});
  impl_->FinishRestore();
  EXPECT_EQ(impl_->Stats().jobs, 1u);
  for (const Update& u : impl_->Snapshot()) {
    if (const auto* created = std::get_if<JobCreated>(&u)) {
      EXPECT_EQ(created->spec.name, "job");
    }
  }
}

}  // namespace
}  // namespace stoker::coordinator
